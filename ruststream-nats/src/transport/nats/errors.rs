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

/// A stream's answer to a stored publish: its acknowledgement, or the error async-nats's
/// JetStream publish reports for it (the server's refusal with its code, kept as the source).
///
/// Read straight into one struct whose fields are all optional: the acknowledgement
/// (`{"stream":"ORDERS","seq":7}`, `"duplicate":true` when the stream's duplicate window
/// dropped it) and the refusal (`{"error":{"code":503,"err_code":10077,...}}`) are told apart
/// by which fields came, not by trying one shape and then the other.
pub(super) fn read_stored_ack(
    answer: &[u8],
) -> Result<crate::transport::StoredAck, jetstream::context::PublishError> {
    use jetstream::context::{PublishError, PublishErrorKind as K};

    #[derive(serde::Deserialize)]
    struct Answer {
        stream: Option<String>,
        seq: Option<u64>,
        #[serde(default)]
        duplicate: bool,
        error: Option<jetstream::Error>,
    }

    let answer: Answer =
        serde_json::from_slice(answer).map_err(|err| PublishError::with_source(K::Other, err))?;
    match answer {
        Answer {
            error: Some(error), ..
        } => Err(match error.error_code() {
            jetstream::ErrorCode::STREAM_WRONG_LAST_MESSAGE_ID => {
                PublishError::with_source(K::WrongLastMessageId, error)
            }
            jetstream::ErrorCode::STREAM_WRONG_LAST_SEQUENCE => {
                PublishError::with_source(K::WrongLastSequence, error)
            }
            _ => PublishError::with_source(K::Other, error),
        }),
        Answer {
            stream: Some(stream),
            seq: Some(sequence),
            duplicate,
            error: None,
        } => Ok(crate::transport::StoredAck {
            stream,
            sequence,
            duplicate,
        }),
        Answer { .. } => Err(PublishError::with_source(
            K::Other,
            "the answer names no stream and sequence, and no error",
        )),
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

#[cfg(test)]
mod tests {
    use async_nats::jetstream::context::PublishErrorKind as K;

    use super::{read_stored_ack, stored_publish_error};
    use crate::transport::{Refusal, StoredAck, TransportErrorKind};

    #[test]
    fn an_acknowledgement_is_read_with_its_duplicate_flag() {
        let stored = read_stored_ack(br#"{"stream":"RECEIPTS","seq":7}"#).expect("an ack");
        assert_eq!(
            stored,
            StoredAck {
                stream: "RECEIPTS".into(),
                sequence: 7,
                duplicate: false,
            }
        );
        let again =
            read_stored_ack(br#"{"stream":"RECEIPTS","domain":"hub","seq":7,"duplicate":true}"#)
                .expect("an ack");
        assert!(again.duplicate, "the duplicate window dropped it");
        assert_eq!(again.sequence, 7, "the first copy's sequence");
    }

    /// The answers nats-server 2.9 and 2.10+ give, as async-nats's JetStream publish reported
    /// them: the kind, and the server's words kept in the error that goes to the log.
    #[test]
    fn a_refusal_is_the_error_async_nats_reported_for_it() {
        let cases: [(&[u8], K, Option<Refusal>, &str); 4] = [
            (
                br#"{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"},"stream":"OUT","seq":0}"#,
                K::Other,
                Some(Refusal::StreamFull),
                "maximum messages exceeded",
            ),
            (
                br#"{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 5"}}"#,
                K::WrongLastSequence,
                Some(Refusal::Expectation),
                "wrong last sequence: 5",
            ),
            (
                br#"{"error":{"code":400,"err_code":10070,"description":"wrong last msg ID: a"}}"#,
                K::WrongLastMessageId,
                Some(Refusal::Expectation),
                "wrong last msg ID: a",
            ),
            (
                br#"{"error":{"code":400,"err_code":10054,"description":"message size exceeds maximum allowed"}}"#,
                K::Other,
                Some(Refusal::TooLarge),
                "message size exceeds maximum allowed",
            ),
        ];
        for (answer, kind, refusal, words) in cases {
            let err = read_stored_ack(answer).expect_err("a refusal");
            assert_eq!(err.kind(), kind, "{}", String::from_utf8_lossy(answer));
            let err = stored_publish_error("out.x", err);
            assert_eq!(err.kind, TransportErrorKind::Refused);
            assert_eq!(err.refusal(), refusal);
            let text = err.to_string();
            assert!(
                text.starts_with("stored publish to `out.x` failed") && text.contains(words),
                "{text}"
            );
        }
    }

    #[test]
    fn an_answer_that_is_no_acknowledgement_is_an_error_not_a_stored_message() {
        for answer in [&b"not json"[..], br#"{"stream":"OUT"}"#, b"{}"] {
            let err = read_stored_ack(answer).expect_err("not an ack");
            assert_eq!(err.kind(), K::Other, "{}", String::from_utf8_lossy(answer));
            let err = stored_publish_error("out.x", err);
            assert_eq!(err.kind, TransportErrorKind::Other, "not a refusal: {err}");
        }
    }
}
