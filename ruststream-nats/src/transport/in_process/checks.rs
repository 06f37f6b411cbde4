//! What the emulated server refuses before it acts, in the server's terms: a subject or name
//! the broker refuses too (`crate::subject`), a message over `max_payload`.

use bytes::Bytes;
use ruststream::Headers;

use crate::transport::{Refusal, TransportError, TransportErrorKind};

/// Refuses a subject the broker refuses (`crate::subject`, the one home of the rules);
/// `wildcards` allows a pattern.
pub(super) fn check_subject(subject: &str, wildcards: bool) -> Result<(), TransportError> {
    match crate::subject::subject_problem(subject, wildcards) {
        Some(why) => Err(TransportError::new(
            TransportErrorKind::Invalid,
            format!("`{subject}`: {why}"),
        )),
        None => Ok(()),
    }
}

/// The server's default `max_payload`: a message (headers and payload) larger than this is
/// refused before it is sent.
pub const MAX_PAYLOAD: usize = 1024 * 1024;

pub(super) fn check_payload(
    subject: &str,
    headers: &Headers,
    payload: &Bytes,
) -> Result<(), TransportError> {
    // Headers travel as `NATS/1.0\r\n`, `name: value\r\n` each, and a blank line.
    let header_len = if headers.is_empty() {
        0
    } else {
        headers
            .iter()
            .map(|(n, v)| n.len() + v.len() + 4)
            .sum::<usize>()
            + 12
    };
    let size = header_len + payload.len();
    if size > MAX_PAYLOAD {
        return Err(TransportError::refused(
            Refusal::TooLarge,
            format!(
                "publishing to `{subject}` failed: the message is {size} bytes, more than the server's max_payload of {MAX_PAYLOAD} bytes"
            ),
        ));
    }
    Ok(())
}

pub(super) fn check_name(what: &str, name: &str) -> Result<(), TransportError> {
    match crate::subject::name_problem(name) {
        Some(why) => Err(TransportError::new(
            TransportErrorKind::Invalid,
            format!("{what} `{name}`: {why}"),
        )),
        None => Ok(()),
    }
}
