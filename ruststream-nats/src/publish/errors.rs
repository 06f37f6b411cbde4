//! What a failed publish is: the one classification of transport errors into publish errors,
//! transient or permanent.

use ruststream::{PublishError, PublishErrorKind};

use crate::subject::subject_problem;
use crate::transport::{Refusal, StreamAdmin, TransportError, TransportErrorKind};

/// Refuses a subject one cannot `what` to (publish, send a request): a pattern or a subject
/// the NATS rules refuse (`crate::subject`).
pub(super) fn refuse_invalid(subject: &str, what: &str) -> Result<(), PublishError> {
    match subject_problem(subject, false) {
        Some(problem) => Err(PublishError::new(PublishErrorKind::InvalidSubject, subject)
            .with_source(format!(
                "`{subject}` is not a subject to {what} to: {problem}"
            ))),
        None => Ok(()),
    }
}

/// A stream that did not confirm an output: [`PublishErrorKind::NotStored`], or the kind of
/// a permanent failure ([`publish_error_kind`]).
pub(super) fn not_stored(subject: &str, stream: &str, err: &TransportError) -> PublishError {
    let why = match err.kind {
        TransportErrorKind::TimedOut => {
            format!("stream `{stream}` did not confirm the message in time")
        }
        TransportErrorKind::NoStream => format!(
            "stream `{stream}` stores the subject but did not answer (no responders: its server is down or electing a leader): {err}"
        ),
        _ => format!("stream `{stream}` refused the message: {err}"),
    };
    PublishError::new(
        publish_error_kind(err, PublishErrorKind::NotStored),
        subject,
    )
    .with_source(why)
}

pub(super) fn broker_error(subject: &str, err: TransportError) -> PublishError {
    PublishError::new(publish_error_kind(&err, PublishErrorKind::Broker), subject).with_source(err)
}

/// The one classification of a failed publish: a permanent transport error
/// ([`TransportError::is_permanent`]) keeps its own kind, which is permanent too
/// ([`PublishErrorKind::is_permanent`]); any other is `transient` (`NotStored` for a stored
/// publish, `Broker` for a Core one).
pub(super) fn publish_error_kind(
    err: &TransportError,
    transient: PublishErrorKind,
) -> PublishErrorKind {
    if !err.is_permanent() {
        transient
    } else if err.refusal() == Some(Refusal::TooLarge) {
        PublishErrorKind::TooLarge
    } else {
        PublishErrorKind::InvalidSubject
    }
}

/// Whether no stream stores `subject`, as `transport` says when asked now; `false` when it
/// cannot say (a stream not answering is not taken for a stream gone).
pub(crate) async fn stream_is_gone(transport: &dyn StreamAdmin, subject: &str) -> bool {
    match transport.stream_by_subject(subject).await {
        Ok(stream) => stream.is_none(),
        Err(err) => {
            tracing::debug!(%err, subject, "cannot ask which stream stores the subject");
            false
        }
    }
}
