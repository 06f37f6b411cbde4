//! What came of handing one delivery to its handler ([`Handled`]): what the settlement
//! decision starts from, and what observers and middleware see.

use std::time::Duration;

use crate::outcome::HandlerOutcome;

/// What came of handing one delivery to its handler.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Handled {
    /// The handler (or an extractor) returned this outcome.
    Outcome(HandlerOutcome),
    /// The payload did not decode; the handler did not run.
    Undecodable(String),
    /// The handler panicked; settled as the registration's `on_panic` says (`retry()` under
    /// the cap by default).
    Panicked(String),
    /// The handler ran past the registration's `handler_timeout` and was cancelled; treated as
    /// `retry()` under the cap.
    TimedOut(Duration),
    /// The handler returned an `Err` of its own error type (the message is the error and its
    /// sources); settled as the registration's `on_error` says (`retry()` by default).
    Failed(String),
    /// Nothing settles the delivery (a batch whose outcomes did not match its length).
    NoOutcome(String),
    /// An output of the handling failed in a way that fails again on every try (too large, a
    /// subject that is not one, a value that does not encode: see
    /// [`PublishErrorKind::is_permanent`](crate::PublishErrorKind::is_permanent)); the message
    /// is the publish error. Not retried: [`crate::settle::decide_unpublishable`] says what
    /// happens to the delivery.
    Unpublishable(String),
    /// The delivery arrived past the cap (an earlier one hung past `ack_wait`, crashed the
    /// process, or its dead letter failed); the handler did not run, and
    /// [`crate::settle::decide_arrival`] says what happens to it.
    PastCap,
}

impl Handled {
    /// The outcome the settlement decision starts from, if any.
    pub fn outcome(&self) -> Option<&HandlerOutcome> {
        match self {
            Self::Outcome(o) => Some(o),
            _ => None,
        }
    }
}
