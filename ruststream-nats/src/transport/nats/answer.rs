//! A stream's answer to a stored publish: its acknowledgement, or its refusal as the error
//! async-nats's JetStream publish reports for it.
//!
//! nats-server writes the acknowledgement by hand, the same few bytes every time:
//! `{"stream":"ORDERS", "seq":7}`, with `"domain":"hub"` before the sequence in a domain and
//! `,"duplicate": true` after it when the stream's duplicate window dropped the message. A
//! refusal is `{"error":{"code":503,"err_code":10077,"description":"..."},"stream":"ORDERS","seq":0}`.
//!
//! Every confirmed output waits for one, so the common shape is read by [`flat_ack`], a scan
//! of one flat object of plain values, which gives up (`None`) on anything else: an `error`, a
//! nested or `null` value, an escape in a string, a fraction, a repeated key, bytes after the
//! object. What it gives up on is read by `serde_json` into [`Answer`], which decides the
//! acknowledgement, the refusal, or that the answer is neither. The scan never accepts what
//! `serde_json` would read differently: a property test holds the two to the same answer. Why
//! the scan is worth having: `docs/benchmarks.md`, "Confirmed reply to a stream".

use async_nats::jetstream;
use async_nats::jetstream::context::{PublishError, PublishErrorKind as K};

use crate::transport::StoredAck;

/// The answer, read by `serde_json`: every field optional, so a refusal and an acknowledgement
/// are told apart by which came, not by trying one shape and then the other.
#[derive(serde::Deserialize)]
struct Answer {
    stream: Option<String>,
    seq: Option<u64>,
    #[serde(default)]
    duplicate: bool,
    error: Option<jetstream::Error>,
}

/// The stream's acknowledgement in `answer`, or the error async-nats's JetStream publish
/// reported for the answer: the server's refusal with its code (kept as the source), or that
/// the answer is not one.
pub(super) fn read_stored_ack(answer: &[u8]) -> Result<StoredAck, PublishError> {
    if let Some(ack) = flat_ack(answer) {
        return Ok(ack);
    }
    serde_json::from_slice::<Answer>(answer)
        .map_err(|err| PublishError::with_source(K::Other, err))?
        .decide()
}

impl Answer {
    /// The acknowledgement, the refusal, or that the answer is neither.
    fn decide(self) -> Result<StoredAck, PublishError> {
        match self {
            Self {
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
            Self {
                stream: Some(stream),
                seq: Some(sequence),
                duplicate,
                error: None,
            } => Ok(StoredAck {
                stream,
                sequence,
                duplicate,
            }),
            Self { .. } => Err(PublishError::with_source(
                K::Other,
                "the answer names no stream and sequence, and no error",
            )),
        }
    }
}

/// `answer` read as one flat JSON object of plain values (strings without escapes, whole
/// numbers, booleans) holding `stream` and `seq`, and no `error`; `None` for anything else.
fn flat_ack(answer: &[u8]) -> Option<StoredAck> {
    let mut scan = Scan {
        bytes: answer,
        at: 0,
    };
    let (mut stream, mut sequence, mut duplicate) = (None, None, None);
    scan.expect(b'{')?;
    loop {
        let key = scan.string()?;
        scan.expect(b':')?;
        let value = scan.value()?;
        match (key, value) {
            (b"stream", Value::Text(text)) => set(&mut stream, text)?,
            (b"seq", Value::Number(number)) => set(&mut sequence, number)?,
            (b"duplicate", Value::Bool(flag)) => set(&mut duplicate, flag)?,
            // A refusal (read in full by `serde_json`), or a field of the wrong type.
            (b"stream" | b"seq" | b"duplicate" | b"error", _) => return None,
            _ => {}
        }
        match scan.next_byte()? {
            b',' => {}
            b'}' => break,
            _ => return None,
        }
    }
    scan.skip_whitespace();
    if scan.at != answer.len() {
        return None;
    }
    Some(StoredAck {
        stream: std::str::from_utf8(stream?).ok()?.to_owned(),
        sequence: sequence?,
        duplicate: duplicate.unwrap_or(false),
    })
}

/// Sets a field seen for the first time; `None` for a repeated one (`serde_json` refuses it).
fn set<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    match slot {
        Some(_) => None,
        None => {
            *slot = Some(value);
            Some(())
        }
    }
}

/// A plain JSON value.
enum Value<'a> {
    /// A string's bytes, without escapes.
    Text(&'a [u8]),
    Number(u64),
    Bool(bool),
}

/// A cursor over the answer's bytes.
struct Scan<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Scan<'a> {
    /// JSON's whitespace, as `serde_json` skips it.
    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.at) {
            self.at += 1;
        }
    }

    /// The next byte after whitespace.
    fn next_byte(&mut self) -> Option<u8> {
        self.skip_whitespace();
        let byte = *self.bytes.get(self.at)?;
        self.at += 1;
        Some(byte)
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        (self.next_byte()? == byte).then_some(())
    }

    /// A string without escapes or control characters.
    fn string(&mut self) -> Option<&'a [u8]> {
        self.expect(b'"')?;
        let rest = self.bytes.get(self.at..)?;
        let end = rest
            .iter()
            .position(|&byte| byte == b'"' || byte == b'\\' || byte < 0x20)?;
        if rest[end] != b'"' {
            return None;
        }
        self.at += end + 1;
        Some(&rest[..end])
    }

    fn value(&mut self) -> Option<Value<'a>> {
        self.skip_whitespace();
        match *self.bytes.get(self.at)? {
            b'"' => self.string().map(Value::Text),
            b't' => self.word(b"true").map(|()| Value::Bool(true)),
            b'f' => self.word(b"false").map(|()| Value::Bool(false)),
            b'0'..=b'9' => self.number().map(Value::Number),
            _ => None,
        }
    }

    fn word(&mut self, word: &[u8]) -> Option<()> {
        let rest = self.bytes.get(self.at..)?;
        rest.starts_with(word).then(|| self.at += word.len())
    }

    /// A whole number that fits a `u64`, without a leading zero (JSON has none), a fraction or
    /// an exponent.
    fn number(&mut self) -> Option<u64> {
        let rest = self.bytes.get(self.at..)?;
        let digits = rest.iter().take_while(|byte| byte.is_ascii_digit()).count();
        // At most 19 digits always fit; 20 may not (checked); more never do.
        if digits == 0 || digits > 20 || (digits > 1 && rest[0] == b'0') {
            return None;
        }
        if let Some(b'.' | b'e' | b'E') = rest.get(digits) {
            return None;
        }
        let mut number: u64 = 0;
        for &digit in &rest[..digits] {
            number = number
                .checked_mul(10)?
                .checked_add(u64::from(digit - b'0'))?;
        }
        self.at += digits;
        Some(number)
    }
}

#[cfg(test)]
mod tests {
    use async_nats::jetstream::context::PublishErrorKind as K;
    use proptest::prelude::*;

    use super::{Answer, flat_ack, read_stored_ack};
    use crate::transport::nats::errors::stored_publish_error;
    use crate::transport::{Refusal, StoredAck, TransportErrorKind};

    fn ack(stream: &str, sequence: u64, duplicate: bool) -> StoredAck {
        StoredAck {
            stream: stream.into(),
            sequence,
            duplicate,
        }
    }

    /// What nats-server 2.9 and 2.11 write (read off both), and what it writes in a domain.
    #[test]
    fn the_servers_acknowledgements_are_read_by_the_scan() {
        let cases: [(&[u8], StoredAck); 4] = [
            (
                br#"{"stream":"RECEIPTS", "seq":7}"#,
                ack("RECEIPTS", 7, false),
            ),
            (
                br#"{"stream":"RECEIPTS", "seq":7,"duplicate": true}"#,
                ack("RECEIPTS", 7, true),
            ),
            (
                br#"{"stream":"RECEIPTS", "domain":"hub", "seq":18446744073709551615}"#,
                ack("RECEIPTS", u64::MAX, false),
            ),
            (
                br#"{"stream":"RECEIPTS","seq":7,"duplicate":false}"#,
                ack("RECEIPTS", 7, false),
            ),
        ];
        for (answer, expected) in cases {
            assert_eq!(
                flat_ack(answer).as_ref(),
                Some(&expected),
                "{}",
                String::from_utf8_lossy(answer)
            );
            assert_eq!(read_stored_ack(answer).expect("an ack"), expected);
        }
    }

    /// The answers nats-server 2.9 and 2.11 give when the stream refuses (read off both), as
    /// async-nats's JetStream publish reported them: the kind, and the server's words kept in
    /// the error that goes to the log.
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
                br#"{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 5"},"stream":"OUT","seq":0}"#,
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
                br#"{"stream":"OUT","seq":0,"error":{"code":400,"err_code":10054,"description":"message size exceeds maximum allowed"}}"#,
                K::Other,
                Some(Refusal::TooLarge),
                "message size exceeds maximum allowed",
            ),
        ];
        for (answer, kind, refusal, words) in cases {
            assert!(
                flat_ack(answer).is_none(),
                "a refusal is no acknowledgement"
            );
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
        for answer in [
            &b"not json"[..],
            br#"{"stream":"OUT"}"#,
            b"{}",
            br#"{"stream":"OUT","seq":1,"seq":2}"#,
            br#"{"stream":"OUT","seq":-1}"#,
        ] {
            let err = read_stored_ack(answer).expect_err("not an ack");
            assert_eq!(err.kind(), K::Other, "{}", String::from_utf8_lossy(answer));
            let err = stored_publish_error("out.x", err);
            assert_eq!(err.kind, TransportErrorKind::Other, "not a refusal: {err}");
        }
    }

    /// Bytes that are not UTF-8, in the stream's name or in a field nobody reads: the scan
    /// answers as `serde_json` does.
    #[test]
    fn an_answer_that_is_not_utf8_is_read_as_serde_json_reads_it() {
        for answer in [
            &b"{\"stream\":\"A\xff\", \"seq\":1}"[..],
            b"{\"stream\":\"A\", \"domain\":\"\xc3\", \"seq\":1}",
        ] {
            assert_eq!(flat_ack(answer), by_serde(answer));
            assert_eq!(read_stored_ack(answer).ok(), by_serde(answer));
        }
    }

    /// `serde_json`'s reading of `answer`, the reference the scan is held to.
    fn by_serde(answer: &[u8]) -> Option<StoredAck> {
        serde_json::from_slice::<Answer>(answer).ok()?.decide().ok()
    }

    /// A string value: plain, or with escapes, control characters, non-ASCII.
    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => "[A-Z0-9_-]{1,12}".prop_map(|s| format!("\"{s}\"")),
            1 => "[a-z \u{e9}\u{4e2d}]{0,6}".prop_map(|s| format!("\"{s}\"")),
            1 => r#"[a-z"\\/]{0,6}"#.prop_map(|s| format!("\"{s}\"")),
            1 => Just(r#""A\u0042""#.to_owned()),
            1 => Just("\"A\tB\"".to_owned()),
            1 => Just("\"A\u{1}B\"".to_owned()),
        ]
    }

    /// A number: whole, or one JSON spells otherwise or not at all.
    fn number() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => any::<u64>().prop_map(|n| n.to_string()),
            1 => "0[0-9]{1,3}".prop_map(|s| s),
            1 => "-[0-9]{1,3}".prop_map(|s| s),
            1 => "[0-9]{1,3}(\\.[0-9]|e[0-9]|E-[0-9])".prop_map(|s| s),
            1 => "[1-9][0-9]{19,21}".prop_map(|s| s),
        ]
    }

    /// Any value.
    fn value() -> impl Strategy<Value = String> {
        prop_oneof![
            text(),
            number(),
            Just("true".to_owned()),
            Just("false".to_owned()),
            Just("null".to_owned()),
            Just("tru".to_owned()),
            Just(r#"{"code":503}"#.to_owned()),
            Just("[1]".to_owned()),
        ]
    }

    fn space() -> impl Strategy<Value = &'static str> {
        prop_oneof![Just(""), Just(" "), Just("\n\t"), Just("\r ")]
    }

    /// An answer most of whose fields are the acknowledgement's, each perhaps spelled in a
    /// way the scan must give up on, in any order, with any whitespace, perhaps not JSON.
    fn answer() -> impl Strategy<Value = String> {
        let stream = prop_oneof![4 => text(), 1 => value()].prop_map(|v| ("stream", v));
        let seq = prop_oneof![4 => number(), 1 => value()].prop_map(|v| ("seq", v));
        let duplicate = prop_oneof![
            2 => Just("true".to_owned()),
            2 => Just("false".to_owned()),
            1 => value(),
        ]
        .prop_map(|v| ("duplicate", v));
        let other = (
            prop_oneof![
                Just("domain"),
                Just("error"),
                Just("other"),
                Just("stream"),
                Just("seq")
            ],
            value(),
        );
        (
            proptest::option::weighted(0.9, stream),
            proptest::option::weighted(0.9, seq),
            proptest::option::of(duplicate),
            proptest::collection::vec(other, 0..2),
            proptest::collection::vec(space(), 8),
            prop_oneof![8 => Just(""), 1 => Just(" \n"), 1 => Just(" x"), 1 => Just("}")],
            any::<prop::sample::Index>(),
        )
            .prop_map(
                |(stream, seq, duplicate, others, spaces, trailing, order)| {
                    let mut fields: Vec<(&str, String)> =
                        [stream, seq, duplicate].into_iter().flatten().collect();
                    fields.extend(others);
                    if !fields.is_empty() {
                        let at = order.index(fields.len());
                        fields.rotate_left(at);
                    }
                    let body: Vec<String> = fields
                        .iter()
                        .enumerate()
                        .map(|(i, (key, value))| {
                            let (a, b) = (spaces[i % 8], spaces[(i + 3) % 8]);
                            format!("{a}\"{key}\"{b}:{a}{value}{b}")
                        })
                        .collect();
                    format!("{}{{{}}}{trailing}", spaces[7], body.join(","))
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        /// Whatever the scan reads, `serde_json` reads the same, and what `serde_json` reads
        /// as an acknowledgement the scan reads too unless it was spelled unusually: the scan
        /// never stands in for `serde_json` with another answer.
        #[test]
        fn the_scan_reads_nothing_serde_json_would_read_otherwise(answer in answer()) {
            if let Some(scanned) = flat_ack(answer.as_bytes()) {
                prop_assert_eq!(Some(scanned), by_serde(answer.as_bytes()), "{}", answer);
            }
            prop_assert_eq!(
                read_stored_ack(answer.as_bytes()).ok(),
                by_serde(answer.as_bytes()),
                "{}",
                answer
            );
        }

        #[test]
        fn the_servers_shape_is_always_scanned(
            stream in "[A-Z0-9_-]{1,32}",
            sequence in any::<u64>(),
            duplicate in any::<bool>(),
        ) {
            let mut answer = format!("{{\"stream\":\"{stream}\", \"seq\":{sequence}");
            if duplicate {
                answer.push_str(",\"duplicate\": true");
            }
            answer.push('}');
            prop_assert_eq!(flat_ack(answer.as_bytes()), Some(StoredAck {
                stream,
                sequence,
                duplicate,
            }));
        }
    }
}
