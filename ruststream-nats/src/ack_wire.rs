//! The payload of a JetStream acknowledgement on the wire: `+ACK`, `-NAK`,
//! `-NAK {"delay": ns}`, `+TERM`, `+WPI`. Written by the executor, read by the in-process
//! server; the text of each kind is `ruststream::settle::AckKind`'s `Display`.

use std::time::Duration;

use bytes::Bytes;
use ruststream::settle::AckKind;

/// The wire form of `kind`; the common ones without an allocation.
pub(crate) fn ack_payload(kind: AckKind) -> Bytes {
    match kind {
        AckKind::Ack => Bytes::from_static(b"+ACK"),
        AckKind::Nak => Bytes::from_static(b"-NAK"),
        AckKind::Term => Bytes::from_static(b"+TERM"),
        other => Bytes::from(other.to_string()),
    }
}

/// The progress payload: the server restarts the delivery's ack_wait.
pub(crate) const PROGRESS: &[u8] = b"+WPI";

/// A settlement, as its wire form says (what the server reads from an acknowledgement).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "embedded"), allow(dead_code))] // read by the in-process server
pub(crate) enum AckWire {
    /// `+ACK` (also an empty payload and `+NXT`).
    Ack,
    /// `-NAK`, with the delay of `-NAK {"delay": ns}` when it has one.
    Nak(Option<Duration>),
    /// `+TERM`.
    Term,
    /// `+WPI`.
    Progress,
}

#[cfg_attr(not(feature = "embedded"), allow(dead_code))]
impl AckWire {
    /// Reads an acknowledgement's payload as the server does; `None` when it is none.
    pub(crate) fn parse(payload: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(payload).ok()?.trim();
        if text.is_empty() || text.starts_with("+ACK") || text.starts_with("+NXT") {
            Some(Self::Ack)
        } else if let Some(rest) = text.strip_prefix("-NAK") {
            Some(Self::Nak(nak_delay(rest.trim())))
        } else if text.starts_with("+TERM") {
            Some(Self::Term)
        } else if text.starts_with("+WPI") {
            Some(Self::Progress)
        } else {
            None
        }
    }
}

/// The delay of `-NAK {"delay": ns}`; a delay that does not parse makes a plain `-NAK`, as on the
/// server. A negative delay is no delay.
#[cfg_attr(not(feature = "embedded"), allow(dead_code))]
fn nak_delay(arg: &str) -> Option<Duration> {
    #[derive(serde::Deserialize)]
    struct NakOptions {
        #[serde(default)]
        delay: i64,
    }
    if !arg.starts_with('{') {
        return None;
    }
    let options: NakOptions = serde_json::from_str(arg).ok()?;
    Some(Duration::from_nanos(
        u64::try_from(options.delay).unwrap_or(0),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_written_reads_back_as_the_same_settlement() {
        let delay = Duration::from_millis(1500);
        for (kind, read) in [
            (AckKind::Ack, AckWire::Ack),
            (AckKind::Nak, AckWire::Nak(None)),
            (AckKind::NakAfter(delay), AckWire::Nak(Some(delay))),
            (AckKind::Term, AckWire::Term),
        ] {
            assert_eq!(AckWire::parse(&ack_payload(kind)), Some(read), "{kind}");
        }
        assert_eq!(AckWire::parse(PROGRESS), Some(AckWire::Progress));
    }

    #[test]
    fn reads_what_the_server_reads() {
        assert_eq!(AckWire::parse(b""), Some(AckWire::Ack));
        assert_eq!(AckWire::parse(b"+NXT"), Some(AckWire::Ack));
        assert_eq!(
            AckWire::parse(b"-NAK {\"delay\": -5}"),
            Some(AckWire::Nak(Some(Duration::ZERO)))
        );
        assert_eq!(
            AckWire::parse(b"-NAK {\"delay\": \"x\"}"),
            Some(AckWire::Nak(None))
        );
        assert_eq!(AckWire::parse(b"-NAK 5"), Some(AckWire::Nak(None)));
        assert_eq!(AckWire::parse(b"hello"), None);
        assert_eq!(AckWire::parse(&[0xff]), None);
    }
}
