// Over 500 lines with its docs: about half are the settlement table and each decision's
// runnable example, the contract the NATS crate executes, kept next to the code they describe.

//! The settlement decision: what the runtime does with a delivery once its handler answered.
//!
//! [`decide`] turns a [`HandlerOutcome`] and the [`Facts`] of one delivery into a [`Decision`]:
//! whether the delivery goes to the dead-letter subject, whether the runtime publishes a
//! [`RetryCopy`] of it, and what it tells the server about the original. It is a pure
//! function, with no I/O, no clock and no NATS types; the NATS crate executes the decision and
//! turns an [`AckKind`] into bytes on the wire.
//!
//! | outcome | JetStream | Core NATS |
//! | --- | --- | --- |
//! | `ack()` | `+ACK` | `AckError::Unsupported` |
//! | `retry()` | `-NAK`: sent again now, delivered + 1 | `AckError::Unsupported`; under a declared cap, a copy published at once |
//! | `retry_after(d)` | `-NAK {"delay": ns}`: held for `d`, delivered + 1 | a copy published after `d` |
//! | `drop()` | `+TERM` | `AckError::Unsupported` |
//! | `dead_letter()` | the dead-letter publish, then `+TERM` | the dead-letter publish |
//!
//! The cap (`max_attempts`) counts the first delivery as one, and only a retry consults it. At the
//! cap nothing comes back: the delivery goes to the dead-letter subject as it arrived when one is
//! declared, and the original is then `+TERM`ed (JetStream) or let go (Core). A handler that
//! answers `dead_letter()` asks for that end on any attempt. A payload that does
//! not decode is never retried ([`decide_undecodable`]), nor is a handling whose output can
//! never be published ([`decide_unpublishable`]).
//!
//! A JetStream delivery that arrives already past the cap (the server counted more deliveries
//! than the cap allows: an earlier one hung past `ack_wait`, crashed the process, or its dead
//! letter could not be published) is not handed to the handler again ([`decide_arrival`]): it
//! goes to the dead-letter subject when one is declared, and is `+TERM`ed. A poison message
//! stops there instead of coming back forever.

use std::fmt;
use std::num::NonZeroU32;
use std::time::Duration;

use crate::HandlerOutcome;

#[cfg(test)]
mod tests;

/// What the delivery model can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeliveryModel {
    /// A JetStream consumer: the server settles, counts deliveries and holds a delayed `-NAK`.
    JetStream,
    /// Core NATS: the server settles nothing, counts nothing and holds nothing.
    Core,
}

/// An acknowledgement kind as the wire knows it.
///
/// [`Display`](fmt::Display) gives the wire form:
///
/// ```
/// use ruststream::settle::AckKind;
/// use std::time::Duration;
///
/// assert_eq!(AckKind::Ack.to_string(), "+ACK");
/// assert_eq!(
///     AckKind::NakAfter(Duration::from_secs(30)).to_string(),
///     r#"-NAK {"delay": 30000000000}"#,
/// );
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AckKind {
    /// `+ACK`: processed; the server forgets the message for this consumer.
    Ack,
    /// `-NAK`: the server delivers the message again at once.
    Nak,
    /// `-NAK {"delay": ns}`: the server holds the message for the delay, then delivers it again.
    NakAfter(Duration),
    /// `+TERM`: the server never delivers the message again.
    Term,
}

impl AckKind {
    /// Whether the server never delivers the message to this consumer again once it acted on
    /// this acknowledgement: `+ACK` and `+TERM`; after a `-NAK` (with a delay or not) it does.
    #[must_use]
    pub const fn is_final(self) -> bool {
        matches!(self, Self::Ack | Self::Term)
    }
}

impl fmt::Display for AckKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ack => f.write_str("+ACK"),
            Self::Nak => f.write_str("-NAK"),
            Self::NakAfter(delay) => write!(f, "-NAK {{\"delay\": {}}}", delay.as_nanos()),
            Self::Term => f.write_str("+TERM"),
        }
    }
}

/// The facts of one delivery the decision depends on.
///
/// ```
/// use ruststream::settle::{DeliveryModel, Facts};
/// use std::num::NonZeroU32;
///
/// let cap = NonZeroU32::new(3).expect("3 is not zero");
/// let first = Facts::core(NonZeroU32::MIN).with_cap(cap).with_copy_target();
/// assert_eq!(first.model, DeliveryModel::Core);
/// assert!(!first.is_at_cap());
/// assert!(first.redelivered().redelivered().is_at_cap());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Facts {
    /// The delivery model the message arrived through.
    pub model: DeliveryModel,
    /// Which delivery this is, the first counting as one: JetStream's delivered count, or on Core
    /// one more than the copy's `x-ruststream-retry-count` header (1 without the header).
    pub attempt: NonZeroU32,
    /// The cap declared with `max_attempts`, counting the first delivery as one; `None`: no cap.
    pub max_attempts: Option<NonZeroU32>,
    /// Whether the registration declares a dead-letter subject.
    pub dead_letter: bool,
    /// Whether a Core copy has a subject to go to: a `CoreSubject`'s own subject, or the
    /// `retry_to` of a `CoreWildcard` registration. JetStream never needs one.
    pub copy_target: bool,
}

impl Facts {
    /// The facts of a JetStream delivery: no cap, no dead letter, no copy target.
    #[must_use]
    pub const fn jetstream(attempt: NonZeroU32) -> Self {
        Self::new(DeliveryModel::JetStream, attempt)
    }

    /// The facts of a Core delivery: no cap, no dead letter, no copy target.
    #[must_use]
    pub const fn core(attempt: NonZeroU32) -> Self {
        Self::new(DeliveryModel::Core, attempt)
    }

    const fn new(model: DeliveryModel, attempt: NonZeroU32) -> Self {
        Self {
            model,
            attempt,
            max_attempts: None,
            dead_letter: false,
            copy_target: false,
        }
    }

    /// The same facts under a cap of `max_attempts` deliveries, the first counting as one.
    #[must_use]
    pub const fn with_cap(self, max_attempts: NonZeroU32) -> Self {
        Self {
            max_attempts: Some(max_attempts),
            ..self
        }
    }

    /// The same facts with a dead-letter subject declared.
    #[must_use]
    pub const fn with_dead_letter(self) -> Self {
        Self {
            dead_letter: true,
            ..self
        }
    }

    /// The same facts with a subject for Core copies to go to.
    #[must_use]
    pub const fn with_copy_target(self) -> Self {
        Self {
            copy_target: true,
            ..self
        }
    }

    /// The facts of the next delivery of the same message: delivered + 1.
    #[must_use]
    pub const fn redelivered(self) -> Self {
        Self {
            attempt: self.attempt.saturating_add(1),
            ..self
        }
    }

    /// Whether this delivery is past the cap: a cap is declared and `attempt` is over it. Only a
    /// JetStream delivery can be (the server counts deliveries; the runtime stops sending Core
    /// copies at the cap).
    ///
    /// ```
    /// use ruststream::settle::Facts;
    /// use std::num::NonZeroU32;
    ///
    /// let cap = NonZeroU32::new(2).expect("2 is not zero");
    /// let second = Facts::jetstream(cap).with_cap(cap);
    /// assert!(second.is_at_cap() && !second.is_past_cap());
    /// assert!(second.redelivered().is_past_cap());
    /// ```
    #[must_use]
    pub const fn is_past_cap(&self) -> bool {
        match self.max_attempts {
            Some(cap) => self.attempt.get() > cap.get(),
            None => false,
        }
    }

    /// Whether this delivery is at the cap: a cap is declared and `attempt` reached it. Without a
    /// cap a delivery is never at the cap.
    #[must_use]
    pub const fn is_at_cap(&self) -> bool {
        match self.max_attempts {
            Some(cap) => self.attempt.get() >= cap.get(),
            None => false,
        }
    }
}

/// What to tell the server about the original delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Settle {
    /// Send this acknowledgement; the server acts on it (JetStream).
    Send(AckKind),
    /// The model cannot settle: report `AckError::Unsupported` for this kind, logged (Core).
    Unsupported(AckKind),
    /// Send nothing.
    Nothing,
}

/// A copy of the message the runtime publishes (Core only).
///
/// The copy carries the delivery's payload and headers, with `x-ruststream-retry-count` set to
/// `retry_count`. It waits for `after` on a timer inside the process: a stop before the timer
/// fires loses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RetryCopy {
    /// How long the copy waits before it is published: zero for `retry()`, `d` for
    /// `retry_after(d)`.
    pub after: Duration,
    /// The `x-ruststream-retry-count` header value the copy carries: the attempt it came from.
    pub retry_count: u32,
}

impl RetryCopy {
    /// The attempt the copy arrives as: one more than the attempt it came from.
    #[must_use]
    pub const fn attempt(&self) -> NonZeroU32 {
        NonZeroU32::MIN.saturating_add(self.retry_count)
    }
}

/// The whole decision, executed in this order: the dead-letter publish (if any; the original is
/// settled only once that publish succeeded), the copy (if any), then the settlement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Decision {
    /// Publish the delivery to the dead-letter subject as it arrived, payload and headers
    /// unchanged, before the original is settled.
    pub dead_letter: bool,
    /// The copy the runtime publishes (Core only).
    pub copy: Option<RetryCopy>,
    /// What to tell the server about the original delivery.
    pub settle: Settle,
}

impl Decision {
    const fn settle(settle: Settle) -> Self {
        Self {
            dead_letter: false,
            copy: None,
            settle,
        }
    }

    /// Whether the delivery goes to the dead-letter subject.
    #[must_use]
    pub const fn is_dead_letter(&self) -> bool {
        self.dead_letter
    }

    /// Whether the message comes back: the runtime publishes a copy, or the server is sent a
    /// `-NAK` and delivers it again.
    ///
    /// ```
    /// use ruststream::HandlerOutcome;
    /// use ruststream::settle::{Facts, decide};
    /// use std::num::NonZeroU32;
    ///
    /// let once = Facts::jetstream(NonZeroU32::MIN).with_cap(NonZeroU32::MIN);
    /// assert!(decide(&HandlerOutcome::retry(), &Facts::jetstream(NonZeroU32::MIN)).brings_back());
    /// assert!(!decide(&HandlerOutcome::retry(), &once).brings_back());
    /// ```
    #[must_use]
    pub const fn brings_back(&self) -> bool {
        self.copy.is_some()
            || matches!(
                self.settle,
                Settle::Send(AckKind::Nak | AckKind::NakAfter(_))
            )
    }
}

/// Decides what happens to a delivery whose handler answered `outcome`.
///
/// On JetStream the outcome becomes an acknowledgement the server acts on; on Core NATS the
/// server settles nothing and a retry comes back only as a [`RetryCopy`] the runtime
/// publishes. At the cap a retry brings nothing back: the delivery is dead-lettered when a
/// dead-letter subject is declared, then `+TERM`ed (JetStream) or let go (Core). `dead_letter()`
/// ends the delivery the same way on any attempt, the cap aside; without a dead-letter subject
/// that is a `+TERM` (JetStream) or nothing (Core).
///
/// ```
/// use ruststream::HandlerOutcome;
/// use ruststream::settle::{AckKind, Facts, Settle, decide};
/// use std::num::NonZeroU32;
/// use std::time::Duration;
///
/// let cap = NonZeroU32::new(3).expect("3 is not zero");
/// let busy = HandlerOutcome::retry_after(Duration::from_secs(30));
///
/// // Below the cap the server holds the message for the delay.
/// let first = Facts::jetstream(NonZeroU32::MIN).with_cap(cap).with_dead_letter();
/// let decision = decide(&busy, &first);
/// assert_eq!(decision.settle, Settle::Send(AckKind::NakAfter(Duration::from_secs(30))));
/// assert!(!decision.is_dead_letter());
///
/// // At the cap it goes to the dead-letter subject, then is terminated.
/// let third = first.redelivered().redelivered();
/// let decision = decide(&busy, &third);
/// assert!(decision.is_dead_letter());
/// assert_eq!(decision.settle, Settle::Send(AckKind::Term));
/// ```
#[must_use]
pub fn decide(outcome: &HandlerOutcome, facts: &Facts) -> Decision {
    match facts.model {
        DeliveryModel::JetStream => decide_jetstream(outcome, facts),
        DeliveryModel::Core => decide_core(outcome, facts),
    }
}

/// A payload that does not decode: never retried (it would fail the same way forever).
///
/// The delivery goes to the dead-letter subject when one is declared; a JetStream delivery is then
/// `+TERM`ed, a Core one let go.
///
/// ```
/// use ruststream::settle::{AckKind, Facts, Settle, decide_undecodable};
/// use std::num::NonZeroU32;
///
/// let decision = decide_undecodable(&Facts::jetstream(NonZeroU32::MIN).with_dead_letter());
/// assert!(decision.is_dead_letter());
/// assert_eq!(decision.settle, Settle::Send(AckKind::Term));
/// assert!(!decision.brings_back());
/// ```
#[must_use]
pub const fn decide_undecodable(facts: &Facts) -> Decision {
    end_for_good(facts)
}

/// A handling whose output can never be published (a permanent publish error: too large, a
/// subject that is not one, a value that does not encode): never retried, since running the
/// handler again would repeat its side effects and fail the same way.
///
/// As an undecodable payload: the delivery goes to the dead-letter subject when one is
/// declared; a JetStream delivery is then `+TERM`ed, a Core one let go. The cap does not
/// matter. A transient failure (the stream did not confirm now) stays a `retry()`.
///
/// ```
/// use ruststream::settle::{AckKind, Facts, Settle, decide_unpublishable};
/// use std::num::NonZeroU32;
///
/// let decision = decide_unpublishable(&Facts::jetstream(NonZeroU32::MIN));
/// assert!(!decision.is_dead_letter());
/// assert_eq!(decision.settle, Settle::Send(AckKind::Term));
/// assert!(!decision.brings_back());
/// ```
#[must_use]
pub const fn decide_unpublishable(facts: &Facts) -> Decision {
    end_for_good(facts)
}

/// The dead-letter subject when declared, then `+TERM` (JetStream) or nothing (Core): an
/// undecodable payload, an unpublishable output, and the handler's `dead_letter()`.
const fn end_for_good(facts: &Facts) -> Decision {
    let settle = match facts.model {
        DeliveryModel::JetStream => Settle::Send(AckKind::Term),
        DeliveryModel::Core => Settle::Nothing,
    };
    Decision {
        dead_letter: facts.dead_letter,
        copy: None,
        settle,
    }
}

/// Decides, before the handler runs, whether a delivery should run it at all: `Some` for a
/// JetStream delivery that arrives past the cap (see [`Facts::is_past_cap`]), which goes to the
/// dead-letter subject when one is declared and is then `+TERM`ed, without the handler running
/// again; `None` for every other delivery (it runs the handler, and [`decide`] says what
/// follows).
///
/// A Core delivery is never decided here: its attempt comes from a header any publisher can
/// write, and the runtime never copies a message past the cap.
///
/// ```
/// use ruststream::settle::{AckKind, Facts, Settle, decide_arrival};
/// use std::num::NonZeroU32;
///
/// let cap = NonZeroU32::new(2).expect("2 is not zero");
/// let second = Facts::jetstream(cap).with_cap(cap).with_dead_letter();
/// assert_eq!(decide_arrival(&second), None);
///
/// let third = decide_arrival(&second.redelivered()).expect("past the cap");
/// assert!(third.is_dead_letter());
/// assert_eq!(third.settle, Settle::Send(AckKind::Term));
/// ```
#[must_use]
pub const fn decide_arrival(facts: &Facts) -> Option<Decision> {
    match facts.model {
        DeliveryModel::JetStream if facts.is_past_cap() => Some(Decision {
            dead_letter: facts.dead_letter,
            copy: None,
            settle: Settle::Send(AckKind::Term),
        }),
        _ => None,
    }
}

/// The first hold of a JetStream original whose dead letter failed, at the cap; it doubles with
/// each delivery after that, up to [`DEAD_LETTER_HOLD_MAX`].
pub const DEAD_LETTER_HOLD_FIRST: Duration = Duration::from_secs(1);

/// The longest hold of a JetStream original whose dead letter keeps failing.
pub const DEAD_LETTER_HOLD_MAX: Duration = Duration::from_secs(3600);

/// What to tell the server about the original when its dead-letter publish failed.
///
/// Never `+TERM`: the message would then exist nowhere. A JetStream original is held back with
/// `-NAK {"delay": ..}` and delivered again after it (past the cap, so straight to another
/// dead-letter try, see [`decide_arrival`]): 1 s for the delivery at the cap, doubling with each
/// delivery after it, up to an hour. A dead letter the handler asked for (`dead_letter()`)
/// before the cap comes back to the handler after its hold, as a delivery the cap counts. A dead-letter stream that refuses for good then costs one
/// try an hour instead of one per `ack_wait`, and nothing is lost: the original waits in its
/// stream until the dead letter goes through. A Core message is lost (Core NATS is at most
/// once).
///
/// ```
/// use ruststream::settle::{AckKind, Facts, Settle, decide_dead_letter_failed};
/// use std::num::NonZeroU32;
/// use std::time::Duration;
///
/// let cap = NonZeroU32::new(2).expect("2 is not zero");
/// let at_cap = Facts::jetstream(cap).with_cap(cap).with_dead_letter();
/// let hold = |facts: &Facts| decide_dead_letter_failed(facts);
/// assert_eq!(hold(&at_cap), Settle::Send(AckKind::NakAfter(Duration::from_secs(1))));
/// assert_eq!(
///     hold(&at_cap.redelivered().redelivered()),
///     Settle::Send(AckKind::NakAfter(Duration::from_secs(4)))
/// );
/// ```
#[must_use]
pub fn decide_dead_letter_failed(facts: &Facts) -> Settle {
    match facts.model {
        DeliveryModel::JetStream => {
            // Deliveries since the cap (an undecodable payload has no cap: since the first).
            let first = facts.max_attempts.map_or(1, NonZeroU32::get);
            let tries = facts.attempt.get().saturating_sub(first);
            let factor = 1_u32 << tries.min(12);
            let hold = DEAD_LETTER_HOLD_FIRST
                .saturating_mul(factor)
                .min(DEAD_LETTER_HOLD_MAX);
            Settle::Send(AckKind::NakAfter(hold))
        }
        DeliveryModel::Core => Settle::Nothing,
    }
}

/// JetStream: the server settles, so every outcome is an acknowledgement and nothing is copied.
fn decide_jetstream(outcome: &HandlerOutcome, facts: &Facts) -> Decision {
    let nak = match *outcome {
        HandlerOutcome::Ack => return Decision::settle(Settle::Send(AckKind::Ack)),
        HandlerOutcome::Drop => return Decision::settle(Settle::Send(AckKind::Term)),
        HandlerOutcome::DeadLetter => return end_for_good(facts),
        HandlerOutcome::Retry => AckKind::Nak,
        HandlerOutcome::RetryAfter(delay) if delay.is_zero() => AckKind::Nak,
        HandlerOutcome::RetryAfter(delay) => AckKind::NakAfter(delay),
    };
    if facts.is_at_cap() {
        // The original is terminated only after the dead-letter publish succeeded.
        Decision {
            dead_letter: facts.dead_letter,
            copy: None,
            settle: Settle::Send(AckKind::Term),
        }
    } else {
        Decision::settle(Settle::Send(nak))
    }
}

/// Core: the server settles nothing, so a message comes back only as a copy the runtime publishes.
fn decide_core(outcome: &HandlerOutcome, facts: &Facts) -> Decision {
    let (after, settle) = match *outcome {
        HandlerOutcome::Ack => return Decision::settle(Settle::Unsupported(AckKind::Ack)),
        HandlerOutcome::Drop => return Decision::settle(Settle::Unsupported(AckKind::Term)),
        HandlerOutcome::DeadLetter => return end_for_good(facts),
        // At most once: without a cap a plain retry brings nothing back.
        HandlerOutcome::Retry if facts.max_attempts.is_none() => {
            return Decision::settle(Settle::Unsupported(AckKind::Nak));
        }
        HandlerOutcome::Retry => (Duration::ZERO, Settle::Unsupported(AckKind::Nak)),
        HandlerOutcome::RetryAfter(delay) => (delay, Settle::Nothing),
    };
    if facts.is_at_cap() {
        Decision {
            dead_letter: facts.dead_letter,
            copy: None,
            settle,
        }
    } else {
        let copy = RetryCopy {
            after,
            retry_count: facts.attempt.get(),
        };
        Decision {
            dead_letter: false,
            copy: if facts.copy_target { Some(copy) } else { None },
            settle,
        }
    }
}
