//! Typed headers: the [`Header<T>`] extractor, the [`Headers`] extractor, and
//! [`TypedHeader`], which names a header and parses its value.

use std::fmt;

use crate::context::Context;
use crate::delivery::Headers;
use crate::extract::{FromContext, Rejection};
use crate::outcome::HandlerOutcome;
use crate::publish::CORRELATION_ID_HEADER;

/// A header with a name and a typed value: what [`Header<T>`] reads.
///
/// ```
/// use ruststream::TypedHeader;
///
/// /// The tenant a message belongs to, from its `x-tenant` header.
/// #[derive(Debug, PartialEq)]
/// struct Tenant(String);
///
/// impl TypedHeader for Tenant {
///     const NAME: &'static str = "x-tenant";
///
///     fn parse(value: &str) -> Result<Self, String> {
///         if value.is_empty() {
///             return Err("the tenant is empty".into());
///         }
///         Ok(Tenant(value.to_owned()))
///     }
/// }
///
/// assert_eq!(Tenant::parse("acme"), Ok(Tenant("acme".into())));
/// ```
pub trait TypedHeader: Sized + Send {
    /// The header's name.
    const NAME: &'static str;

    /// Reads the value; `Err` says why it is malformed.
    fn parse(value: &str) -> Result<Self, String>;
}

/// The correlation id a message carries ([`CORRELATION_ID_HEADER`], `x-correlation-id`): what
/// the runtime copies from a handler's input to everything it publishes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CorrelationId(pub String);

impl TypedHeader for CorrelationId {
    const NAME: &'static str = CORRELATION_ID_HEADER;

    fn parse(value: &str) -> Result<Self, String> {
        Ok(Self(value.to_owned()))
    }
}

/// A named header, parsed: `Header(tenant): Header<Tenant>`.
///
/// A delivery without the header, or whose value does not parse, is refused before the
/// handler runs: it is settled with `drop()` (`+TERM` on JetStream; retrying cannot add a
/// header) and a warning names the header and the reason. Take `Option<Header<T>>` when the
/// header may be absent (a malformed one is still refused).
///
/// ```
/// use ruststream::{CorrelationId, Header, HandlerOutcome, subscriber};
///
/// #[derive(serde::Deserialize)]
/// struct Order {
///     id: u64,
/// }
///
/// #[subscriber("orders.placed")]
/// async fn trace(order: &Order, Header(id): Header<CorrelationId>) -> HandlerOutcome {
///     let _ = (order.id, id);
///     HandlerOutcome::ack()
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header<T>(pub T);

fn parse<T: TypedHeader>(ctx: &Context<'_>) -> Result<Option<T>, Rejection> {
    let Some(value) = ctx.headers().get(T::NAME) else {
        return Ok(None);
    };
    T::parse(value).map(Some).map_err(|why| {
        Rejection::new(
            HandlerOutcome::drop(),
            format!("header `{}` is malformed: {why}", T::NAME),
        )
    })
}

// Not listed among the extractors a failed bound suggests (the list stays short).
#[diagnostic::do_not_recommend]
impl<T: TypedHeader, S> FromContext<S> for Header<T> {
    fn from_context(ctx: &Context<'_>, _state: &S) -> Result<Self, Rejection> {
        parse::<T>(ctx)?.map(Header).ok_or_else(|| {
            Rejection::new(
                HandlerOutcome::drop(),
                format!(
                    "header `{}` is missing; take `Option<Header<..>>` if it is optional",
                    T::NAME
                ),
            )
        })
    }
}

// Not listed among the extractors a failed bound suggests (the list stays short).
#[diagnostic::do_not_recommend]
impl<T: TypedHeader, S> FromContext<S> for Option<Header<T>> {
    fn from_context(ctx: &Context<'_>, _state: &S) -> Result<Self, Rejection> {
        Ok(parse::<T>(ctx)?.map(Header))
    }
}

/// Every header, as it arrived.
// Not listed among the extractors a failed bound suggests (the list stays short).
#[diagnostic::do_not_recommend]
impl<S> FromContext<S> for Headers {
    fn from_context(ctx: &Context<'_>, _state: &S) -> Result<Self, Rejection> {
        Ok(ctx.headers().clone())
    }
}

impl<T: fmt::Display> fmt::Display for Header<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
