//! Support for the code the macros write. Not a public API.

use std::future::Future;
use std::process::ExitCode;

use serde::de::DeserializeOwned;

pub use futures;
pub use serde_json;
pub use tracing;

mod batch_reply;
mod schema_probe;

pub use self::batch_reply::{IntoBatchReplies, into_batch_replies, reply_batch};
pub use self::schema_probe::{
    SchemaFromDeserialize, SchemaFromJsonSchema, SchemaProbe, SchemaUnknown,
};

// One guard for every piece of user code a delivery runs (also `ruststream-nats`' source task).
pub use crate::panic::{guard, guard_async, guard_user_code, panic_message};

use crate::Handle;
use crate::app::App;
use crate::context::Context;
use crate::extract::FromContext;
use crate::handler::{BatchContext, BatchOutcome, HandleBatch, Outs, Publisher};
use crate::outcome::HandlerOutcome;
use crate::outgoing::Outgoing;
use crate::registration::{Descriptor, Registration};

/// The generated `main`.
pub fn main<A: App, F: FnOnce() -> A>(app: F) -> ExitCode {
    crate::app::cli::main(app)
}

/// The app state for a generated handler's `handle`, when it is called directly (by hand or by
/// a test): the runtime calls `handle_with_state` with the state as its type and never comes
/// here. Called on a context whose state is of another type, the delivery is retried.
pub fn state<'a, S: 'static>(ctx: &Context<'a>) -> Result<&'a S, HandlerOutcome> {
    ctx.state::<S>().ok_or_else(|| {
        tracing::error!(
            registration = ctx.registration(),
            expected = std::any::type_name::<S>(),
            "the handler was bound to another state type; retrying"
        );
        HandlerOutcome::retry()
    })
}

/// The same, for a batch handler's `handle_batch` called directly.
pub fn batch_state<'a, S: 'static>(ctx: &BatchContext<'a>) -> Result<&'a S, HandlerOutcome> {
    ctx.state::<S>().ok_or_else(|| {
        tracing::error!(
            expected = std::any::type_name::<S>(),
            "the batch handler was bound to another state type; retrying"
        );
        HandlerOutcome::retry()
    })
}

/// Runs one extractor, logging a rejection.
pub fn extract<T: FromContext<S>, S>(ctx: &Context<'_>, state: &S) -> Result<T, HandlerOutcome> {
    T::from_context(ctx, state).map_err(|rejection| {
        tracing::warn!(
            registration = ctx.registration(),
            subject = ctx.subject(),
            extractor = std::any::type_name::<T>(),
            reason = rejection.reason(),
            outcome = ?rejection.outcome(),
            "an extractor refused the delivery"
        );
        rejection.into_outcome()
    })
}

/// Runs one extractor for a batch, against its first message.
pub fn extract_batch<T: FromContext<S>, S>(
    ctx: &BatchContext<'_>,
    state: &S,
) -> Result<T, HandlerOutcome> {
    let Some(first) = ctx.context(0) else {
        return Err(HandlerOutcome::retry());
    };
    extract(&first, state)
}

/// The key a `#[subscriber]` that wrote `Ctx<u32>` gets after reporting it, so that the function
/// compiles without repeating the error; it is never read.
pub struct NotAKey<T>(std::marker::PhantomData<T>);

impl<T: Send + 'static> crate::extract::Key for NotAKey<T> {
    type Value = T;
    fn get(_ctx: &Context<'_>) -> Result<Self::Value, crate::extract::Rejection> {
        Err(crate::extract::Rejection::new(
            HandlerOutcome::drop(),
            "`Ctx` was given a type instead of a key",
        ))
    }
}

pub use crate::registration::{SubscriberFn, SubscriberName};

/// `<K as KeyChecked<{ is_key::<<K as Key>::Value>() }>>::Key`, which a `#[subscriber]` writes
/// for every `Ctx<K>` it takes, is `K` for a key. For a type that is no key, the compiler
/// reports `K: Key` once, at the handler's parameter, and the type is then an error it reports
/// nowhere else (not in the function, not where the handler is mounted).
pub trait KeyChecked<const CHECKED: bool> {
    /// The key.
    type Key: ?Sized;
}

impl<K: ?Sized> KeyChecked<true> for K {
    type Key = K;
}

/// `true`; what the compiler checks is that `T` (a key's value type) is well-formed.
pub const fn is_key<T: ?Sized>() -> bool {
    true
}

/// What a handler without `reply` may return.
#[diagnostic::on_unimplemented(
    message = "a subscriber returns `()`, `HandlerOutcome`, `Result<(), HandlerOutcome>` or `Result<(), E>` with `E: std::error::Error`, not `{Self}`",
    label = "this return type settles nothing",
    note = "`()` acknowledges; an `Err(e)` of your error type is settled as the registration's `.on_error(..)` says (`retry()` by default)",
    note = "to publish the returned value, add `reply` to the attribute and return `Result<T, HandlerOutcome>` or `Result<T, E>` with `T: Outgoing`"
)]
pub trait IntoResult {
    /// The handler's answer as the `Handle` trait gives it.
    fn into_result(self, ctx: &Context<'_>) -> Result<(), HandlerOutcome>;
}

#[diagnostic::do_not_recommend]
impl IntoResult for () {
    fn into_result(self, _ctx: &Context<'_>) -> Result<(), HandlerOutcome> {
        Ok(())
    }
}

impl IntoResult for HandlerOutcome {
    fn into_result(self, _ctx: &Context<'_>) -> Result<(), HandlerOutcome> {
        match self {
            HandlerOutcome::Ack => Ok(()),
            other => Err(other),
        }
    }
}

impl IntoResult for Result<(), HandlerOutcome> {
    fn into_result(self, _ctx: &Context<'_>) -> Result<(), HandlerOutcome> {
        self
    }
}

// Not recommended: `Result<(), String>` is then reported with `IntoResult`'s message, not as a
// missing `String: Error`.
#[diagnostic::do_not_recommend]
impl<E: std::error::Error + 'static> IntoResult for Result<(), E> {
    fn into_result(self, ctx: &Context<'_>) -> Result<(), HandlerOutcome> {
        self.map_err(|e| ctx.failure(&e))
    }
}

/// A handler's return, as the `Handle` trait gives it; checked at the return type's span.
pub fn into_result<T: IntoResult>(ret: T, ctx: &Context<'_>) -> Result<(), HandlerOutcome> {
    ret.into_result(ctx)
}

/// What a `reply` handler may return: `Result<T, HandlerOutcome>` or `Result<T, E>` with
/// `E: std::error::Error`.
#[diagnostic::on_unimplemented(
    message = "a `reply` subscriber returns `Result<T, HandlerOutcome>` or `Result<T, E>` with `E: std::error::Error`, not `{Self}`",
    label = "the error type is neither `HandlerOutcome` nor a `std::error::Error`",
    note = "derive `thiserror::Error` (or implement `std::error::Error`) for the error type, or return `Err(HandlerOutcome::..)`"
)]
pub trait IntoReply<T> {
    /// The value to publish, or the outcome.
    fn into_reply(self, ctx: &Context<'_>) -> Result<T, HandlerOutcome>;
}

impl<T> IntoReply<T> for Result<T, HandlerOutcome> {
    fn into_reply(self, _ctx: &Context<'_>) -> Result<T, HandlerOutcome> {
        self
    }
}

#[diagnostic::do_not_recommend]
impl<T, E: std::error::Error + 'static> IntoReply<T> for Result<T, E> {
    fn into_reply(self, ctx: &Context<'_>) -> Result<T, HandlerOutcome> {
        self.map_err(|e| ctx.failure(&e))
    }
}

/// A `reply` handler's return, as [`reply`] takes it.
pub fn into_reply<R: IntoReply<T>, T>(ret: R, ctx: &Context<'_>) -> Result<T, HandlerOutcome> {
    ret.into_reply(ctx)
}

/// What a batch handler may return.
#[diagnostic::on_unimplemented(
    message = "a batch subscriber returns `HandlerOutcome` or `Vec<HandlerOutcome>`, not `{Self}`",
    label = "this return type settles nothing",
    note = "return one `HandlerOutcome` for the whole batch, or `Vec<HandlerOutcome>` with one outcome per message"
)]
pub trait IntoBatchOutcome {
    /// The answer as the `HandleBatch` trait gives it.
    fn into_batch_outcome(self) -> BatchOutcome;
}

impl IntoBatchOutcome for HandlerOutcome {
    fn into_batch_outcome(self) -> BatchOutcome {
        BatchOutcome::All(self)
    }
}

impl IntoBatchOutcome for Vec<HandlerOutcome> {
    fn into_batch_outcome(self) -> BatchOutcome {
        BatchOutcome::Each(self)
    }
}

impl IntoBatchOutcome for BatchOutcome {
    fn into_batch_outcome(self) -> BatchOutcome {
        self
    }
}

/// A batch handler's return, as the `HandleBatch` trait gives it; checked at the return type's
/// span.
pub fn into_batch_outcome<T: IntoBatchOutcome>(ret: T) -> BatchOutcome {
    ret.into_batch_outcome()
}

/// Publishes a `reply` handler's value to its `#[outgoing]` subject (confirmed when a stream
/// stores it) and, when the delivery carries a reply inbox (a Core request), to the inbox as
/// the response; then acknowledges. A publish that failed for now retries instead; one that
/// fails for good is recorded on the context, and the settlement sends the input to the
/// dead-letter subject or ends it.
pub async fn reply<R: Outgoing>(
    ret: Result<R, HandlerOutcome>,
    outs: &Publisher<R>,
    ctx: &Context<'_>,
) -> Result<(), HandlerOutcome> {
    let _ = outs;
    let value = ret?;
    let failed = |err: &crate::PublishError, to: &str| reply_failed(ctx, err, to);
    let subject = crate::context::outgoing_subject(&value)
        .map_err(|err| failed(&ctx.output_failed(err), R::SUBJECT))?;
    // In the type's codec or the registration's format, with its `content-type`; for a Core request, the same
    // message also goes to the requester's inbox as the response (the publisher decides the
    // order: the response first unless a stream must confirm the output).
    ctx.publish_value(
        ctx.format_of::<R>(),
        subject,
        &value,
        ctx.delivery().reply_arc(),
    )
    .await
    .map_err(|err| failed(&err, err.subject()))
}

/// The format `#[outgoing(codec = ..)]` names, checked at the expression's span.
pub fn outgoing_codec<F: OutgoingCodec>(format: F) -> crate::codec::Format {
    format.format()
}

/// What `#[outgoing(codec = ..)]` takes: a [`Format`](crate::codec::Format).
#[diagnostic::on_unimplemented(
    message = "`codec = ..` takes a `Format`, not a `{Self}`",
    label = "not a `ruststream::codec::Format`",
    note = "name a built-in format, `codec = Format::Cbor`, or a codec of your own, `codec = Format::custom(&ACME)`"
)]
pub trait OutgoingCodec {
    /// The format.
    fn format(self) -> crate::codec::Format;
}

impl OutgoingCodec for crate::codec::Format {
    fn format(self) -> crate::codec::Format {
        self
    }
}

/// What a reply whose publish to `to` failed with `err` settles as: a `retry()`, logged (at
/// most one line a second while a stream keeps refusing); one that fails for good is said with
/// the settlement, which does not retry it.
pub(crate) fn reply_failed(
    ctx: &Context<'_>,
    err: &crate::PublishError,
    to: &str,
) -> HandlerOutcome {
    if err.kind().is_permanent() {
        return HandlerOutcome::retry();
    }
    // A stream that stays full refuses every attempt: at most one line a second.
    let suppressed = if err.kind() == crate::PublishErrorKind::NotStored {
        crate::unconfirmed::log_now()
    } else {
        Some(0)
    };
    if let Some(suppressed) = suppressed {
        tracing::error!(
            registration = ctx.registration(),
            subject = ctx.subject(),
            reply_to = to,
            %err,
            suppressed,
            "the reply was not published; the delivery is not acknowledged and comes back as a retry"
        );
    }
    HandlerOutcome::retry()
}

/// Fills the placeholders of a subject template (`orders.{tenant}.placed`) with `values`, in
/// order; refuses a value that cannot be one token of a subject.
pub fn fill_subject(
    template: &'static str,
    values: &[(&str, &dyn std::fmt::Display)],
) -> Result<String, crate::PublishError> {
    let mut values = values.iter();
    let mut tokens = Vec::new();
    for token in template.split('.') {
        if !(token.starts_with('{') && token.ends_with('}')) {
            tokens.push(token.to_owned());
            continue;
        }
        let Some((field, value)) = values.next() else {
            return Err(crate::PublishError::new(
                crate::PublishErrorKind::InvalidSubject,
                template,
            )
            .with_source(format!(
                "the template `{template}` has more placeholders than values"
            )));
        };
        let value = value.to_string();
        let problem = if value.is_empty() {
            Some("it is empty")
        } else if value.contains('.') {
            Some("it holds a `.`, which would add tokens")
        } else if value.contains(['*', '>']) {
            Some("it holds a wildcard (`*` or `>`)")
        } else if value.chars().any(char::is_whitespace) {
            Some("it holds white space")
        } else {
            None
        };
        if let Some(problem) = problem {
            return Err(crate::PublishError::new(
                crate::PublishErrorKind::InvalidSubject,
                template,
            )
            .with_source(format!(
                "field `{field}` is `{value}`, which cannot fill a token of `{template}`: {problem}; nothing was published"
            )));
        }
        tokens.push(value);
    }
    let subject = tokens.join(".");
    crate::reserved::refuse_filled_reserved(template, &subject)?;
    Ok(subject)
}

/// A descriptor expression, checked where the user wrote it.
pub fn descriptor<D: Descriptor>(descriptor: D) -> D {
    descriptor
}

/// The payload type, checked where the user wrote it.
#[diagnostic::on_unimplemented(
    message = "the payload type `{Self}` cannot be decoded",
    label = "a payload implements `serde::Deserialize` (and is `Send + Sync + 'static`)",
    note = "add `#[derive(Deserialize)]` to `{Self}`"
)]
pub trait Payload: DeserializeOwned + Send + Sync + 'static {}
// Not recommended: the error names `Payload` and its note, not every type serde can decode.
#[diagnostic::do_not_recommend]
impl<T: DeserializeOwned + Send + Sync + 'static> Payload for T {}

/// How a generated `Mount` impl registers a single-message handler. It is where the payload
/// type (and a reply's) is checked, once, whether the handler is mounted or not: the call is
/// spanned at the user's payload type, so an error points there.
pub fn mount_single<T: Payload, O: Outs, S: Send + Sync + 'static, H: Handle<T, O, S>>(
    descriptor: impl Descriptor,
    handler: H,
    name: &str,
) -> Registration<S> {
    Registration::single(name, descriptor, handler)
}

/// The same for a handler whose input is built from the whole delivery (`&KvChange<T>`).
pub fn mount_from_delivery<
    T: crate::input::FromDelivery,
    O: Outs,
    S: Send + Sync + 'static,
    H: Handle<T, O, S>,
>(
    descriptor: impl Descriptor,
    handler: H,
    name: &str,
) -> Registration<S> {
    Registration::from_delivery(name, descriptor, handler)
}

/// The same for a handler taking the payload's bytes as `&Bytes`, undecoded.
pub fn mount_raw<T, O: Outs, S: Send + Sync + 'static, H: Handle<bytes::Bytes, O, S>>(
    descriptor: impl Descriptor,
    handler: H,
    name: &str,
) -> Registration<S> {
    Registration::raw(name, descriptor, handler)
}

/// The same for a handler taking the payload's bytes as `&[u8]`, undecoded.
pub fn mount_raw_slice<T: ?Sized, O: Outs, S: Send + Sync + 'static, H: Handle<[u8], O, S>>(
    descriptor: impl Descriptor,
    handler: H,
    name: &str,
) -> Registration<S> {
    Registration::raw_slice(name, descriptor, handler)
}

/// The same for a batch handler.
pub fn mount_batch<T: Payload, O: Outs, S: Send + Sync + 'static, H: HandleBatch<T, O, S>>(
    descriptor: impl Descriptor,
    handler: H,
    name: &str,
) -> Registration<S> {
    Registration::batch(name, descriptor, handler)
}

/// How a generated `reply` handler publishes its value. The bound `R: ReplyFor<S>` names the
/// state, so that it is not checked where the `Handle` impl is defined (`mount_single` checks
/// `R` there, once).
pub trait ReplyFor<S>: Sized {
    /// Publishes the `Ok` value, then acknowledges; see [`reply`].
    fn reply<'a>(
        ret: Result<Self, HandlerOutcome>,
        outs: &'a Publisher<Self>,
        ctx: &'a Context<'_>,
    ) -> impl Future<Output = Result<(), HandlerOutcome>> + Send + 'a;

    /// Publishes each `Ok` value of a batch, then acknowledges its message; see
    /// [`reply_batch`].
    fn reply_batch<'a>(
        replies: Vec<Result<Self, HandlerOutcome>>,
        outs: &'a Publisher<Self>,
        ctx: &'a BatchContext<'_>,
    ) -> impl Future<Output = BatchOutcome> + Send + 'a
    where
        Self: Send + Sync + 'a,
        S: 'a,
    {
        reply_batch::<Self, S>(replies, outs, ctx)
    }
}

impl<T: Outgoing + 'static, S> ReplyFor<S> for T {
    fn reply<'a>(
        ret: Result<Self, HandlerOutcome>,
        outs: &'a Publisher<Self>,
        ctx: &'a Context<'_>,
    ) -> impl Future<Output = Result<(), HandlerOutcome>> + Send + 'a {
        reply(ret, outs, ctx)
    }
}
