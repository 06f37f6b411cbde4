//! What the executor says about a delivery as it carries out its decision: how it was
//! handled (a panic, an undecodable payload, a message that keeps coming back), and that Core
//! settles nothing.

use std::sync::atomic::Ordering;

use ruststream::registration::Handled;
use ruststream::settle::{AckKind, Decision};
use ruststream::{AckError, Delivery};

use super::{Executor, decode_error_shape};

/// How many deliveries of one message make the runtime say that it is looping.
const LOOPING_DELIVERIES: u64 = 100;

fn is_power_of_ten(mut n: u64) -> bool {
    while n >= 10 && n.is_multiple_of(10) {
        n /= 10;
    }
    n == 1
}

impl Executor {
    /// Core settles nothing. `ack()` is what a Core handler says when it is done: correct
    /// code, at debug. Any other kind: a warning naming the subscription once, then at debug.
    pub(super) fn unsupported(&self, kind: AckKind) {
        let err = AckError::Unsupported;
        if kind == AckKind::Ack || self.warned_unsupported.swap(true, Ordering::Relaxed) {
            tracing::debug!(
                registration = %self.registration,
                subject = %self.subject,
                outcome = %kind,
                %err,
                "Core NATS settles nothing"
            );
        } else {
            tracing::warn!(
                registration = %self.registration,
                subject = %self.subject,
                outcome = %kind,
                %err,
                "Core NATS settles nothing: the outcome is not sent to the server (logged once for this subscription, then at debug)"
            );
        }
    }

    pub(super) fn log_handled(&self, delivery: &Delivery, handled: &Handled, decision: &Decision) {
        // A message delivered over and over (a retry without a cap): said at 100, 1 000, ...
        let count = delivery
            .delivered()
            .unwrap_or_else(|| u64::from(delivery.attempt().get()));
        if count >= LOOPING_DELIVERIES && is_power_of_ten(count) {
            tracing::warn!(
                registration = %self.registration,
                subject = delivery.subject(),
                deliveries = count,
                "one message was delivered {count} times; a handler that keeps answering `retry()` without a cap is delivered again forever: add `.max_attempts(..)` at its mount site"
            );
        }
        match handled {
            Handled::Outcome(ruststream::HandlerOutcome::DeadLetter) if !decision.dead_letter => {
                tracing::error!(
                    registration = %self.registration,
                    subject = delivery.subject(),
                    attempt = delivery.attempt().get(),
                    "the handler answered dead_letter() and the registration declares no dead-letter subject: the message is dropped; add `.dead_letter(\"subject\")` at the mount site to keep it"
                );
            }
            Handled::Outcome(_) => {}
            Handled::Undecodable(error) => tracing::warn!(
                registration = %self.registration,
                subject = delivery.subject(),
                error = %if self.log_payload_values {
                    error.clone()
                } else {
                    decode_error_shape(error)
                },
                dead_letter = decision.dead_letter,
                "the payload does not decode; it is not retried"
            ),
            Handled::Panicked(panic) => tracing::error!(
                registration = %self.registration,
                subject = delivery.subject(),
                %panic,
                attempt = delivery.attempt().get(),
                "the handler panicked; treated as retry()"
            ),
            // Logged with its source chain where the handler returned it.
            Handled::Failed(_) => {}
            Handled::TimedOut(limit) => tracing::error!(
                registration = %self.registration,
                subject = delivery.subject(),
                ?limit,
                attempt = delivery.attempt().get(),
                "the handler ran past its timeout and was cancelled; treated as retry()"
            ),
            Handled::PastCap => tracing::error!(
                registration = %self.registration,
                subject = delivery.subject(),
                attempt = delivery.attempt().get(),
                dead_letter = decision.dead_letter,
                "the delivery arrived past the cap (an earlier delivery hung past ack_wait, crashed the process, or its dead letter failed): the handler does not run again; it goes to the dead-letter subject when one is declared, and is terminated"
            ),
            Handled::Unpublishable(reason) if decision.dead_letter => tracing::error!(
                registration = %self.registration,
                subject = delivery.subject(),
                %reason,
                "an output of the handling can never be published; not retried: the delivery goes to the dead-letter subject"
            ),
            Handled::Unpublishable(reason) => tracing::error!(
                registration = %self.registration,
                subject = delivery.subject(),
                %reason,
                "an output of the handling can never be published; not retried, and the registration has no dead-letter subject: the delivery is dropped"
            ),
            Handled::NoOutcome(reason) => tracing::error!(
                registration = %self.registration,
                subject = delivery.subject(),
                %reason,
                "nothing settles the delivery"
            ),
            _ => tracing::warn!(
                registration = %self.registration,
                subject = delivery.subject(),
                ?handled,
                "the delivery was handled in a way this broker does not know"
            ),
        }
    }
}
