//! async-nats errors as [`TransportError`]s: which kind each is, and the words that say what
//! was being done.

use async_nats::jetstream;

use crate::transport::{ConsumerSpec, TransportError, TransportErrorKind};

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
    err: &jetstream::context::GetStreamError,
) -> TransportError {
    if is_stream_not_found(err) {
        return TransportError::new(
            TransportErrorKind::StreamNotFound,
            format!("stream `{name}` does not exist"),
        );
    }
    match err.kind() {
        jetstream::context::GetStreamErrorKind::InvalidStreamName
        | jetstream::context::GetStreamErrorKind::EmptyName => TransportError::new(
            TransportErrorKind::Invalid,
            format!("`{name}` is not a valid stream name"),
        ),
        _ => TransportError::new(
            TransportErrorKind::Other,
            format!("cannot read stream `{name}` (is JetStream enabled on the server?): {err}"),
        ),
    }
}

pub(super) fn consumer_error(spec: &ConsumerSpec, err: &dyn std::error::Error) -> TransportError {
    let name = spec.durable.as_deref().unwrap_or("(ephemeral)");
    TransportError::new(
        TransportErrorKind::Other,
        format!(
            "cannot open consumer `{name}` of stream `{}` on `{}`: {err}",
            spec.stream, spec.filter_subject
        ),
    )
}

pub(super) fn stored_publish_error(
    subject: &str,
    err: &jetstream::context::PublishError,
) -> TransportError {
    use jetstream::context::PublishErrorKind as K;
    let kind = match err.kind() {
        K::StreamNotFound => TransportErrorKind::NoStream,
        K::TimedOut => TransportErrorKind::TimedOut,
        K::WrongLastMessageId | K::WrongLastSequence | K::MaxPayloadExceeded => {
            TransportErrorKind::Refused
        }
        // The server's own refusals (limits with `discard: new`, an expectation) come as
        // `Other` with the server's description.
        K::Other
            if std::error::Error::source(err)
                .is_some_and(|source| source.is::<jetstream::Error>()) =>
        {
            TransportErrorKind::Refused
        }
        _ => TransportErrorKind::Other,
    };
    TransportError::new(kind, format!("stored publish to `{subject}` failed: {err}"))
}

pub(super) fn kv_error(
    bucket: &str,
    key: &str,
    what: &str,
    err: &dyn std::fmt::Display,
) -> TransportError {
    TransportError::new(
        TransportErrorKind::Other,
        format!("cannot {what} key `{key}` of key-value bucket `{bucket}`: {err}"),
    )
}
