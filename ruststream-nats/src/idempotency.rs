//! Idempotent handlers on NATS: the keys a registration handled, in a JetStream key-value
//! bucket.
//!
//! Before the handler runs, the delivery's key is claimed: created in the bucket only when
//! absent (`claimed`). A key that holds `handled` was handled within the window (the bucket's
//! `max_age`): the delivery is acknowledged without running the handler. A key that holds a
//! claim younger than the registration's claim duration is being handled by another delivery
//! (here or in another instance): the delivery is held back (`-NAK` with the claim's remaining
//! time) and comes back when the claim was recorded or expired. An older claim was left by a
//! process that died between the claim and the record: it is taken over (compare-and-set on
//! its revision), and the handler runs. Once the handler's `ack()` was settled, the claim
//! becomes `handled`; any other outcome deletes the claim, so the retry runs the handler.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ruststream::idempotency::Idempotency;
use ruststream::settle::{AckKind, Decision, Settle};

use crate::transport::{KeyValue, KvEntry, TransportError};

/// What a claim holds while its handler runs.
const CLAIMED: &[u8] = b"claimed";
/// What a key holds once its handler's `ack()` was settled.
const HANDLED: &[u8] = b"handled";
/// How long a delivery is held back when the bucket could not be read.
const UNAVAILABLE_DELAY: Duration = Duration::from_secs(1);
/// The longest a delivery is held back behind another's claim before it looks again.
const HELD_BACK_MAX: Duration = Duration::from_secs(1);
/// How many times a claim is tried when the key changes under it.
const TRIES: usize = 3;

/// A registration's bucket, and how long its claims hold.
#[derive(Clone)]
pub(crate) struct Guard {
    transport: Arc<dyn KeyValue>,
    bucket: String,
    claim: Duration,
    registration: Arc<str>,
}

/// What to do with a delivery before its handler runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Run the handler: this delivery holds the claim on `key` at `revision`.
    Claimed { key: String, revision: u64 },
    /// The key was handled within the window: acknowledge without running the handler.
    Handled,
    /// Another delivery holds the claim (or the bucket could not be read): hold this one back
    /// for the delay.
    HeldBack(Duration),
}

/// What a key's value says, for a delivery that could not create it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    /// Handled within the window.
    Handled,
    /// Claimed, for `remaining` more.
    Claimed { remaining: Duration },
    /// Claimed longer ago than a claim holds: its process died, or its handler overran.
    Expired,
}

/// The pure reading of a key's entry, with claims holding for `claim`.
pub(crate) fn seen(entry: &KvEntry, claim: Duration) -> Seen {
    if entry.value.as_ref() == HANDLED {
        Seen::Handled
    } else if entry.age < claim {
        Seen::Claimed {
            remaining: claim - entry.age,
        }
    } else {
        Seen::Expired
    }
}

/// Whether `decision` acknowledges the delivery as processed: the handler's `ack()`, its key
/// to be recorded.
pub(crate) fn records(decision: &Decision) -> bool {
    !decision.dead_letter
        && matches!(
            decision.settle,
            Settle::Send(AckKind::Ack) | Settle::Unsupported(AckKind::Ack)
        )
}

/// A key as the bucket holds it: unchanged when NATS accepts it as a key
/// (`[-/_=.a-zA-Z0-9]`, no `.` at either end, not starting with `h=`), else `h=` and its
/// bytes in hex.
pub(crate) fn store_key(key: &str) -> String {
    let plain = !key.is_empty()
        && !key.starts_with('.')
        && !key.ends_with('.')
        && !key.starts_with("h=")
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-/_=.".contains(c));
    if plain {
        return key.to_owned();
    }
    let mut hex = String::with_capacity(2 + key.len() * 2);
    hex.push_str("h=");
    for b in key.bytes() {
        hex.push_str(&format!("{b:02x}"));
    }
    hex
}

impl Guard {
    pub(crate) fn new(
        transport: Arc<dyn KeyValue>,
        idempotency: &Idempotency,
        registration: &str,
    ) -> Self {
        Self {
            transport,
            bucket: idempotency.bucket.clone(),
            claim: idempotency.claim,
            registration: Arc::from(registration),
        }
    }

    /// Claims `key` for a delivery about to be handled, or says why it must not be.
    pub(crate) async fn admit(&self, key: &str) -> Admission {
        match self.try_admit(store_key(key)).await {
            Ok(admission) => admission,
            Err(err) => {
                tracing::warn!(
                    registration = %self.registration,
                    bucket = %self.bucket,
                    key,
                    %err,
                    "cannot read the idempotency bucket: the delivery is held back and comes again"
                );
                Admission::HeldBack(UNAVAILABLE_DELAY)
            }
        }
    }

    async fn try_admit(&self, key: String) -> Result<Admission, TransportError> {
        let claimed = Bytes::from_static(CLAIMED);
        for _ in 0..TRIES {
            let created = self
                .transport
                .kv_create(self.bucket.clone(), key.clone(), claimed.clone())
                .await?;
            if let Some(revision) = created {
                return Ok(Admission::Claimed { key, revision });
            }
            let Some(entry) = self
                .transport
                .kv_get(self.bucket.clone(), key.clone())
                .await?
            else {
                // Deleted (released) or expired in between: claim again.
                continue;
            };
            match seen(&entry, self.claim) {
                Seen::Handled => return Ok(Admission::Handled),
                Seen::Claimed { remaining } => {
                    return Ok(Admission::HeldBack(remaining.min(HELD_BACK_MAX)));
                }
                Seen::Expired => {
                    let taken = self
                        .transport
                        .kv_update(
                            self.bucket.clone(),
                            key.clone(),
                            claimed.clone(),
                            entry.revision,
                        )
                        .await?;
                    if let Some(revision) = taken {
                        tracing::warn!(
                            registration = %self.registration,
                            bucket = %self.bucket,
                            key,
                            "an expired claim was taken over: the delivery that claimed it did not settle in time (its process died, or its handler ran past the claim)"
                        );
                        return Ok(Admission::Claimed { key, revision });
                    }
                }
            }
        }
        // The key kept changing: someone else is at it.
        Ok(Admission::HeldBack(UNAVAILABLE_DELAY))
    }

    /// After the delivery's settlement: records the key as handled when `decision` was an
    /// `ack()`, else releases the claim so that the retry runs the handler.
    pub(crate) async fn settled(&self, key: String, revision: u64, decision: &Decision) {
        let result = if records(decision) {
            self.record(&key, revision).await
        } else {
            self.release(&key, revision).await
        };
        if let Err(err) = result {
            tracing::warn!(
                registration = %self.registration,
                bucket = %self.bucket,
                key,
                %err,
                "cannot update the idempotency bucket: the claim expires after its duration, then the key can be handled again"
            );
        }
    }

    async fn record(&self, key: &str, revision: u64) -> Result<(), TransportError> {
        let handled = Bytes::from_static(HANDLED);
        let mut expected = Some(revision);
        for _ in 0..TRIES {
            let written = match expected {
                Some(revision) => {
                    self.transport
                        .kv_update(
                            self.bucket.clone(),
                            key.to_owned(),
                            handled.clone(),
                            revision,
                        )
                        .await?
                }
                None => {
                    self.transport
                        .kv_create(self.bucket.clone(), key.to_owned(), handled.clone())
                        .await?
                }
            };
            if written.is_some() {
                return Ok(());
            }
            tracing::warn!(
                registration = %self.registration,
                bucket = %self.bucket,
                key,
                "the claim expired while the handler ran, and was taken over: the key may have been handled twice; raise the claim above the handler's longest run"
            );
            expected = self
                .transport
                .kv_get(self.bucket.clone(), key.to_owned())
                .await?
                .map(|entry| entry.revision);
        }
        Ok(())
    }

    /// Deletes the claim, when it is still this delivery's.
    async fn release(&self, key: &str, revision: u64) -> Result<(), TransportError> {
        let current = self
            .transport
            .kv_get(self.bucket.clone(), key.to_owned())
            .await?;
        if current.is_some_and(|entry| entry.revision == revision) {
            self.transport
                .kv_delete(self.bucket.clone(), key.to_owned())
                .await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(value: &'static [u8], age: Duration) -> KvEntry {
        KvEntry {
            value: Bytes::from_static(value),
            revision: 1,
            age,
        }
    }

    #[test]
    fn a_handled_key_is_handled_whatever_its_age() {
        let claim = Duration::from_secs(30);
        assert_eq!(seen(&entry(HANDLED, Duration::ZERO), claim), Seen::Handled);
        assert_eq!(
            seen(&entry(HANDLED, Duration::from_secs(3600)), claim),
            Seen::Handled
        );
    }

    #[test]
    fn a_claim_holds_for_its_duration_then_expires() {
        let claim = Duration::from_secs(30);
        assert_eq!(
            seen(&entry(CLAIMED, Duration::from_secs(10)), claim),
            Seen::Claimed {
                remaining: Duration::from_secs(20)
            }
        );
        assert_eq!(
            seen(&entry(CLAIMED, Duration::from_secs(30)), claim),
            Seen::Expired
        );
    }

    #[test]
    fn only_an_acknowledgement_records_the_key() {
        let ack = |settle| Decision {
            dead_letter: false,
            copy: None,
            settle,
        };
        assert!(records(&ack(Settle::Send(AckKind::Ack))));
        assert!(records(&ack(Settle::Unsupported(AckKind::Ack))));
        assert!(!records(&ack(Settle::Send(AckKind::Nak))));
        assert!(!records(&ack(Settle::Send(AckKind::Term))));
        assert!(!records(&ack(Settle::Nothing)));
        assert!(!records(&Decision {
            dead_letter: true,
            copy: None,
            settle: Settle::Send(AckKind::Term)
        }));
    }

    #[test]
    fn keys_nats_refuses_are_hex_encoded_without_colliding() {
        assert_eq!(store_key("pay-42"), "pay-42");
        assert_eq!(store_key("a b"), "h=612062");
        assert_eq!(store_key("h=61"), "h=683d3631");
        assert_eq!(store_key(".x"), "h=2e78");
    }
}
