//! The mount site's policy for a registration ([`Policy`]) and what a failure becomes
//! ([`OnFailure`]).

use std::fmt;
use std::num::{NonZeroU32, NonZeroUsize};
use std::time::Duration;

use crate::codec::Format;
use crate::outcome::HandlerOutcome;
use crate::settle::{self, Decision, Facts};

/// What a failure becomes: a payload that does not decode, a handler that panicked, a handler
/// that returned an `Err` of its own error type. Declared per registration
/// (`.on_undecodable(..)`, `.on_panic(..)`, `.on_error(..)`) and shown in `describe`.
///
/// A retry counts against the cap like a handler's `retry()`: at the cap the message goes to the
/// dead letter, or ends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OnFailure {
    /// To the dead-letter subject when one is declared, else ended (`+TERM` on JetStream, let
    /// go on Core); never retried.
    #[default]
    DeadLetterOrDrop,
    /// Ended without a dead letter (`+TERM` on JetStream, let go on Core): as `drop()`.
    Drop,
    /// Brought back at once: as `retry()`.
    Retry,
    /// Brought back after the delay: as `retry_after(delay)`.
    RetryAfter(Duration),
}

impl OnFailure {
    /// The settlement decision for `facts`: the pure decision of [`settle`].
    pub fn decide(&self, facts: &Facts) -> Decision {
        match self {
            Self::DeadLetterOrDrop => settle::decide_undecodable(facts),
            Self::Drop => settle::decide(&HandlerOutcome::Drop, facts),
            Self::Retry => settle::decide(&HandlerOutcome::Retry, facts),
            Self::RetryAfter(delay) => settle::decide(&HandlerOutcome::RetryAfter(*delay), facts),
        }
    }
}

impl fmt::Display for OnFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DeadLetterOrDrop => f.write_str("dead letter or drop"),
            Self::Drop => f.write_str("drop"),
            Self::Retry => f.write_str("retry"),
            Self::RetryAfter(delay) => write!(f, "retry after {delay:?}"),
        }
    }
}

/// The mount site's policy for a registration.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Policy {
    /// The cap on attempts; the first delivery counts as one.
    pub max_attempts: Option<NonZeroU32>,
    /// Where a spent or undecodable message goes, as it arrived.
    pub dead_letter: Option<String>,
    /// Where a Core retry copy is published (required for a pattern).
    pub retry_to: Option<String>,
    /// How many deliveries are handled at once.
    pub concurrency: NonZeroUsize,
    /// What an undecodable payload becomes.
    pub undecodable: OnFailure,
    /// How long the handler may run on one delivery (or batch) before it is cancelled and the
    /// delivery treated as `retry()`; `None`: as long as it takes.
    pub handler_timeout: Option<Duration>,
    /// How long, at most, the broker tells the server the delivery is still being worked on
    /// while the handler runs (JetStream: `+WPI` every `ack_wait / 2`); `None`: never.
    pub progress_until: Option<Duration>,
    /// Whether each settlement waits for the server to confirm it (JetStream), and is sent
    /// again until it does.
    pub confirm_acks: bool,
    /// The payload format: `None` until the registration, its broker or the app chose one
    /// (JSON).
    pub codec: Option<Format>,
    /// What a panicking handler's delivery becomes (`retry()` by default).
    pub on_panic: OnFailure,
    /// What a handler's `Err` of its own error type becomes (`retry()` by default).
    pub on_error: OnFailure,
    /// Whether a message whose key was already handled is acknowledged without running the
    /// handler, and where the keys are kept; `None`: every message runs it.
    pub idempotency: Option<crate::idempotency::Idempotency>,
    /// The key of the ordering lanes (`.by_key(..)`): deliveries with one key are handled in
    /// order, different keys in parallel; `None`: no order between concurrent deliveries.
    pub lanes: Option<super::LaneKey>,
    /// How many OS threads of the registration's own its handler calls run on
    /// (`.threads(n)`); `None`: on the app's runtime.
    pub threads: Option<NonZeroUsize>,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            max_attempts: None,
            dead_letter: None,
            retry_to: None,
            concurrency: NonZeroUsize::MIN,
            undecodable: OnFailure::DeadLetterOrDrop,
            handler_timeout: None,
            progress_until: None,
            confirm_acks: false,
            codec: None,
            on_panic: OnFailure::Retry,
            on_error: OnFailure::Retry,
            idempotency: None,
            lanes: None,
            threads: None,
        }
    }
}
