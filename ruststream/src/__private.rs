//! Support for the code the macros write. Not a public API.

use std::process::ExitCode;

use serde::de::DeserializeOwned;

pub use futures;
pub use tracing;

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

/// The app state inside a generated handler. It always has type `S`: the runtime binds the
/// handler to that state.
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

/// The same, for a batch.
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

/// What a handler without `reply` may return.
#[diagnostic::on_unimplemented(
    message = "a subscriber returns `HandlerOutcome` or `Result<(), HandlerOutcome>`, not `{Self}`",
    label = "this return type settles nothing",
    note = "to publish the returned value, add `reply` to the attribute and return `Result<T, HandlerOutcome>` with `T: Outgoing`"
)]
pub trait IntoResult {
    /// The handler's answer as the `Handle` trait gives it.
    fn into_result(self) -> Result<(), HandlerOutcome>;
}

impl IntoResult for HandlerOutcome {
    fn into_result(self) -> Result<(), HandlerOutcome> {
        match self {
            HandlerOutcome::Ack => Ok(()),
            other => Err(other),
        }
    }
}

impl IntoResult for Result<(), HandlerOutcome> {
    fn into_result(self) -> Result<(), HandlerOutcome> {
        self
    }
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

/// Publishes a `reply` handler's value, then acknowledges; a failed publish retries instead.
pub async fn reply<R: Outgoing>(
    ret: Result<R, HandlerOutcome>,
    outs: &Publisher<R>,
    ctx: &Context<'_>,
) -> Result<(), HandlerOutcome> {
    let value = ret?;
    match outs.publish(ctx, &value).await {
        Ok(()) => Ok(()),
        Err(err) => {
            tracing::error!(
                registration = ctx.registration(),
                subject = ctx.subject(),
                reply_to = R::SUBJECT,
                %err,
                "the reply was not published; the delivery is not acknowledged and comes back as a retry"
            );
            Err(HandlerOutcome::retry())
        }
    }
}

/// Mounts a generated single-message handler.
pub fn mount_single<S, In, O, D, H>(descriptor: D, handler: H, name: &str) -> Registration<S>
where
    S: Send + Sync + 'static,
    D: Descriptor,
    H: Handle<In, O, S>,
    In: DeserializeOwned + Send + Sync + 'static,
    O: Outs,
{
    Registration::single(name, descriptor, handler)
}

/// Mounts a generated batch handler.
pub fn mount_batch<S, In, O, D, H>(descriptor: D, handler: H, name: &str) -> Registration<S>
where
    S: Send + Sync + 'static,
    D: Descriptor,
    H: HandleBatch<In, O, S>,
    In: DeserializeOwned + Send + Sync + 'static,
    O: Outs,
{
    Registration::batch(name, descriptor, handler)
}

/// A descriptor expression, checked where the user wrote it.
pub fn descriptor<D: Descriptor>(descriptor: D) -> D {
    descriptor
}

/// The payload type, checked where the user wrote it.
#[diagnostic::on_unimplemented(
    message = "the payload type `{Self}` cannot be decoded",
    label = "a payload must implement `serde::Deserialize`",
    note = "add `#[derive(Deserialize)]` to `{Self}`"
)]
pub trait Payload: DeserializeOwned + Send + Sync + 'static {}
impl<T: DeserializeOwned + Send + Sync + 'static> Payload for T {}

/// Checks the payload type at its span.
pub fn assert_payload<T: Payload>() {}

/// Checks a `reply` type at its span.
pub fn assert_outgoing<T: Outgoing>() {}
