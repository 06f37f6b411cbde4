//! What a JetStream delivery's acknowledgement subject tells: the stream, the consumer, the
//! delivery count and the sequences.

use std::sync::Arc;

/// The facts of a JetStream delivery, read from its acknowledgement subject and attached to the
/// delivery as an extension (`delivery.extension::<JetStreamInfo>()`).
///
/// Two forms of the subject exist; both are read:
///
/// - `$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<timestamp>.<pending>`
/// - `$JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<timestamp>.<pending>[.<random>]`
///
/// ```
/// use ruststream_nats::JetStreamInfo;
///
/// let info = JetStreamInfo::parse("$JS.ACK.PAYMENTS.capture.2.17.21.1700000000000000000.4")
///     .expect("an acknowledgement subject");
/// assert_eq!(&*info.stream, "PAYMENTS");
/// assert_eq!(&*info.consumer, "capture");
/// assert_eq!(info.delivered, 2);
/// assert_eq!(info.stream_sequence, 17);
/// assert_eq!(info.pending, 4);
/// ```
///
/// The names are shared strings: every delivery of a consumer names the same stream and
/// consumer, and the pull hands each delivery the same two (no allocation per message).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct JetStreamInfo {
    /// The JetStream domain, when the subject names one (`_` means none and gives `None`).
    pub domain: Option<Arc<str>>,
    /// The stream the message is stored in.
    pub stream: Arc<str>,
    /// The consumer that delivered it.
    pub consumer: Arc<str>,
    /// How many times the consumer delivered it, this delivery included.
    pub delivered: u64,
    /// The message's sequence in the stream: the same on every redelivery.
    pub stream_sequence: u64,
    /// The consumer's delivery sequence: new on every delivery.
    pub consumer_sequence: u64,
    /// When the message was stored, in nanoseconds since the Unix epoch.
    pub timestamp: u64,
    /// How many messages the consumer still had to deliver.
    pub pending: u64,
}

impl JetStreamInfo {
    /// Reads an acknowledgement subject; `None` when it is not one.
    pub fn parse(subject: &str) -> Option<Self> {
        AckSubject::parse(subject).map(Self::from)
    }
}

impl From<AckSubject<'_>> for JetStreamInfo {
    /// The facts of a subject already read, its names copied.
    fn from(ack: AckSubject<'_>) -> Self {
        Self {
            domain: ack.domain.map(Arc::from),
            stream: Arc::from(ack.stream),
            consumer: Arc::from(ack.consumer),
            delivered: ack.delivered,
            stream_sequence: ack.stream_sequence,
            consumer_sequence: ack.consumer_sequence,
            timestamp: ack.timestamp,
            pending: ack.pending,
        }
    }
}

impl JetStreamInfo {
    /// The facts of a subject already read (by the pull's check that a message is its
    /// consumer's: the subject is read once per delivery), with names the reader already holds
    /// for them: `stream` and `consumer` are `ack`'s (the caller checked), and `domain` is
    /// shared when it is the last one seen (kept in `last_domain`).
    pub(crate) fn shared(
        ack: AckSubject<'_>,
        stream: &Arc<str>,
        consumer: &Arc<str>,
        last_domain: &mut Option<Arc<str>>,
    ) -> Self {
        debug_assert!(ack.stream == &**stream && ack.consumer == &**consumer);
        let domain = ack.domain.map(|domain| match last_domain {
            Some(last) if **last == *domain => Arc::clone(last),
            _ => Arc::clone(last_domain.insert(Arc::from(domain))),
        });
        Self {
            domain,
            stream: Arc::clone(stream),
            consumer: Arc::clone(consumer),
            delivered: ack.delivered,
            stream_sequence: ack.stream_sequence,
            consumer_sequence: ack.consumer_sequence,
            timestamp: ack.timestamp,
            pending: ack.pending,
        }
    }
}

/// The prefix of every acknowledgement subject.
pub(crate) const ACK_PREFIX: &str = "$JS.ACK.";

/// An acknowledgement subject read in place: the one parser of its two forms, for
/// [`JetStreamInfo`], the pull's check that a message is a delivery of its consumer, and the
/// in-process server's settlement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AckSubject<'a> {
    /// The JetStream domain, when the subject names one (`_` means none).
    pub(crate) domain: Option<&'a str>,
    pub(crate) stream: &'a str,
    pub(crate) consumer: &'a str,
    pub(crate) delivered: u64,
    pub(crate) stream_sequence: u64,
    pub(crate) consumer_sequence: u64,
    pub(crate) timestamp: u64,
    pub(crate) pending: u64,
}

impl<'a> AckSubject<'a> {
    /// Reads `subject`; `None` when it is not an acknowledgement subject.
    pub(crate) fn parse(subject: &'a str) -> Option<Self> {
        let rest = subject.strip_prefix(ACK_PREFIX)?;
        // The first 9 tokens after the prefix, and how many there are (read once per delivery:
        // no allocation, the dots found eight bytes at a time).
        let mut tokens = [""; 9];
        let mut count = 0;
        let mut start = 0;
        let mut dot = |at: usize| {
            if let Some(slot) = tokens.get_mut(count) {
                *slot = rest.get(start..at).unwrap_or_default();
            }
            count += 1;
            start = at + 1;
        };
        let bytes = rest.as_bytes();
        let mut words = bytes.chunks_exact(8);
        let mut base = 0;
        for word in words.by_ref() {
            let mut eight = [0; 8];
            eight.copy_from_slice(word);
            let mut dots = dots_in(u64::from_le_bytes(eight));
            while dots != 0 {
                dot(base + (dots.trailing_zeros() / 8) as usize);
                dots &= dots - 1;
            }
            base += 8;
        }
        for (i, byte) in words.remainder().iter().enumerate() {
            if *byte == b'.' {
                dot(base + i);
            }
        }
        dot(bytes.len());
        let (domain, rest) = match count {
            7 => (None, &tokens[..7]),
            count if count >= 9 => {
                let domain = tokens[0];
                let domain = (domain != "_" && !domain.is_empty()).then_some(domain);
                (domain, &tokens[2..9])
            }
            _ => return None,
        };
        let [stream, consumer, delivered, sseq, cseq, ts, pending] = rest else {
            return None;
        };
        if stream.is_empty() || consumer.is_empty() {
            return None;
        }
        Some(Self {
            domain,
            stream,
            consumer,
            delivered: number(delivered)?,
            stream_sequence: number(sseq)?,
            consumer_sequence: number(cseq)?,
            timestamp: number(ts)?,
            pending: number(pending)?,
        })
    }
}

/// The dots of eight bytes (little-endian): the high bit of each byte that is a `.`, and no
/// other bit.
fn dots_in(word: u64) -> u64 {
    const DOTS: u64 = u64::from_le_bytes([b'.'; 8]);
    const LOW7: u64 = u64::from_le_bytes([0x7f; 8]);
    // A byte of `x` is zero where `word` has a dot; adding 0x7f to its low seven bits sets the
    // high bit of every byte but those (no carry crosses bytes).
    let x = word ^ DOTS;
    !(((x & LOW7).wrapping_add(LOW7)) | x | LOW7)
}

/// A decimal number as `u64::from_str` reads it (an optional `+`, then at least one digit, at
/// most `u64::MAX`), without its radix-generic steps: five per delivery. Not inlined: one copy
/// of its loop is fetched for the five, not five copies (a delivery's code is mostly cold by
/// the next one, and a line fetched costs more than the calls).
#[inline(never)]
pub(crate) fn number(token: &str) -> Option<u64> {
    let digits = token.strip_prefix('+').unwrap_or(token).as_bytes();
    if digits.is_empty() {
        return None;
    }
    // 19 digits never overflow; only a longer number is checked step by step.
    let checked = digits.len() > 19;
    let mut value: u64 = 0;
    for &digit in digits {
        let digit = digit.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        value = if checked {
            value.checked_mul(10)?.checked_add(u64::from(digit))?
        } else {
            value * 10 + u64::from(digit)
        };
    }
    Some(value)
}

/// The acknowledgement subject of a delivery, in the form a server without a domain writes (the
/// in-process server's deliveries); [`AckSubject::parse`] reads it back.
#[cfg_attr(not(feature = "embedded"), allow(dead_code))] // the in-process server's
pub(crate) fn ack_subject(
    stream: &str,
    consumer: &str,
    delivered: u64,
    stream_sequence: u64,
    consumer_sequence: u64,
    timestamp_ns: u128,
    pending: u64,
) -> String {
    format!(
        "{ACK_PREFIX}{stream}.{consumer}.{delivered}.{stream_sequence}.{consumer_sequence}.{timestamp_ns}.{pending}"
    )
}

#[cfg(test)]
mod tests {
    use super::{AckSubject, JetStreamInfo, ack_subject};

    #[test]
    fn reads_back_what_it_writes() {
        let subject = ack_subject("ORDERS", "worker", 3, 10, 12, 1_700_000_000_000_000_000, 4);
        let ack = AckSubject::parse(&subject).expect("written by ack_subject");
        assert_eq!(
            (ack.domain, ack.stream, ack.consumer, ack.delivered),
            (None, "ORDERS", "worker", 3)
        );
        assert_eq!(
            (
                ack.stream_sequence,
                ack.consumer_sequence,
                ack.timestamp,
                ack.pending
            ),
            (10, 12, 1_700_000_000_000_000_000, 4)
        );
    }

    #[test]
    fn reads_the_v1_form() {
        let info = JetStreamInfo::parse("$JS.ACK.ORDERS.worker.3.10.12.1700000000000000000.0")
            .expect("v1 form");
        assert_eq!(info.domain, None);
        assert_eq!(&*info.stream, "ORDERS");
        assert_eq!(&*info.consumer, "worker");
        assert_eq!(info.delivered, 3);
        assert_eq!(info.stream_sequence, 10);
        assert_eq!(info.consumer_sequence, 12);
        assert_eq!(info.timestamp, 1_700_000_000_000_000_000);
        assert_eq!(info.pending, 0);
    }

    #[test]
    fn reads_the_v2_form_with_and_without_the_random_token() {
        let with = JetStreamInfo::parse(
            "$JS.ACK.hub.ACCHASH.ORDERS.worker.1.5.6.1700000000000000000.9.r4nd0m",
        )
        .expect("v2 form");
        assert_eq!(with.domain.as_deref(), Some("hub"));
        assert_eq!(&*with.stream, "ORDERS");
        assert_eq!(with.delivered, 1);
        assert_eq!(with.stream_sequence, 5);
        assert_eq!(with.pending, 9);

        let without =
            JetStreamInfo::parse("$JS.ACK._.ACCHASH.ORDERS.worker.2.5.7.1700000000000000000.9")
                .expect("v2 form without the random token");
        assert_eq!(without.domain, None);
        assert_eq!(without.delivered, 2);
        assert_eq!(without.consumer_sequence, 7);
    }

    #[test]
    fn refuses_what_is_not_an_ack_subject() {
        for subject in [
            "",
            "_INBOX.abc",
            "$JS.ACK.ORDERS.worker.x.10.12.1.0",
            "$JS.ACK.ORDERS.worker.1.10.12.1",
            "$JS.API.CONSUMER.INFO.ORDERS.worker",
            "$JS.ACK..worker.1.10.12.1.0",
        ] {
            assert_eq!(JetStreamInfo::parse(subject), None, "{subject}");
        }
    }
}
