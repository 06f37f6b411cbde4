//! A batch `reply` handler's answers: message `i` of the batch is answered with `Ok` value `i`
//! (published to its `#[outgoing]` subject and, for a Core request, to the request's inbox) or
//! settled with outcome `i`, as a single `reply` handler answers its one message.

use crate::context::Context;
use crate::handler::{BatchContext, BatchOutcome, Publisher};
use crate::outcome::HandlerOutcome;

use super::ReplyFor;

/// What a batch `reply` handler may return: one `Result<T, HandlerOutcome>` per message.
#[diagnostic::on_unimplemented(
    message = "a batch `reply` subscriber returns `Vec<Result<T, HandlerOutcome>>`, not `{Self}`",
    label = "the error type is not `HandlerOutcome`",
    note = "return `Err(HandlerOutcome::..)` for a message that is not answered: the runtime settles it with that outcome"
)]
pub trait IntoBatchReplies<T> {
    /// The answers, one per message.
    fn into_batch_replies(self) -> Vec<Result<T, HandlerOutcome>>;
}

impl<T> IntoBatchReplies<T> for Vec<Result<T, HandlerOutcome>> {
    fn into_batch_replies(self) -> Vec<Result<T, HandlerOutcome>> {
        self
    }
}

/// A batch `reply` handler's return, checked at the return type's span.
pub fn into_batch_replies<R: IntoBatchReplies<T>, T>(ret: R) -> Vec<Result<T, HandlerOutcome>> {
    ret.into_batch_replies()
}

/// Answers each message of the batch with its own result, every publish under way at once
/// (a Core publish goes out in the order of the batch): `Ok(value)` is answered as a single
/// handler's value is ([`ReplyFor::reply`]: an `#[outgoing]` value published, a
/// [`Response`](crate::Response) sent to the inbox only), then acknowledged; `Err(outcome)`
/// settles the message with `outcome`. A length that does not match the batch publishes
/// nothing, and the settlement reports it.
pub async fn reply_batch<R: ReplyFor<S> + Send + Sync, S>(
    replies: Vec<Result<R, HandlerOutcome>>,
    outs: &Publisher<R>,
    ctx: &BatchContext<'_>,
) -> BatchOutcome {
    if replies.len() != ctx.len() {
        let outcomes = replies
            .into_iter()
            .map(|r| r.err().unwrap_or(HandlerOutcome::Ack));
        return BatchOutcome::Each(outcomes.collect());
    }
    let contexts: Vec<Context<'_>> = (0..ctx.len()).filter_map(|i| ctx.context(i)).collect();
    let answers = replies
        .into_iter()
        .zip(&contexts)
        .map(|(ret, ctx)| async move {
            let answered = R::reply(ret, outs, ctx).await;
            settled(answered, ctx)
        });
    BatchOutcome::Each(futures::future::join_all(answers).await)
}

/// The outcome of one answered message. A value that can never be published (a subject
/// template it cannot fill, a payload over the server's limit) is not retried, as for a single
/// handler: the message goes to the dead-letter subject when one is declared, else it ends.
fn settled(answered: Result<(), HandlerOutcome>, ctx: &Context<'_>) -> HandlerOutcome {
    match (answered, ctx.unpublishable()) {
        (Ok(()) | Err(HandlerOutcome::Retry | HandlerOutcome::RetryAfter(_)), Some(reason)) => {
            tracing::error!(
                registration = ctx.registration(),
                subject = ctx.subject(),
                %reason,
                "the reply can never be published; the message is dead-lettered (or dropped without a dead-letter subject), not retried"
            );
            HandlerOutcome::dead_letter()
        }
        (Ok(()), None) => HandlerOutcome::Ack,
        (Err(outcome), _) => outcome,
    }
}
