//! NATS subject syntax and matching: what a subject, a pattern and a stream or consumer name may
//! look like, and which subjects a pattern matches. The one home of these rules: the broker's
//! validation, the publisher and the in-process NATS all call it. (The macros crate checks
//! literals at compile time with its own copy, tested against the same table,
//! `subject/table.rs`.)
//!
//! A subject is dot-separated tokens, none empty, without whitespace. In a pattern, `*` matches
//! exactly one token and `>` (only as the last token) one or more; both stand alone between dots.

/// Why a subject is not valid, for an error message.
/// The subjects of the JetStream advisories a server publishes when a stream is created,
/// updated or deleted (`$JS.EVENT.ADVISORY.STREAM.CREATED.<stream>`, `.UPDATED.`, `.DELETED.`;
/// the stream's other advisories match too, and cost one needless relearn each).
pub const STREAM_ADVISORIES: &str = "$JS.EVENT.ADVISORY.STREAM.*.*";

pub(crate) fn subject_problem(subject: &str, pattern_allowed: bool) -> Option<String> {
    if is_plain_subject(subject) {
        // Every publish asks; this answers for nearly all of them in one pass.
        return None;
    }
    if subject.is_empty() {
        return Some("it is empty".to_owned());
    }
    if subject.chars().any(char::is_whitespace) {
        return Some("it contains whitespace".to_owned());
    }
    let tokens: Vec<&str> = subject.split('.').collect();
    for (i, token) in tokens.iter().enumerate() {
        if token.is_empty() {
            return Some("it has an empty token (a leading, trailing or doubled `.`)".to_owned());
        }
        let wildcard = *token == "*" || *token == ">";
        if token.contains(['*', '>']) && !wildcard {
            return Some(format!(
                "`{token}` mixes a wildcard with other characters; `*` and `>` stand alone between dots"
            ));
        }
        if wildcard && !pattern_allowed {
            return Some(
                "it contains a wildcard, and a message is published to one subject".to_owned(),
            );
        }
        if *token == ">" && i + 1 != tokens.len() {
            return Some("`>` may only be the last token".to_owned());
        }
    }
    None
}

/// A subject of printable ASCII tokens without wildcards, none empty: valid, whether patterns
/// are allowed or not. Anything else takes the long way, which says what is wrong.
///
/// Every publish asks (a request's reply inbox is 50 bytes and more), so it reads eight bytes
/// at a time; what is left after the last eight, a byte at a time.
fn is_plain_subject(subject: &str) -> bool {
    const ONES: u64 = u64::from_ne_bytes([1; 8]);
    const HIGHS: u64 = ONES * 0x80;
    /// `0x80` in each byte of `v` that is zero, nothing elsewhere.
    const fn zeros(v: u64) -> u64 {
        !(((v & !HIGHS) + !HIGHS) | v | !HIGHS)
    }
    let bytes = subject.as_bytes();
    let mut chunks = bytes.chunks_exact(8);
    // Whether the byte before is a `.` (or there is none: a leading `.` is an empty token).
    let mut after_dot = true;
    for chunk in &mut chunks {
        let mut word = [0; 8];
        word.copy_from_slice(chunk);
        // Little-endian: byte `i` of the chunk is bits `8 i..8 i + 8`.
        let x = u64::from_le_bytes(word);
        // Not ASCII, or below `!` (space and control characters; `x` has no high bit here,
        // so adding 0x5f carries into no other byte), or DEL, or a wildcard.
        if x & HIGHS != 0
            || (x + 0x5f * ONES) & HIGHS != HIGHS
            || zeros(x ^ (0x7f * ONES)) != 0
            || zeros(x ^ (u64::from(b'*') * ONES)) != 0
            || zeros(x ^ (u64::from(b'>') * ONES)) != 0
        {
            return false;
        }
        let dots = zeros(x ^ (u64::from(b'.') * ONES));
        // Two dots in a row inside the chunk, or across the chunk before and this one.
        if dots & (dots << 8) != 0 || (after_dot && dots & 0x80 != 0) {
            return false;
        }
        after_dot = dots >> 56 != 0;
    }
    for &byte in chunks.remainder() {
        let plain = match byte {
            b'.' => !after_dot,
            b'*' | b'>' => false,
            _ => byte.is_ascii_graphic(),
        };
        if !plain {
            return false;
        }
        after_dot = byte == b'.';
    }
    !after_dot
}

/// Whether `subject` contains a wildcard token.
pub(crate) fn is_pattern(subject: &str) -> bool {
    subject.split('.').any(|t| t == "*" || t == ">")
}

/// Why a stream or consumer name is not valid, for an error message.
pub(crate) fn name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("it is empty")
    } else if name.chars().any(char::is_whitespace) {
        Some("it contains whitespace")
    } else if name.contains(['.', '*', '>', '/', '\\']) {
        Some("it contains one of `.`, `*`, `>`, `/`, `\\`")
    } else {
        None
    }
}

/// Whether `pattern` (a subject or a pattern) matches the concrete `subject`.
pub(crate) fn matches(pattern: &str, subject: &str) -> bool {
    let mut pattern = pattern.split('.');
    let mut subject = subject.split('.');
    loop {
        match (pattern.next(), subject.next()) {
            (Some(">"), Some(_)) => return true,
            (Some("*"), Some(_)) => {}
            (Some(p), Some(s)) if p == s => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// Whether some subject matches both patterns.
#[cfg_attr(not(feature = "embedded"), allow(dead_code))] // the in-process server's
pub(crate) fn overlaps(a: &str, b: &str) -> bool {
    let mut a = a.split('.');
    let mut b = b.split('.');
    loop {
        match (a.next(), b.next()) {
            (Some(">"), Some(_)) | (Some(_), Some(">")) => return true,
            (Some("*"), Some(_)) | (Some(_), Some("*")) => {}
            (Some(x), Some(y)) if x == y => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    include!("subject/table.rs");
    include!("subject/match_table.rs");

    #[test]
    fn every_row_of_the_shared_match_table() {
        for &(pattern, subject, expected) in MATCH_TABLE {
            assert_eq!(
                matches(pattern, subject),
                expected,
                "{pattern:?} on {subject:?}"
            );
        }
    }

    #[test]
    fn every_row_of_the_shared_table() {
        for &(subject, publish, pattern) in SUBJECT_TABLE {
            assert_eq!(
                subject_problem(subject, false).is_none(),
                publish,
                "{subject:?} to publish to: {:?}",
                subject_problem(subject, false)
            );
            assert_eq!(
                subject_problem(subject, true).is_none(),
                pattern,
                "{subject:?} as a pattern: {:?}",
                subject_problem(subject, true)
            );
            assert_eq!(
                is_pattern(subject) && pattern,
                pattern && !publish,
                "{subject:?}"
            );
        }
    }

    #[test]
    fn subjects() {
        assert_eq!(subject_problem("orders.shipped", false), None);
        assert_eq!(subject_problem("orders.*", true), None);
        assert_eq!(subject_problem("orders.>", true), None);
        assert!(subject_problem("orders.*", false).is_some());
        assert!(subject_problem("", true).is_some());
        assert!(subject_problem("orders..shipped", true).is_some());
        assert!(subject_problem(".orders", true).is_some());
        assert!(subject_problem("orders.", true).is_some());
        assert!(subject_problem("orders shipped", true).is_some());
        assert!(subject_problem("orders.>.x", true).is_some());
        assert!(subject_problem("orders.a*", true).is_some());
        assert!(subject_problem("orders\u{b}shipped", false).is_some());
        assert!(subject_problem("orders.\u{a0}", false).is_some());
        assert_eq!(subject_problem("$JS.ACK.ORDERS.c.1.2.3.4.5", false), None);
        assert_eq!(subject_problem("ümlaut.subject", false), None);
    }

    #[test]
    fn the_short_way_only_passes_what_the_long_way_passes() {
        for subject in [
            "",
            ".",
            "a",
            "a.b",
            "a..b",
            ".a",
            "a.",
            "a.*",
            "a.>",
            "a b",
            "a\tb",
            "a\u{b}b",
            "$JS.API.x",
            "a.b-c_d",
            "ü.x",
            "a.\u{a0}",
            "*",
            ">",
            "a.>.b",
        ] {
            let long = !subject.is_empty()
                && !subject.chars().any(char::is_whitespace)
                && subject
                    .split('.')
                    .all(|t| !t.is_empty() && !t.contains(['*', '>']));
            assert!(!is_plain_subject(subject) || long, "{subject:?}");
        }
        assert!(is_plain_subject("orders.shipped"));
        assert!(!is_plain_subject("orders.*"));
        assert!(!is_plain_subject("ü.x"));
    }

    /// The byte-at-a-time rule `is_plain_subject` reads eight bytes at a time.
    fn plain_byte_by_byte(subject: &str) -> bool {
        let mut previous = b'.';
        for &byte in subject.as_bytes() {
            let plain = match byte {
                b'.' => previous != b'.',
                b'*' | b'>' => false,
                _ => byte.is_ascii_graphic(),
            };
            if !plain {
                return false;
            }
            previous = byte;
        }
        previous != b'.'
    }

    #[test]
    fn eight_bytes_at_a_time_answer_as_one_at_a_time() {
        // Every byte at every position of subjects around one and two words long, and every
        // string of up to 5 bytes over the bytes that matter; then dots at every pair of
        // positions (doubled dots inside a word and across two).
        let base = "abcdefgh.ijklmno.pqrstuv";
        for len in [1, 7, 8, 9, 15, 16, 17, base.len()] {
            let subject = &base[..len];
            assert_eq!(
                is_plain_subject(subject),
                plain_byte_by_byte(subject),
                "{subject:?}"
            );
            for at in 0..len {
                for byte in 0..=255_u8 {
                    let mut bytes = subject.as_bytes().to_vec();
                    bytes[at] = byte;
                    let Ok(changed) = std::str::from_utf8(&bytes) else {
                        continue;
                    };
                    assert_eq!(
                        is_plain_subject(changed),
                        plain_byte_by_byte(changed),
                        "{changed:?}"
                    );
                }
            }
        }
        let alphabet = ['a', '.', '*', '>', ' ', '!', '~', '\u{7f}', '\u{1f}', 'é'];
        let mut strings = vec![String::new()];
        for _ in 0..5 {
            strings = strings
                .iter()
                .flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}")))
                .collect();
            for s in &strings {
                for padded in [
                    s.clone(),
                    format!("abcdefg{s}"),
                    format!("{s}abcdefghijklmn"),
                ] {
                    assert_eq!(
                        is_plain_subject(&padded),
                        plain_byte_by_byte(&padded),
                        "{padded:?}"
                    );
                }
            }
        }
        let long = "abcdefghijklmnopqrstuvwxyz0123456789";
        for i in 0..long.len() {
            for j in i..long.len() {
                let mut bytes = long.as_bytes().to_vec();
                bytes[i] = b'.';
                bytes[j] = b'.';
                let subject = std::str::from_utf8(&bytes).expect("ASCII");
                assert_eq!(
                    is_plain_subject(subject),
                    plain_byte_by_byte(subject),
                    "{subject:?}"
                );
            }
        }
    }

    #[test]
    fn names() {
        assert_eq!(name_problem("PAYMENTS"), None);
        assert_eq!(name_problem("capture-1_a"), None);
        assert!(name_problem("").is_some());
        assert!(name_problem("a.b").is_some());
        assert!(name_problem("a b").is_some());
        assert!(name_problem("a*").is_some());
    }

    #[test]
    fn matching() {
        assert!(matches("orders.*", "orders.eu"));
        assert!(!matches("orders.*", "orders.eu.x"));
        assert!(matches("orders.>", "orders.eu.x"));
        assert!(!matches("orders.>", "orders"));
        assert!(matches("a.b", "a.b"));
        assert!(!matches("a.b", "a.c"));
        assert!(is_pattern("a.*"));
        assert!(!is_pattern("a.b*"));
        assert!(matches("*.shipped", "orders.shipped"));
        assert!(!matches("orders.*", "orders"));
        assert!(matches(">", "anything.at.all"));
    }

    #[test]
    fn patterns_overlap_when_one_subject_matches_both() {
        assert!(overlaps("orders.*", "orders.shipped"));
        assert!(overlaps("orders.>", "*.shipped.eu"));
        assert!(overlaps("orders.*", "*.shipped"));
        assert!(!overlaps("orders.*", "payments.*"));
        assert!(!overlaps("orders.*", "orders.a.b"));
    }
}
