//! What a [`TestApp`](super::TestApp) records of each handling: the observer the app runs with, and the
//! records tests read (handled deliveries, undecodable payloads, panics).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use bytes::Bytes;
use ruststream::registration::Handled;
use ruststream::settle::Decision;
use ruststream::{HandlerOutcome, Handling, Observer};

/// One delivery a handler took, as the app's observer saw it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct HandledDelivery {
    /// The subject the message arrived on.
    pub subject: String,
    /// The server's delivery count (`None` on Core).
    pub delivered: Option<u64>,
    /// The attempt the cap counts, the first being 1.
    pub attempt: u32,
    /// The payload, as it arrived.
    pub payload: Bytes,
    /// What the handler said (or that the payload did not decode, or that it panicked).
    pub handled: Handled,
    /// What the runtime decided to do with the delivery.
    pub decision: Decision,
}

/// A payload that did not decode: its handler did not run.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DecodeFailure {
    /// The subject the message arrived on.
    pub subject: String,
    /// The payload, as it arrived.
    pub payload: Bytes,
    /// Why it did not decode.
    pub error: String,
}

/// A handler call that panicked: the panic did not reach the test, the runtime caught it and
/// settled the delivery as the registration's `on_panic` says (`retry()` under the cap by
/// default).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct HandlerPanic {
    /// The subject the message arrived on.
    pub subject: String,
    /// The server's delivery count (`None` on Core).
    pub delivered: Option<u64>,
    /// The attempt the cap counts, the first being 1.
    pub attempt: u32,
    /// The payload, as it arrived.
    pub payload: Bytes,
    /// The panic's message (`"a panic with a non-string payload"` when it was not a string).
    pub message: String,
    /// What the runtime decided to do with the delivery.
    pub decision: Decision,
}

/// An [`Observer`] that records every handled delivery, by registration.
///
/// [`TestApp`] starts its app with one; a live test passes one to
/// `app.start(Env::new().with_observer(recorder.clone()))` and asks it the same questions.
#[derive(Default)]
pub struct Recorder {
    seen: Mutex<BTreeMap<String, Vec<HandledDelivery>>>,
    count: AtomicU64,
    /// The most deliveries of one message seen, and the registration that took it.
    most: Mutex<(u64, String)>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("handled", &self.count())
            .finish_non_exhaustive()
    }
}

impl Observer for Recorder {
    fn handled(&self, handling: &Handling<'_>) {
        let delivery = handling.delivery;
        let record = HandledDelivery {
            subject: delivery.subject().to_owned(),
            delivered: delivery.delivered(),
            attempt: delivery.attempt().get(),
            payload: delivery.payload().clone(),
            handled: handling.handled.clone(),
            decision: *handling.decision,
        };
        let deliveries = record.delivered.unwrap_or(u64::from(record.attempt));
        {
            let mut most = self.most.lock().unwrap_or_else(PoisonError::into_inner);
            if deliveries > most.0 {
                *most = (deliveries, handling.registration.to_owned());
            }
        }
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(handling.registration.to_owned())
            .or_default()
            .push(record);
        self.count.fetch_add(1, Ordering::SeqCst);
    }
}

impl Recorder {
    /// A recorder that has seen nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// The most deliveries (JetStream's delivered count, Core's attempt) one message had, and
    /// the registration that took it; `(0, "")` before any.
    pub fn most_deliveries(&self) -> (u64, String) {
        self.most
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How many deliveries were handled, over every registration.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::SeqCst)
    }

    /// Everything `registration` was handed, in order.
    pub fn handled(&self, registration: &str) -> Vec<HandledDelivery> {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(registration)
            .cloned()
            .unwrap_or_default()
    }

    /// Every outcome handler `registration` returned, in order: a payload that did not decode,
    /// a panic and an output that can never be published are not outcomes (see
    /// [`panics`](Self::panics), [`decode_failures`](Self::decode_failures) and
    /// [`handled`](Self::handled)).
    pub fn outcomes(&self, registration: &str) -> Vec<HandlerOutcome> {
        self.handled(registration)
            .into_iter()
            .filter_map(|r| match r.handled {
                Handled::Outcome(outcome) => Some(outcome),
                _ => None,
            })
            .collect()
    }

    /// The delivered count of every delivery handler `registration` ran on (a payload that
    /// did not decode is left out), in order.
    pub fn delivered(&self, registration: &str) -> Vec<Option<u64>> {
        self.handled(registration)
            .into_iter()
            .filter(|r| !matches!(r.handled, Handled::Undecodable(_)))
            .map(|r| r.delivered)
            .collect()
    }

    /// Every call of handler `registration` that panicked, in order, with the panic's message
    /// and what the runtime did with the delivery.
    pub fn panics(&self, registration: &str) -> Vec<HandlerPanic> {
        self.handled(registration)
            .into_iter()
            .filter_map(|r| match r.handled {
                Handled::Panicked(message) => Some(HandlerPanic {
                    subject: r.subject,
                    delivered: r.delivered,
                    attempt: r.attempt,
                    payload: r.payload,
                    message,
                    decision: r.decision,
                }),
                _ => None,
            })
            .collect()
    }

    /// Every delivery of `registration` whose payload did not decode, in order.
    pub fn decode_failures(&self, registration: &str) -> Vec<DecodeFailure> {
        self.handled(registration)
            .into_iter()
            .filter_map(|r| match r.handled {
                Handled::Undecodable(error) => Some(DecodeFailure {
                    subject: r.subject,
                    payload: r.payload,
                    error,
                }),
                _ => None,
            })
            .collect()
    }
}
