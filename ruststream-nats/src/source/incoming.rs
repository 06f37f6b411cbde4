//! A wire message as a delivery: the JetStream facts read from its acknowledgement subject, or
//! a Core message's attempt from its retry-count header (never trusted past the cap).

use std::num::NonZeroU32;
use std::sync::Arc;

use ruststream::Delivery;
use ruststream::settle::DeliveryModel;

use crate::JetStreamInfo;
use crate::copies::RETRY_COUNT_HEADER;
use crate::executor::Incoming;
use crate::rate::RateLimited;
use crate::transport::RawMessage;

/// A wire message as a delivery of `model`.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn incoming(raw: RawMessage, model: DeliveryModel, registration: &str) -> Incoming {
    incoming_capped(raw, model, registration, None)
}

/// [`incoming`] for a registration whose cap is `cap`: a Core retry-count header never puts a
/// delivery past it.
pub(crate) fn incoming_capped(
    raw: RawMessage,
    model: DeliveryModel,
    registration: &str,
    cap: Option<NonZeroU32>,
) -> Incoming {
    incoming_into(raw, model, registration, cap, None)
}

/// [`incoming_capped`], built in `spent`'s allocation when given (a delivery that is settled).
pub(crate) fn incoming_into(
    raw: RawMessage,
    model: DeliveryModel,
    registration: &str,
    cap: Option<NonZeroU32>,
    spent: Option<Delivery>,
) -> Incoming {
    let delivery = |subject: Arc<str>, payload| match spent {
        Some(spent) => spent.renew(subject, payload),
        None => Delivery::new(subject, payload),
    };
    let RawMessage {
        subject,
        reply,
        headers,
        payload,
        jetstream,
    } = raw;
    match model {
        DeliveryModel::JetStream => {
            let mut delivery = delivery(subject, payload)
                .with_headers(headers)
                .with_max_attempts(cap);
            // Read by the transport already, as a rule (the pull reads it to check that a
            // message is its consumer's delivery); read here otherwise.
            match jetstream.or_else(|| reply.as_deref().and_then(JetStreamInfo::parse)) {
                Some(info) => {
                    let attempt = u32::try_from(info.delivered).unwrap_or(u32::MAX);
                    delivery = delivery
                        .with_delivered(Some(info.delivered))
                        .with_attempt(NonZeroU32::new(attempt).unwrap_or(NonZeroU32::MIN));
                    delivery.extensions_mut().insert(info);
                }
                None => tracing::warn!(
                    registration,
                    subject = delivery.subject(),
                    reply = reply.as_deref().unwrap_or(""),
                    "a JetStream message without a readable acknowledgement subject; handled as a first delivery"
                ),
            }
            Incoming {
                delivery,
                ack_subject: reply,
            }
        }
        // Core, and anything a later model might be: the publisher's reply subject is kept.
        _ => {
            let attempt = core_attempt(&headers, &subject, registration, cap);
            let delivery = delivery(subject, payload)
                .with_headers(headers)
                .with_reply(reply.map(Arc::from))
                .with_attempt(attempt)
                .with_max_attempts(cap);
            Incoming {
                delivery,
                ack_subject: None,
            }
        }
    }
}

/// Malformed or out-of-range retry-count headers, logged at most once per period.
static FORGED_RETRY_COUNT: RateLimited = RateLimited::new();

/// A Core message's attempt: its retry-count header plus one, 1 without it.
///
/// The header comes from whoever published the message, so it is not trusted further than
/// this: a malformed value (negative, not a number, larger than `u32`) counts as attempt 1, and
/// a count at or past the registration's cap counts as the cap, so the message is handled once
/// before the cap applies, never refused unhandled. Both are logged, at most once per 10 s with
/// how many were not logged, so a publisher cannot flood the log.
fn core_attempt(
    headers: &ruststream::Headers,
    subject: &str,
    registration: &str,
    cap: Option<NonZeroU32>,
) -> NonZeroU32 {
    let Some(value) = headers.get(RETRY_COUNT_HEADER) else {
        return NonZeroU32::MIN;
    };
    let attempt = match value.trim().parse::<u32>() {
        Ok(count) => NonZeroU32::MIN.saturating_add(count),
        Err(err) => {
            if let Some(not_logged) = FORGED_RETRY_COUNT.check() {
                tracing::warn!(
                    registration,
                    subject,
                    header = RETRY_COUNT_HEADER,
                    value = ?value.chars().take(32).collect::<String>(),
                    %err,
                    not_logged,
                    "a malformed retry-count header; the message is handled as attempt 1"
                );
            }
            return NonZeroU32::MIN;
        }
    };
    match cap {
        Some(cap) if attempt > cap => {
            if let Some(not_logged) = FORGED_RETRY_COUNT.check() {
                tracing::warn!(
                    registration,
                    subject,
                    header = RETRY_COUNT_HEADER,
                    value,
                    cap = cap.get(),
                    not_logged,
                    "a retry-count header past the registration's cap (not a copy this app published); the message is handled once, as its last attempt"
                );
            }
            cap
        }
        _ => attempt,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use bytes::Bytes;
    use ruststream::Headers;

    use crate::transport::ReplySubject;

    fn raw(reply: Option<&str>, headers: Headers) -> RawMessage {
        RawMessage {
            subject: Arc::from("orders.created"),
            reply: reply.map(ReplySubject::from),
            headers,
            payload: Bytes::from_static(b"{}"),
            jetstream: None,
        }
    }

    #[test]
    fn a_jetstream_delivery_counts_with_the_server() {
        let incoming = incoming(
            raw(
                Some("$JS.ACK.ORDERS.worker.3.10.12.1700000000000000000.0"),
                Headers::new(),
            ),
            DeliveryModel::JetStream,
            "worker",
        );
        assert_eq!(incoming.delivery.delivered(), Some(3));
        assert_eq!(incoming.delivery.attempt().get(), 3);
        assert_eq!(incoming.delivery.reply(), None);
        assert_eq!(
            incoming
                .delivery
                .extension::<JetStreamInfo>()
                .map(|i| i.stream_sequence),
            Some(10)
        );
        assert!(incoming.ack_subject.is_some());
    }

    #[test]
    fn a_jetstream_delivery_keeps_the_facts_the_transport_read() {
        // The pull read the subject already: the source takes its facts as they are, without
        // reading `reply` again (here a different subject, so a second read would show).
        let read = JetStreamInfo::parse("$JS.ACK.ORDERS.worker.2.41.50.1700000000000000000.0");
        let mut message = raw(
            Some("$JS.ACK.ORDERS.worker.3.10.12.1700000000000000000.0"),
            Headers::new(),
        );
        message.jetstream = read.clone();
        let incoming = incoming(message, DeliveryModel::JetStream, "worker");
        assert_eq!(
            incoming.delivery.extension::<JetStreamInfo>(),
            read.as_ref()
        );
        assert_eq!(incoming.delivery.delivered(), Some(2));
        assert_eq!(incoming.delivery.attempt().get(), 2);
        // Still acknowledged on the subject the server gave it.
        assert_eq!(
            incoming.ack_subject.as_deref(),
            Some("$JS.ACK.ORDERS.worker.3.10.12.1700000000000000000.0")
        );
    }

    #[test]
    fn a_core_delivery_counts_with_the_header() {
        let first = incoming(
            raw(Some("_INBOX.x"), Headers::new()),
            DeliveryModel::Core,
            "r",
        );
        assert_eq!(first.delivery.attempt().get(), 1);
        assert_eq!(first.delivery.delivered(), None);
        assert_eq!(first.delivery.reply(), Some("_INBOX.x"));

        let copy: Headers = [(RETRY_COUNT_HEADER, "2")].into_iter().collect();
        let third = incoming(raw(None, copy), DeliveryModel::Core, "r");
        assert_eq!(third.delivery.attempt().get(), 3);

        let bad: Headers = [(RETRY_COUNT_HEADER, "two")].into_iter().collect();
        let malformed = incoming(raw(None, bad), DeliveryModel::Core, "r");
        assert_eq!(malformed.delivery.attempt().get(), 1);
    }

    #[test]
    fn a_delivery_says_whether_the_cap_allows_another_attempt() {
        let cap = NonZeroU32::new(3);
        let jetstream = |delivered: u32| {
            let reply = format!("$JS.ACK.ORDERS.worker.{delivered}.10.12.1700000000000000000.0");
            incoming_capped(
                raw(Some(&reply), Headers::new()),
                DeliveryModel::JetStream,
                "worker",
                cap,
            )
            .delivery
        };
        assert!(!jetstream(2).is_last_attempt());
        assert!(jetstream(3).is_last_attempt());
        assert_eq!(jetstream(3).max_attempts(), cap);

        let core = |count: Option<&str>| {
            let headers: Headers = count.map(|c| (RETRY_COUNT_HEADER, c)).into_iter().collect();
            incoming_capped(raw(None, headers), DeliveryModel::Core, "r", cap).delivery
        };
        assert!(!core(None).is_last_attempt());
        assert!(core(Some("2")).is_last_attempt());

        // Without a cap no attempt is the last one.
        let uncapped = incoming(
            raw(
                Some("$JS.ACK.ORDERS.worker.9.10.12.1700000000000000000.0"),
                Headers::new(),
            ),
            DeliveryModel::JetStream,
            "worker",
        );
        assert!(!uncapped.delivery.is_last_attempt());
    }

    #[test]
    fn a_forged_retry_count_never_goes_past_the_cap() {
        let cap = NonZeroU32::new(3);
        let attempt = |value: &str| {
            let headers: Headers = [(RETRY_COUNT_HEADER, value)].into_iter().collect();
            incoming_capped(raw(None, headers), DeliveryModel::Core, "r", cap)
                .delivery
                .attempt()
                .get()
        };
        assert_eq!(attempt("1"), 2);
        assert_eq!(attempt("2"), 3);
        // At or past the cap: handled once, as the last attempt.
        assert_eq!(attempt("3"), 3);
        assert_eq!(attempt("4294967295"), 3);
        // Malformed: a first attempt.
        for forged in ["-1", "99999999999999999999", "NaN", "", " 1 2", "0x10"] {
            assert_eq!(attempt(forged), 1, "{forged:?}");
        }
        // Without a cap, the count stands (saturating).
        let headers: Headers = [(RETRY_COUNT_HEADER, "4294967295")].into_iter().collect();
        let uncapped = incoming(raw(None, headers), DeliveryModel::Core, "r");
        assert_eq!(uncapped.delivery.attempt().get(), u32::MAX);
    }
}
