//! What a source does with the messages the transport still hands over once it was asked to
//! stop: it handles them, JetStream deliveries as much as Core messages.
//!
//! A JetStream delivery this instance received is its to handle. Given back with `-NAK`, it
//! would reach the next instance with the server's delivery count one higher although no
//! handler ran (the server counts every delivery, released or not), so under
//! `.max_attempts(1)` it would be terminated, or dead-lettered, unhandled. The pull keeps at
//! most what the handlers get through in a tenth of `ack_wait` in the client (`pull.rs`), so
//! handling it fits a drain timeout of that order. Only what cannot start before the drain
//! deadline (less [`RELEASE_MARGIN`]) is released, and that release costs the delivery count
//! (the server's, which no client can undo).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use ruststream::__private::panic_message;
use ruststream::settle::DeliveryModel;
use tokio::sync::Semaphore;
use tokio::task::{JoinError, JoinSet};
use tokio::time::Instant;

use super::handling::Unit;
use super::lanes::Lanes;
use super::{Looked, Source, StopSignal};
use crate::executor::Incoming;

/// How long before the drain deadline the source stops starting the deliveries it still holds
/// and releases them instead (`-NAK`): a release after the deadline would come too late to
/// spare them `ack_wait`. A quarter of the drain's time left, when that is shorter.
const RELEASE_MARGIN: Duration = Duration::from_secs(1);

/// The last moment a delivery held at the stop may start: [`RELEASE_MARGIN`] before the drain
/// `deadline` for JetStream; the deadline itself for Core, which has nothing to release to.
pub(super) fn last_start(model: DeliveryModel, deadline: Instant) -> Instant {
    match model {
        DeliveryModel::JetStream => {
            let left = deadline.saturating_duration_since(Instant::now());
            deadline - RELEASE_MARGIN.min(left / 4)
        }
        DeliveryModel::Core => deadline,
    }
}

impl Source {
    /// Handles what the transport hands over after the stop, starting each as a handler slot
    /// frees up, until the last moment to start one: then JetStream deliveries are released
    /// and Core messages (the only copy there is) lost, with a warning.
    pub(super) async fn leftovers(
        &mut self,
        model: DeliveryModel,
        permits: &Arc<Semaphore>,
        tasks: &mut JoinSet<()>,
        lanes: Option<&Lanes>,
        deadline: Instant,
        last_start: Instant,
    ) {
        let mut late = 0_usize;
        while let Some(first) = self.leftover(deadline).await {
            if late > 0 {
                self.give_up(model, first).await;
                late += 1;
                continue;
            }
            // Polled first, a free permit would be taken even past `last_start`.
            let permit = match Instant::now() < last_start {
                true => tokio::time::timeout_at(last_start, Arc::clone(permits).acquire_owned())
                    .await
                    .ok()
                    .and_then(Result::ok),
                false => None,
            };
            let Some(permit) = permit else {
                self.give_up(model, first).await;
                late += 1;
                continue;
            };
            match (lanes, self.batch > 1) {
                (Some(lanes), false) => lanes.take(first, permit, tasks),
                (None, false) => self.spawn(tasks, Unit::One(first), permit),
                (_, true) => {
                    let unit = self.leftover_batch(first);
                    self.spawn(tasks, unit, permit);
                }
            }
        }
        if late > 0 {
            match model {
                DeliveryModel::JetStream => tracing::warn!(
                    registration = self.endpoint.name(),
                    released = late,
                    "deliveries received before the stop could not start before the drain deadline and were released (-NAK): the server counts each as a delivery, so each comes back with one attempt fewer left; raise the drain timeout"
                ),
                DeliveryModel::Core => tracing::warn!(
                    registration = self.endpoint.name(),
                    lost = late,
                    "Core messages received before the stop were not handled: the drain timed out"
                ),
            }
        }
    }

    /// The next message the transport hands over after the stop, taken; `None` once it handed
    /// over everything, or at the drain deadline.
    async fn leftover(&mut self, deadline: Instant) -> Option<Incoming> {
        if let Some(ahead) = self.ahead.take() {
            return Some(ahead);
        }
        if let Some(Looked::Ended) = self.looked.take() {
            return None;
        }
        loop {
            match tokio::time::timeout_at(deadline, self.messages.next()).await {
                Ok(Some(Ok(raw))) => return Some(self.incoming(raw)),
                Ok(Some(Err(err))) => {
                    tracing::debug!(registration = self.endpoint.name(), %err, "while stopping");
                }
                Ok(None) | Err(_) => return None,
            }
        }
    }

    /// `first` and what else is ready now, up to the batch size: after the stop the transport
    /// hands over what it holds at once, so a batch waits for nothing.
    fn leftover_batch(&mut self, first: Incoming) -> Unit {
        let mut unit = Vec::with_capacity(self.batch);
        unit.push(first);
        while unit.len() < self.batch {
            match self.ahead.take() {
                Some(ahead) => unit.push(ahead),
                None => match self.messages.next().now_or_never() {
                    Some(Some(Ok(raw))) => unit.push(self.incoming(raw)),
                    Some(Some(Err(err))) => self.transport_error(&err),
                    Some(None) | None => break,
                },
            }
        }
        Unit::Batch(unit)
    }

    /// A message that cannot start before the drain deadline: a JetStream delivery is released
    /// (another instance gets it at once), a Core message let go.
    async fn give_up(&mut self, model: DeliveryModel, incoming: Incoming) {
        if model == DeliveryModel::JetStream {
            self.handling.executor.release(&incoming).await;
        }
    }
}

impl Source {
    /// The broker began stopping while a unit ran in place: it finishes alongside the drain,
    /// holding the one handler slot, so what the transport still hands over waits for it (and
    /// a JetStream delivery that cannot start in time is released). Returns how many handlers
    /// were abandoned at the deadline.
    pub(super) async fn stop_in_place(
        &mut self,
        in_place: Pin<&mut impl Future<Output = std::thread::Result<Option<ruststream::Delivery>>>>,
        deadline: Instant,
        permits: &Arc<Semaphore>,
        tasks: &mut JoinSet<()>,
        lanes: Option<&Lanes>,
    ) -> usize {
        let registration = self.endpoint.name().to_owned();
        let permit = Arc::clone(permits).try_acquire_owned().ok();
        let finishing = async move {
            let _permit = permit;
            match tokio::time::timeout_at(deadline, in_place).await {
                Ok(done) => {
                    if let Err(panic) = done {
                        panicked(&registration, &*panic);
                    }
                    0
                }
                Err(_) => {
                    tracing::warn!(
                        registration,
                        "the handler still ran at the drain timeout and was abandoned; its delivery is not settled (JetStream delivers it again after ack_wait)"
                    );
                    1
                }
            }
        };
        let drained = self.drain(deadline, false, permits, tasks, lanes);
        let (abandoned, drained) = tokio::join!(finishing, drained);
        abandoned + drained
    }

    /// Once the broker is stopping (its drain `deadline`): stops the subscription (unless it
    /// `ended`), handles what the transport still hands over, and waits for the handlers in
    /// flight until the deadline. Returns how many were abandoned there.
    pub(super) async fn drain(
        &mut self,
        deadline: Instant,
        ended: bool,
        permits: &Arc<Semaphore>,
        tasks: &mut JoinSet<()>,
        lanes: Option<&Lanes>,
    ) -> usize {
        let model = self.endpoint.info().descriptor.model;
        let last_start = last_start(model, deadline);
        if !ended {
            if tokio::time::timeout_at(deadline, self.unsubscribe.stop())
                .await
                .is_err()
            {
                tracing::warn!(
                    registration = self.endpoint.name(),
                    "the subscription did not stop before the drain deadline"
                );
            }
            self.leftovers(model, permits, tasks, lanes, deadline, last_start)
                .await;
        }
        if let Some(lanes) = lanes {
            lanes.release_waiting(last_start).await;
        }

        let registration = self.endpoint.name();
        let finished = tokio::time::timeout_at(deadline, async {
            while let Some(result) = tasks.join_next().await {
                joined(registration, result);
            }
        })
        .await;
        if finished.is_ok() {
            return 0;
        }
        let abandoned = tasks.len();
        tasks.abort_all();
        tracing::warn!(
            registration = self.endpoint.name(),
            abandoned,
            "handlers still ran at the drain timeout and were abandoned; their deliveries are not settled (JetStream delivers them again after ack_wait)"
        );
        abandoned
    }
}

/// Logs `panic`, from a handling run in place that panicked outside the handler (the
/// handler's own panics are caught and settled).
pub(super) fn panicked(registration: &str, panic: &(dyn std::any::Any + Send)) {
    tracing::error!(
        registration,
        panic = panic_message(panic),
        "settling a delivery panicked"
    );
}

/// Logs a handler task that panicked outside the handler (the handler's own panics are caught
/// and settled).
pub(super) fn joined(registration: &str, result: Result<(), JoinError>) {
    if let Err(err) = result
        && err.is_panic()
    {
        tracing::error!(registration, %err, "settling a delivery panicked");
    }
}

/// Whether `watch`'s value, read now, is a stop (or the broker is gone), marking its version
/// seen: a stop sent after this moves the version again. Out of the busy loop's way: it runs
/// once per change of the signal.
#[cold]
#[inline(never)]
pub(super) fn stop_sent(watch: &mut StopSignal) -> bool {
    watch.has_changed().is_err() || watch.borrow_and_update().is_some()
}

/// Resolves with the drain deadline once the broker is stopping (at once when the broker is
/// gone).
pub(super) async fn stopping(mut stop: StopSignal) -> Instant {
    match stop.wait_for(Option::is_some).await {
        Ok(deadline) => deadline.unwrap_or_else(Instant::now),
        Err(_) => Instant::now(),
    }
}
