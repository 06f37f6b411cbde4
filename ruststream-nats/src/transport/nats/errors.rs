//! async-nats errors as [`TransportError`]s: which kind each is, the words that say what was
//! being done, and the async-nats error itself, kept as the cause (typed, to downcast).

use async_nats::jetstream;
use ruststream::BoxError;

use crate::transport::{ConsumerSpec, Refusal, TransportError, TransportErrorKind};

/// JetStream's error code for "stream not found".
const STREAM_NOT_FOUND: u64 = 10059;

/// Whether the server answered that the stream does not exist.
pub(super) fn is_stream_not_found(err: &jetstream::context::GetStreamError) -> bool {
    matches!(
        err.kind(),
        jetstream::context::GetStreamErrorKind::JetStream(js)
            if js.error_code().0 == STREAM_NOT_FOUND || js.code() == 404
    )
}

/// A stream could not be read: it does not exist, its name is not valid, or something else.
pub(super) fn get_stream_error(
    name: &str,
    err: jetstream::context::GetStreamError,
) -> TransportError {
    if is_stream_not_found(&err) {
        return TransportError::new(
            TransportErrorKind::StreamNotFound,
            format!("stream `{name}` does not exist"),
        )
        .with_cause(err);
    }
    match err.kind() {
        jetstream::context::GetStreamErrorKind::InvalidStreamName
        | jetstream::context::GetStreamErrorKind::EmptyName => TransportError::new(
            TransportErrorKind::Invalid,
            format!("`{name}` is not a valid stream name"),
        )
        .with_cause(err),
        _ => TransportError::new(
            TransportErrorKind::Other,
            format!("cannot read stream `{name}` (is JetStream enabled on the server?)"),
        )
        .with_cause(err),
    }
}

pub(super) fn consumer_error(spec: &ConsumerSpec, err: impl Into<BoxError>) -> TransportError {
    let name = spec.durable.as_deref().unwrap_or("(ephemeral)");
    TransportError::new(
        TransportErrorKind::Other,
        format!(
            "cannot open consumer `{name}` of stream `{}` on `{}`",
            spec.stream, spec.filter_subject
        ),
    )
    .with_cause(err)
}

pub(super) fn stored_publish_error(
    subject: &str,
    err: jetstream::context::PublishError,
) -> TransportError {
    use jetstream::context::PublishErrorKind as K;
    let message = format!("stored publish to `{subject}` failed");
    let refused = |why| TransportError::refused(why, message.clone());
    let error = match err.kind() {
        K::StreamNotFound => TransportError::new(TransportErrorKind::NoStream, message.clone()),
        K::TimedOut => TransportError::new(TransportErrorKind::TimedOut, message.clone()),
        K::WrongLastMessageId | K::WrongLastSequence => refused(Refusal::Expectation),
        K::MaxPayloadExceeded => refused(Refusal::TooLarge),
        // The server's own refusals (limits with `discard: new`, an expectation) come as
        // `Other` with the server's error, whose code says which.
        K::Other => match std::error::Error::source(&err)
            .and_then(|source| source.downcast_ref::<jetstream::Error>())
        {
            Some(server) => match server_refusal(server) {
                Some(why) => refused(why),
                None => TransportError::new(TransportErrorKind::Refused, message.clone()),
            },
            None => TransportError::new(TransportErrorKind::Other, message.clone()),
        },
        _ => TransportError::new(TransportErrorKind::Other, message.clone()),
    };
    error.with_cause(err)
}

/// A stored publish's request that got no acknowledgement, as the error async-nats's JetStream
/// publish reports for it: nobody answered (no stream stores the subject), the answer did not
/// come in time, the message is too large, or the connection failed.
pub(super) fn stored_request_error(
    err: async_nats::RequestError,
) -> jetstream::context::PublishError {
    use async_nats::RequestErrorKind as R;
    use jetstream::context::{PublishError, PublishErrorKind as K};
    match err.kind() {
        R::NoResponders => PublishError::new(K::StreamNotFound),
        R::TimedOut => PublishError::new(K::TimedOut),
        // The sizes, as async-nats's JetStream publish words them.
        R::MaxPayloadExceeded => match std::error::Error::source(&err) {
            Some(sizes) => PublishError::with_source(K::MaxPayloadExceeded, sizes.to_string()),
            None => PublishError::new(K::MaxPayloadExceeded),
        },
        R::InvalidSubject | R::Other => PublishError::with_source(K::Other, err),
    }
}

/// Why the server refused a stored publish, from its error code.
fn server_refusal(err: &jetstream::Error) -> Option<Refusal> {
    use jetstream::ErrorCode as C;
    match err.error_code() {
        C::STREAM_WRONG_LAST_SEQUENCE | C::STREAM_WRONG_LAST_MESSAGE_ID | C::STREAM_NOT_MATCH => {
            Some(Refusal::Expectation)
        }
        C::STREAM_MESSAGE_EXCEEDS_MAXIMUM => Some(Refusal::TooLarge),
        // "maximum messages exceeded", "maximum bytes exceeded", "maximum messages per subject
        // exceeded": the store failed under limits with `discard: new`.
        C::STREAM_STORE_FAILED => Some(Refusal::StreamFull),
        _ => None,
    }
}

/// An operation on a key of a key-value bucket failed.
pub(super) fn kv_error(
    bucket: &str,
    key: &str,
    what: &str,
    err: impl Into<BoxError>,
) -> TransportError {
    TransportError::new(
        TransportErrorKind::Other,
        format!("cannot {what} key `{key}` of key-value bucket `{bucket}`"),
    )
    .with_cause(err)
}
