//! [`Response<T>`]: what a `reply` handler returns to answer the requester only, without
//! publishing the value to an `#[outgoing]` subject as an event.

use serde::Serialize;

use crate::context::Context;
use crate::handler::{OutputType, Outs, Publisher};
use crate::outcome::HandlerOutcome;
use crate::reserved::refuse_reserved_reply;

/// The answer to a request, sent to the requester's inbox and nowhere else.
///
/// A `reply` handler returning `Result<T, _>` with `T: Outgoing` sends `T` to the inbox **and**
/// publishes it to `T`'s `#[outgoing]` subject. Returning `Result<Response<T>, _>` sends only the
/// response: `T` needs `Serialize` (it may be `Outgoing` as well; its subject is then not
/// published to). A delivery without a reply inbox (a plain publish, a JetStream message) is
/// acknowledged and nothing is sent. See `docs/request-reply.md`.
///
/// ```
/// use ruststream::prelude::*;
///
/// #[derive(serde::Deserialize)]
/// struct Lookup { id: u64 }
///
/// #[derive(serde::Serialize)]
/// struct Price { cents: u64 }
///
/// #[subscriber("prices.lookup", reply)]
/// async fn price(lookup: &Lookup) -> Result<Response<Price>, HandlerOutcome> {
///     Ok(Response(Price { cents: lookup.id * 100 }))
/// }
/// # let _ = price;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Response<T>(pub T);

impl<T> Response<T> {
    /// The value the requester gets.
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> From<T> for Response<T> {
    fn from(value: T) -> Self {
        Self(value)
    }
}

/// A response publishes to no subject of its own: only the requester's inbox is written.
impl<T: Serialize + Send + Sync + 'static> Outs for Publisher<Response<T>> {
    fn reply_type() -> Option<&'static str> {
        Some(std::any::type_name::<T>())
    }

    fn output_types() -> Vec<OutputType> {
        Vec::new()
    }
}

impl<T: Serialize + Send + Sync + 'static, S> crate::__private::ReplyFor<S> for Response<T> {
    fn reply<'a>(
        ret: Result<Self, HandlerOutcome>,
        outs: &'a Publisher<Self>,
        ctx: &'a Context<'_>,
    ) -> impl Future<Output = Result<(), HandlerOutcome>> + Send + 'a {
        let _ = outs;
        respond(ret, ctx)
    }
}

/// Sends a `reply` handler's [`Response`] to the request's inbox, in the registration's format
/// with the input's correlation id; then acknowledges. No inbox: acknowledged, nothing sent. A
/// reserved reply subject: a warning, not answered, acknowledged (as for an `#[outgoing]`
/// reply). A send that failed is a `retry()`; a value that does not encode fails for good.
async fn respond<T: Serialize>(
    ret: Result<Response<T>, HandlerOutcome>,
    ctx: &Context<'_>,
) -> Result<(), HandlerOutcome> {
    let Response(value) = ret?;
    let Some(inbox) = ctx.delivery().reply_arc() else {
        tracing::debug!(
            registration = ctx.registration(),
            subject = ctx.subject(),
            "the delivery carries no reply inbox: the response is not sent"
        );
        return Ok(());
    };
    if let Err(err) = refuse_reserved_reply(inbox) {
        tracing::warn!(
            registration = ctx.registration(),
            subject = ctx.subject(),
            %err,
            "the request's reply subject is reserved: the request is not answered"
        );
        return Ok(());
    }
    let message = ctx
        .encoded(inbox, &value)
        .map_err(|err| crate::__private::reply_failed(ctx, &ctx.output_failed(err), inbox))?;
    ctx.respond(message)
        .await
        .map_err(|err| crate::__private::reply_failed(ctx, &ctx.output_failed(err), inbox))
}
