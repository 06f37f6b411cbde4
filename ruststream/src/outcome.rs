//! What a handler says should happen to the message it was given.

use std::time::Duration;

/// The answer a handler gives for one delivery.
///
/// The runtime turns it into the acknowledgement the delivery model supports (see
/// [`settle`](crate::settle)): on JetStream an acknowledgement the server acts on, on Core NATS a
/// copy the runtime publishes, or nothing at all.
///
/// ```
/// use ruststream::HandlerOutcome;
/// use std::time::Duration;
///
/// let busy = HandlerOutcome::retry_after(Duration::from_secs(30));
/// assert_eq!(busy, HandlerOutcome::RetryAfter(Duration::from_secs(30)));
/// assert_ne!(HandlerOutcome::ack(), HandlerOutcome::drop());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HandlerOutcome {
    /// The message is done with: processed, never to be seen again.
    Ack,
    /// Bring the message back at once (JetStream), or under a declared cap as a copy (Core).
    Retry,
    /// Bring the message back after the delay.
    RetryAfter(Duration),
    /// The message can never succeed: end it and never deliver it again.
    Drop,
    /// End the delivery now and publish it, as it arrived, to the registration's dead-letter
    /// subject.
    DeadLetter,
}

impl HandlerOutcome {
    /// The message was processed: `+ACK` on JetStream.
    pub const fn ack() -> Self {
        Self::Ack
    }

    /// Bring the message back at once: `-NAK` on JetStream.
    pub const fn retry() -> Self {
        Self::Retry
    }

    /// Bring the message back after `delay`: `-NAK {"delay": ns}` on JetStream, a copy published
    /// after `delay` on Core NATS.
    pub const fn retry_after(delay: Duration) -> Self {
        Self::RetryAfter(delay)
    }

    /// End the message for good: `+TERM` on JetStream.
    pub const fn drop() -> Self {
        Self::Drop
    }

    /// End the delivery now, on any attempt, and publish it as it arrived (payload and headers)
    /// to the registration's dead-letter subject: what a retry at the cap does, chosen by the
    /// handler. JetStream: `+TERM` once the dead-letter publish is stored; Core: the publish.
    /// Counted in `ruststream_dead_letters_total`. A registration without a dead-letter subject
    /// drops the message (`+TERM` on JetStream) and logs an error naming the registration.
    pub const fn dead_letter() -> Self {
        Self::DeadLetter
    }

    /// Whether this outcome asks for the message to come back.
    pub const fn is_retry(&self) -> bool {
        matches!(self, Self::Retry | Self::RetryAfter(_))
    }
}
