//! Property tests of the parsers that read what arrives from the wire or from a user: the
//! `$JS.ACK` reply subject, the Core retry-count header, subject validation and matching, the
//! credentials in a URL, and the decode-error shape the logs show.
//!
//! Each property runs 256 random cases by default (`PROPTEST_CASES=100000 cargo test -p
//! ruststream-nats --lib fuzz` for a long run); CI runs the default.

use std::num::NonZeroU32;
use std::sync::Arc;

use bytes::Bytes;
use proptest::prelude::*;
use ruststream::Headers;
use ruststream::settle::DeliveryModel;

use crate::JetStreamInfo;
use crate::copies::RETRY_COUNT_HEADER;
use crate::executor::decode_error_shape;
use crate::jetstream_info::number;
use crate::options::{Auth, split_credentials};
use crate::source::incoming_capped;
use crate::subject::{matches, subject_problem};
use crate::transport::RawMessage;

/// A stream or consumer name as the server allows it.
fn name() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_-]{1,16}"
}

/// A token of a subject: printable, no dot, no wildcard.
fn token() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_$-]{1,8}"
}

proptest! {
    #![proptest_config(ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn any_reply_subject_parses_or_is_refused_without_panicking(subject in any::<String>()) {
        let _ = JetStreamInfo::parse(&subject);
    }

    #[test]
    fn dotted_noise_parses_or_is_refused_without_panicking(
        tokens in proptest::collection::vec("[A-Za-z0-9_$.*>-]{0,6}", 0..14)
    ) {
        let subject = format!("$JS.ACK.{}", tokens.join("."));
        if let Some(info) = JetStreamInfo::parse(&subject) {
            prop_assert!(!info.stream.is_empty() && !info.consumer.is_empty());
        }
    }

    #[test]
    fn numbers_read_as_the_standard_library_reads_them(
        text in prop_oneof![
            any::<String>(),
            "[+]?[0-9]{0,22}",
            any::<u64>().prop_map(|n| n.to_string()),
            (u64::MAX - 1000..=u64::MAX).prop_map(|n| format!("{n}{}", n % 10)),
        ],
    ) {
        prop_assert_eq!(number(&text), text.parse::<u64>().ok());
    }

    #[test]
    fn acknowledgement_subjects_round_trip(
        // Names as the server allows them, and any bytes but a dot (what the eight-at-a-time
        // search for dots must not confuse with one, at every offset).
        stream in prop_oneof![name(), "[^.]{1,20}"],
        consumer in prop_oneof![name(), "[^.]{1,20}"],
        numbers in any::<[u64; 5]>(),
        domain in proptest::option::of(name()),
        hash in name(),
    ) {
        let [delivered, sseq, cseq, ts, pending] = numbers;
        let tail = format!("{stream}.{consumer}.{delivered}.{sseq}.{cseq}.{ts}.{pending}");
        let subject = match &domain {
            None => format!("$JS.ACK.{tail}"),
            Some(domain) => format!("$JS.ACK.{domain}.{hash}.{tail}.random"),
        };
        let info = JetStreamInfo::parse(&subject).expect("an acknowledgement subject");
        prop_assert_eq!(&*info.stream, stream.as_str());
        prop_assert_eq!(&*info.consumer, consumer.as_str());
        prop_assert_eq!(
            [info.delivered, info.stream_sequence, info.consumer_sequence, info.timestamp, info.pending],
            numbers
        );
        let expected_domain = domain.filter(|d| d != "_");
        prop_assert_eq!(info.domain.as_deref(), expected_domain.as_deref());
    }

    #[test]
    fn a_retry_count_header_never_goes_past_the_cap(
        value in prop_oneof![
            any::<String>(),
            any::<i64>().prop_map(|n| n.to_string()),
            any::<u32>().prop_map(|n| n.to_string()),
            (0u32..10).prop_map(|n| n.to_string()),
        ],
        cap in proptest::option::of(1u32..20),
    ) {
        let cap = cap.and_then(NonZeroU32::new);
        let headers: Headers = [(RETRY_COUNT_HEADER, value.as_str())].into_iter().collect();
        let raw = RawMessage {
            subject: Arc::from("orders.created"),
            reply: None,
            headers,
            payload: Bytes::from_static(b"{}"),
            jetstream: None,
        };
        let attempt = incoming_capped(raw, DeliveryModel::Core, "fuzz", cap).delivery.attempt();
        if let Some(cap) = cap {
            prop_assert!(attempt <= cap, "attempt {attempt} past cap {cap} for {value:?}");
        }
        match value.trim().parse::<u32>() {
            Ok(count) => {
                let counted = NonZeroU32::MIN.saturating_add(count);
                prop_assert_eq!(attempt, cap.map_or(counted, |cap| counted.min(cap)));
            }
            Err(_) => prop_assert_eq!(attempt.get(), 1),
        }
    }

    #[test]
    fn subject_validation_agrees_with_the_syntax(
        subject in prop_oneof![
            any::<String>(),
            proptest::collection::vec("[A-Za-z0-9 .*>\t_-]{0,5}", 0..6).prop_map(|t| t.join(".")),
        ],
        pattern_allowed in any::<bool>(),
    ) {
        let tokens: Vec<&str> = subject.split('.').collect();
        let valid = !subject.is_empty()
            && !subject.chars().any(char::is_whitespace)
            && tokens.iter().enumerate().all(|(i, token)| {
                let wildcard = *token == "*" || *token == ">";
                !token.is_empty()
                    && (wildcard || !token.contains(['*', '>']))
                    && (!wildcard || pattern_allowed)
                    && (*token != ">" || i + 1 == tokens.len())
            });
        let problem = subject_problem(&subject, pattern_allowed);
        prop_assert_eq!(problem.is_none(), valid, "{:?}: {:?}", subject, problem);
        if valid && !pattern_allowed {
            prop_assert!(matches(&subject, &subject));
        }
    }

    #[test]
    fn patterns_match_what_the_syntax_says(
        tokens in proptest::collection::vec(token(), 1..6),
        wild in proptest::collection::vec(0u8..3, 1..6),
    ) {
        let subject = tokens.join(".");
        // Replace some tokens by `*`, and maybe end with `>`.
        let mut pattern: Vec<String> = tokens
            .iter()
            .zip(wild.iter().chain(std::iter::repeat(&0)))
            .map(|(token, w)| if *w == 1 { "*".to_owned() } else { token.clone() })
            .collect();
        if wild[0] == 2 && pattern.len() > 1 {
            pattern.truncate(pattern.len() - 1);
            pattern.push(">".to_owned());
        }
        prop_assert!(matches(&pattern.join("."), &subject));
        let longer = subject.clone() + ".extra";
        prop_assert!(!matches(&longer, &subject));
    }

    #[test]
    fn url_credentials_never_stay_in_the_servers(
        user in "[A-Za-z0-9_.-]{1,12}",
        password in "[ -$&-+--~]{1,24}",
        port in 1u16..,
    ) {
        // Printable ASCII except `%` and `,` (a `%` would be read as an escape, a `,` as the
        // next server: both must be written %25 and %2C).
        let split = split_credentials(&format!("nats://{user}:{password}@host:{port}"));
        prop_assert_eq!(split.servers, vec![format!("nats://host:{port}")]);
        prop_assert_eq!(split.auth, Some(Auth::UserPassword { user, password }));
    }

    #[test]
    fn any_url_splits_without_panicking(url in any::<String>()) {
        let split = split_credentials(&url);
        for server in &split.servers {
            prop_assert!(!server.contains('@'));
        }
    }

    #[test]
    fn a_decode_error_shape_never_quotes_the_payload(
        secret in "[A-Za-z0-9]{12,24}",
        shape in 0u8..4,
    ) {
        let payload = match shape {
            0 => format!(r#"{{"id":"{secret}"}}"#),
            1 => format!(r#"{{"id":1,"{secret}":2}}"#),
            2 => format!(r#"["{secret}"]"#),
            _ => format!(r#"{{"id": {secret}}}"#),
        };
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Order {
            id: u64,
        }
        let err = serde_json::from_str::<Order>(&payload).expect_err("does not decode");
        let message = format!("the payload does not decode as app::Order: {err}");
        let shown = decode_error_shape(&message);
        prop_assert!(!shown.contains(&secret), "{shown}");
        prop_assert!(shown.starts_with("the payload does not decode as app::Order: "), "{shown}");
    }
}
