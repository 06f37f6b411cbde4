//! Carries out a settlement decision on the wire, in order: the dead-letter publish, the Core
//! copy, then what the server is told about the original.
//!
//! The decision itself is `ruststream::settle::decide`, a pure function; nothing here decides.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use bytes::Bytes;
use ruststream::registration::{Handled, RegistrationInfo};
use ruststream::settle::{AckKind, Decision, DeliveryModel, Facts, Settle};
use ruststream::{AckError, Delivery};

use crate::ack_wire::{PROGRESS, ack_payload};
use crate::copies::{Copies, without_server_headers};
use crate::transport::{ReplySubject, Transport, TransportError, TransportErrorKind};

/// How many times a confirmed settlement is sent before it is given up on.
const CONFIRM_TRIES: u32 = 5;

/// The pause between two tries of a confirmed settlement.
const CONFIRM_PAUSE: std::time::Duration = std::time::Duration::from_millis(500);

/// A delivery with what its settlement needs besides the delivery itself.
#[derive(Debug)]
pub(crate) struct Incoming {
    /// The delivery, as the handler sees it.
    pub(crate) delivery: Delivery,
    /// Where a JetStream acknowledgement goes, as the transport handed it over; `None` on
    /// Core.
    pub(crate) ack_subject: Option<ReplySubject>,
}

/// Executes the decisions of one registration.
pub(crate) struct Executor {
    transport: Arc<dyn Transport>,
    copies: Arc<Copies>,
    registration: Arc<str>,
    subject: String,
    model: DeliveryModel,
    dead_letter: Option<Arc<str>>,
    copy_target: Option<Arc<str>>,
    /// Whether settlements wait for the server's confirmation.
    confirm: bool,
    /// The registration's cap, for the hold after a failed dead letter.
    max_attempts: Option<std::num::NonZeroU32>,
    /// Whether the one warning about Core settlements was logged.
    warned_unsupported: AtomicBool,
    /// Whether an undecodable payload's log line quotes the decoder's whole message (which
    /// may quote payload values) rather than its kind and position only.
    log_payload_values: bool,
    /// The registration's metrics (`ruststream::telemetry`).
    pub(crate) metrics: ruststream::telemetry::HandlerMetrics,
}

impl Executor {
    pub(crate) fn new(
        transport: Arc<dyn Transport>,
        copies: Arc<Copies>,
        info: &RegistrationInfo,
    ) -> Self {
        Self {
            transport,
            copies,
            registration: Arc::from(info.name.as_str()),
            subject: info.descriptor.subject.clone(),
            model: info.descriptor.model,
            dead_letter: info.policy.dead_letter.as_deref().map(Arc::from),
            copy_target: info.copy_target().map(Arc::from),
            max_attempts: info.policy.max_attempts,
            confirm: info.policy.confirm_acks && info.descriptor.model == DeliveryModel::JetStream,
            warned_unsupported: AtomicBool::new(false),
            log_payload_values: false,
            metrics: ruststream::telemetry::HandlerMetrics::new(&info.name),
        }
    }

    /// Also keeps the registration's totals in `totals` (an endpoint of the micro service).
    pub(crate) fn with_totals(
        mut self,
        totals: Option<Arc<ruststream::telemetry::HandlerTotals>>,
    ) -> Self {
        if let Some(totals) = totals {
            self.metrics = self.metrics.with_totals(totals);
        }
        self
    }

    /// Quotes the decoder's whole message when a payload does not decode (`true`), or only the
    /// error's kind and position (`false`, the default).
    pub(crate) fn with_payload_values_in_logs(mut self, quote: bool) -> Self {
        self.log_payload_values = quote;
        self
    }

    /// [`execute`](Self::execute) for a decision that sends nothing to the server and publishes
    /// nothing (a Core message's outcome): done here, without a future. `None` when the decision
    /// has something to send.
    pub(crate) fn execute_at_once(
        &self,
        incoming: &Incoming,
        handled: &Handled,
        decision: &Decision,
    ) -> Option<Option<AckKind>> {
        if decision.dead_letter || decision.copy.is_some() {
            return None;
        }
        let unsupported = match decision.settle {
            Settle::Send(_) => return None,
            Settle::Unsupported(kind) => Some(kind),
            Settle::Nothing => None,
        };
        self.log_handled(&incoming.delivery, handled, decision);
        if let Some(kind) = unsupported {
            self.unsupported(kind);
        }
        Some(None)
    }

    /// Logs what the handler said when it needs saying, then carries out `decision`. Returns
    /// the acknowledgement that reached the server, if one did: a failed dead letter's hold in
    /// place of the decision's, `None` when nothing was sent or the send failed.
    pub(crate) async fn execute(
        &self,
        incoming: &Incoming,
        handled: &Handled,
        decision: &Decision,
    ) -> Option<AckKind> {
        if let Some(sent) = self.execute_at_once(incoming, handled, decision) {
            return sent;
        }
        self.log_handled(&incoming.delivery, handled, decision);
        if decision.dead_letter {
            let Some(dead_letter) = &self.dead_letter else {
                tracing::error!(
                    registration = %self.registration,
                    "the decision names a dead-letter subject the registration does not declare; the delivery is not settled"
                );
                return None;
            };
            // The dead letter and the retry copy are boxed: what every delivery's handling
            // future holds (and moves) is kept to the acknowledgement's size.
            if let Err(err) =
                Box::pin(self.publish_dead_letter(dead_letter, &incoming.delivery)).await
            {
                return Box::pin(self.dead_letter_failed(incoming, dead_letter, &err)).await;
            }
            self.metrics.dead_lettered();
            tracing::info!(
                registration = %self.registration,
                subject = incoming.delivery.subject(),
                dead_letter = %dead_letter,
                attempt = incoming.delivery.attempt().get(),
                "the delivery went to the dead-letter subject"
            );
        }
        if let Some(copy) = decision.copy {
            match &self.copy_target {
                Some(target) => {
                    self.metrics.retry_copied();
                    Box::pin(self.copies.send(
                        &self.registration,
                        target,
                        &incoming.delivery,
                        copy,
                    ))
                    .await;
                }
                None => tracing::error!(
                    registration = %self.registration,
                    "a retry copy has no subject to go to; add `.retry_to(\"subject\")` at the mount site"
                ),
            }
        }
        match decision.settle {
            Settle::Send(kind) => match self.send(incoming, kind).await {
                Ok(()) => Some(kind),
                Err(err) => {
                    tracing::warn!(
                        registration = %self.registration,
                        subject = incoming.delivery.subject(),
                        ack = %kind,
                        %err,
                        "the settlement did not reach the server: it delivers the message again after ack_wait"
                    );
                    None
                }
            },
            Settle::Unsupported(kind) => {
                self.unsupported(kind);
                None
            }
            Settle::Nothing => None,
        }
    }

    /// The dead-letter publish of `incoming` failed: an error naming the registration, and the
    /// original held back as `ruststream::settle::decide_dead_letter_failed` says (never
    /// terminated without its dead letter). Returns the hold when it reached the server.
    async fn dead_letter_failed(
        &self,
        incoming: &Incoming,
        dead_letter: &Arc<str>,
        err: &TransportError,
    ) -> Option<AckKind> {
        let mut facts = Facts::jetstream(incoming.delivery.attempt());
        facts.model = self.model;
        if let Some(cap) = self.max_attempts {
            facts = facts.with_cap(cap);
        }
        let hold = ruststream::settle::decide_dead_letter_failed(&facts);
        let consequence = match hold {
            Settle::Send(AckKind::NakAfter(_)) => {
                "the original is not terminated: it is held back and comes again for another try (the hold doubles with each try, up to an hour)"
            }
            _ => "the message is lost (Core NATS is at most once)",
        };
        tracing::error!(
            registration = %self.registration,
            subject = incoming.delivery.subject(),
            dead_letter = %dead_letter,
            attempt = incoming.delivery.attempt().get(),
            settle = ?hold,
            %err,
            "the dead-letter publish failed; {consequence}"
        );
        let Settle::Send(kind) = hold else {
            return None;
        };
        match self.send(incoming, kind).await {
            Ok(()) => Some(kind),
            Err(err) => {
                tracing::warn!(
                    registration = %self.registration,
                    ack = %kind,
                    %err,
                    "holding back the original did not reach the server: it comes again after ack_wait"
                );
                None
            }
        }
    }

    /// The registration's name.
    pub(crate) fn registration(&self) -> &str {
        &self.registration
    }

    /// Resolves once an `+ACK` sent without confirmation was flushed to the socket, before
    /// after-ack hooks run (the server does not answer it); with `.confirm_acks()` the server
    /// already answered.
    pub(crate) async fn ack_flushed(&self) -> Result<(), TransportError> {
        if self.confirm {
            return Ok(());
        }
        self.transport.flush().await
    }

    /// Tells the server the delivery is still being worked on (`+WPI`: its `ack_wait` starts
    /// again). A failure is logged at debug: the next one, or the settlement, follows.
    pub(crate) async fn in_progress(&self, ack_subject: Option<&ReplySubject>) {
        let Some(ack_subject) = ack_subject else {
            return;
        };
        if let Err(err) = self
            .transport
            .acknowledge(ack_subject, Bytes::from_static(PROGRESS))
            .await
        {
            tracing::debug!(registration = %self.registration, %err, "a progress signal failed");
        }
    }

    /// Gives a delivery that was pulled but could not be handled back to the server at once
    /// (`-NAK`), so that it need not wait for `ack_wait`. The server counts it as a delivery.
    pub(crate) async fn release(&self, incoming: &Incoming) {
        if self.model != DeliveryModel::JetStream {
            return;
        }
        match self.send(incoming, AckKind::Nak).await {
            Ok(()) => tracing::debug!(
                registration = %self.registration,
                subject = incoming.delivery.subject(),
                "released a delivery pulled but not handled before the stop"
            ),
            Err(err) => tracing::debug!(
                registration = %self.registration,
                %err,
                "a delivery pulled before the stop was not released; the server delivers it again after ack_wait"
            ),
        }
    }

    /// Sends `kind` to the delivery's acknowledgement subject.
    async fn send(&self, incoming: &Incoming, kind: AckKind) -> Result<(), AckError> {
        let Some(ack_subject) = &incoming.ack_subject else {
            return Err(AckError::Failed(
                "the delivery has no acknowledgement subject".into(),
            ));
        };
        if self.confirm {
            // Boxed: a round trip per settlement anyway, kept out of the plain ack's future.
            return Box::pin(self.send_confirmed(ack_subject, kind)).await;
        }
        self.transport
            .acknowledge(ack_subject, ack_payload(kind))
            .await
            .map_err(|err| AckError::Failed(Box::new(err)))?;
        tracing::trace!(registration = %self.registration, ack = %kind, "settled");
        Ok(())
    }

    /// Sends `kind` as a request the server answers once it acted on it, again (up to
    /// [`CONFIRM_TRIES`] times, [`CONFIRM_PAUSE`] apart) until it does.
    async fn send_confirmed(
        &self,
        ack_subject: &ReplySubject,
        kind: AckKind,
    ) -> Result<(), AckError> {
        let mut tries = 0;
        loop {
            tries += 1;
            let confirmed = self
                .transport
                .settle_confirmed(ack_subject.to_shared(), ack_payload(kind))
                .await;
            match confirmed {
                Ok(()) => {
                    tracing::trace!(registration = %self.registration, ack = %kind, tries, "settled, confirmed");
                    return Ok(());
                }
                Err(err) if tries < CONFIRM_TRIES => {
                    tracing::warn!(
                        registration = %self.registration,
                        ack = %kind,
                        tries,
                        %err,
                        "the server did not confirm the settlement; sending it again"
                    );
                    tokio::time::sleep(CONFIRM_PAUSE).await;
                }
                Err(err) => return Err(AckError::Failed(Box::new(err))),
            }
        }
    }

    /// The delivery as it arrived, payload and the user's headers unchanged (the server's
    /// `Nats-*` control headers are not copied), to `subject`: stored when a stream stores the
    /// subject, else a Core publish confirmed by a flush. A stream that stores it and does not
    /// answer (no responders: its node down) is an error, not a Core publish: the original is
    /// then held back and tried again.
    async fn publish_dead_letter(
        &self,
        subject: &Arc<str>,
        delivery: &Delivery,
    ) -> Result<(), TransportError> {
        let headers = without_server_headers(delivery.headers());
        let payload = delivery.payload().clone();
        let stored = match self.transport.stream_by_subject(subject).await {
            Ok(Some(_)) => true,
            Ok(None) => false,
            Err(err) => {
                tracing::debug!(%err, "trying a stored publish for the dead letter");
                true
            }
        };
        if stored {
            match self
                .transport
                .publish_stored(Arc::clone(subject), headers.clone(), payload.clone())
                .await
            {
                Ok(_) => return Ok(()),
                Err(err)
                    if err.kind == TransportErrorKind::NoStream
                        && crate::publish::stream_is_gone(&*self.transport, subject).await => {}
                Err(err) => return Err(err),
            }
        }
        self.transport
            .publish(Arc::clone(subject), headers, payload)
            .await?;
        self.transport.flush().await
    }
}

mod decode_shape;
mod logs;

pub(crate) use self::decode_shape::decode_error_shape;

#[cfg(test)]
mod tests;
