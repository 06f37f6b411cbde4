//! Ordering lanes (`.concurrency(n).by_key(..)`): deliveries with the same key are handled one
//! after the other, in the order they were taken; different keys run in parallel.
//!
//! Every delivery taken holds one of the registration's `n` slots until it is settled, whether
//! it runs or waits behind an earlier delivery of its key: the source takes a message only when
//! a slot is free, as without lanes, so the transport's flow control is unchanged (the server
//! never sends more than the slots plus the pull's lookahead) and at most `n` handlers run.
//!
//! A lane is a task: it handles its head, then the next delivery that waited behind it, until
//! none waits; then the key is forgotten. A `retry()` or `retry_after(d)` of a head runs again
//! inside its lane (after `d`), with its attempt one higher, until it is acknowledged, dropped
//! or dead-lettered at the cap: it is not given back to the server, whose redelivery would come
//! behind the later deliveries of its key (and, with every slot taken by them, could never be
//! taken). While it waits, `+WPI` every `ack_wait / 2` keeps the server from delivering it
//! again, and so does one before each new attempt; the deliveries waiting behind a head are kept
//! the same way. A delivery without a key (its payload does not decode, its header is missing)
//! is a lane of its own, logged (at most once per 10 s, with how many were not).
//!
//! On stop a head finishes (a retry is then given back to the server) and the lanes go on with
//! what waits behind their heads, as the source does with what it received (`stopping.rs`: a
//! release would spend an attempt without the handler running). Only what still waits at the
//! last moment to start a delivery before the drain deadline is released (`-NAK`), once the
//! subscription stopped (released before, a delivery would come straight back to a pull request
//! of ours still waiting on the server).

use std::collections::{HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use futures::FutureExt;
use ruststream::__private::{guard_user_code, panic_message};
use ruststream::Endpoint;
use ruststream::codec::Format;
use ruststream::registration::LaneKey;
use ruststream::settle::{AckKind, Decision, Settle};
use tokio::sync::{Notify, OwnedSemaphorePermit};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::handling::{
    Handling, admit, run_after_ack, settle_only, settle_panicked, with_progress,
};
use super::{Source, StopSignal};
use crate::executor::Incoming;
use crate::supervise::Kind;
use crate::telemetry;
use crate::transport::ReplySubject;

/// Which keys are busy and what waits behind each, in arrival order. Pure: the lanes' tasks and
/// the unit tests drive it.
#[derive(Debug)]
pub(super) struct Queues<T> {
    busy: HashMap<String, VecDeque<T>>,
}

impl<T> Default for Queues<T> {
    fn default() -> Self {
        Self {
            busy: HashMap::new(),
        }
    }
}

impl<T> Queues<T> {
    /// `item` of `key` arrives: `Some(item)` when the key was free (the caller runs it; the
    /// key is busy from now on), `None` when it waits behind the key's earlier items.
    pub(super) fn arrive(&mut self, key: &str, item: T) -> Option<T> {
        match self.busy.get_mut(key) {
            Some(waiting) => {
                waiting.push_back(item);
                None
            }
            None => {
                self.busy.insert(key.to_owned(), VecDeque::new());
                Some(item)
            }
        }
    }

    /// The head of `key` is settled: the next item of the key to run, or `None` when none
    /// waits (the key is free again).
    pub(super) fn next(&mut self, key: &str) -> Option<T> {
        let next = self.busy.get_mut(key).and_then(VecDeque::pop_front);
        if next.is_none() {
            self.busy.remove(key);
        }
        next
    }

    /// Every item waiting behind a head, taken out (on stop); the heads still run.
    pub(super) fn take_waiting(&mut self) -> Vec<T> {
        self.busy.values_mut().flat_map(std::mem::take).collect()
    }

    /// The items waiting behind a head.
    pub(super) fn waiting(&self) -> impl Iterator<Item = &T> {
        self.busy.values().flatten()
    }
}

/// Deliveries without a lane key, logged at most once per period (a publisher that never sets
/// the header would flood the log).
static NO_KEY: crate::rate::RateLimited = crate::rate::RateLimited::new();

/// A delivery taken, with the slot it holds until it is settled.
struct Taken {
    incoming: Incoming,
    _permit: OwnedSemaphorePermit,
}

/// A registration's lanes: what a lane's task needs to handle and settle its deliveries.
pub(super) struct Lanes {
    shared: Arc<Shared>,
}

struct Shared {
    endpoint: Endpoint,
    handling: Arc<Handling>,
    stop: StopSignal,
    key: LaneKey,
    codec: Format,
    queues: Mutex<Queues<Taken>>,
    /// Stopping, past the last moment to start a delivery: the lanes start nothing more.
    releasing: AtomicBool,
    /// Told whenever a lane moved on (its head settled).
    moved: Notify,
}

impl Lanes {
    /// The lanes of `source`'s registration, when it has a lane key; starts the keep-alive of
    /// the deliveries that wait (JetStream with an `ack_wait`).
    pub(super) fn of(source: &Source) -> Option<Self> {
        let policy = source.endpoint.policy();
        let key = policy.lanes.clone()?;
        let shared = Arc::new(Shared {
            endpoint: source.endpoint.clone(),
            handling: Arc::clone(&source.handling),
            stop: source.stop.clone(),
            key,
            codec: policy.codec.unwrap_or_default(),
            queues: Mutex::new(Queues::default()),
            releasing: AtomicBool::new(false),
            moved: Notify::new(),
        });
        if let Some(every) = keep_alive_every(&shared.endpoint) {
            // Watched: without it, what waits in a lane would be delivered again behind itself.
            let name = format!("the lane keep-alive of {}", shared.endpoint.name());
            let keeping = keep_waiting_alive(Arc::downgrade(&shared), every);
            drop(source.supervisor.spawn(Kind::Background, &name, keeping));
        }
        Some(Self { shared })
    }

    /// Runs `incoming` in its key's lane: at once in a new lane (a task of `tasks`) when the
    /// key is free, else after the deliveries of its key taken before it.
    pub(super) fn take(
        &self,
        incoming: Incoming,
        permit: OwnedSemaphorePermit,
        tasks: &mut JoinSet<()>,
    ) {
        let shared = &self.shared;
        let mut taken = Taken {
            incoming,
            _permit: permit,
        };
        let key = guard_user_code("the lane key (.by_key)", || {
            shared.key.of(&mut taken.incoming.delivery, shared.codec)
        });
        let key = match key {
            Ok(Ok(key)) => key,
            // Settled as a handler panic: `retry()` under the cap, the dead letter at it.
            Err(panicked) => {
                let shared = Arc::clone(shared);
                tasks.spawn(async move {
                    let Handling {
                        endpoint,
                        executor,
                        progress,
                        ..
                    } = &*shared.handling;
                    let incoming = &taken.incoming;
                    settle_panicked(endpoint, executor, progress, incoming, panicked).await;
                });
                return;
            }
            Ok(Err(why)) => {
                if let Some(not_logged) = NO_KEY.check() {
                    tracing::warn!(
                        registration = shared.endpoint.name(),
                        subject = taken.incoming.delivery.subject(),
                        why,
                        not_logged,
                        "the delivery has no lane key: it is handled in a lane of its own, in no order with the others"
                    );
                }
                let shared = Arc::clone(shared);
                tasks.spawn(async move { shared.run(taken).await });
                return;
            }
        };
        let head = shared.lock().arrive(&key, taken);
        if let Some(head) = head {
            let shared = Arc::clone(shared);
            tasks.spawn(async move {
                let mut head = head;
                loop {
                    // A panic outside the handler (its own are caught and settled) must not
                    // end the lane: the key would stay busy, and what waits behind it would
                    // hold its slots for good.
                    if let Err(panic) = AssertUnwindSafe(shared.run(head)).catch_unwind().await {
                        tracing::error!(
                            registration = shared.endpoint.name(),
                            panic = panic_message(&*panic),
                            "settling a delivery panicked"
                        );
                    }
                    // Past the last moment to start one: what waits is given back
                    // (`release_waiting`), not started.
                    if shared.releasing() {
                        return;
                    }
                    let next = shared.lock().next(&key);
                    shared.moved.notify_waiters();
                    match next {
                        Some(next) => head = next,
                        None => return,
                    }
                }
            });
        }
    }

    /// Stopping, once the subscription stopped: lets the lanes run what waits behind their
    /// heads until none waits or `last_start` passed, then gives what still waits back to the
    /// server (`-NAK`, costing each a delivery); the heads finish.
    pub(super) async fn release_waiting(&self, last_start: Instant) {
        loop {
            let moved = self.shared.moved.notified();
            tokio::pin!(moved);
            // Registered before the look, so a lane moving on in between is not missed.
            moved.as_mut().enable();
            if self.shared.lock().waiting().next().is_none() {
                break;
            }
            tokio::select! {
                () = moved => {}
                () = tokio::time::sleep_until(last_start) => break,
            }
        }
        self.shared.releasing.store(true, Ordering::Release);
        let waiting = self.shared.lock().take_waiting();
        if !waiting.is_empty() {
            tracing::warn!(
                registration = self.shared.endpoint.name(),
                released = waiting.len(),
                "deliveries waiting in their lanes could not start before the drain deadline and were released (-NAK): the server counts each as a delivery, so each comes back with one attempt fewer left; raise the drain timeout"
            );
        }
        for taken in waiting {
            self.shared.release(taken).await;
        }
    }
}

impl Shared {
    /// Gives a delivery that waited in a lane back to the server (`-NAK`), unstarted.
    async fn release(&self, taken: Taken) {
        self.handling.executor.release(&taken.incoming).await;
        if let Some(info) = taken.incoming.delivery.extension::<crate::JetStreamInfo>() {
            // Released with `-NAK`: still owed until a later delivery is settled for good.
            self.handling
                .progress
                .settled(info.stream_sequence, info.delivered, false);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queues<Taken>> {
        self.queues.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn stopping(&self) -> bool {
        self.stop.borrow().is_some()
    }

    fn releasing(&self) -> bool {
        self.releasing.load(Ordering::Acquire)
    }

    /// Handles one delivery to its end: its retries run here, in its place, until it is
    /// settled otherwise (or the app stops).
    async fn run(&self, taken: Taken) {
        let Taken {
            mut incoming,
            _permit,
        } = taken;
        let handling = &*self.handling;
        let executor = &*handling.executor;
        let claim = match &handling.idempotency {
            Some(guard) => {
                let endpoint = &handling.endpoint;
                match admit(guard, endpoint, executor, &handling.progress, &incoming).await {
                    Some(claim) => claim,
                    None => return,
                }
            }
            None => None,
        };
        // Taken for the whole delivery, retries included; a panic here loses it (the slot
        // makes another).
        let mut dispatcher = handling.dispatcher();
        loop {
            let Incoming {
                delivery,
                ack_subject,
            } = incoming;
            let span = telemetry::delivery_span(&handling.endpoint, &delivery);
            let acks = [ack_subject.clone()];
            let dispatch = dispatcher.one(delivery);
            let dispatch = with_progress(&handling.endpoint, executor, &acks, dispatch);
            let (delivery, (handled, decision)) =
                telemetry::observed(&span, &executor.metrics, 1, dispatch).await;
            incoming = Incoming {
                delivery,
                ack_subject,
            };
            if let Some(delay) = in_place(&decision)
                && span.around(self.wait(&incoming, delay)).await
            {
                incoming = next_attempt(incoming);
                // The new attempt has the whole `ack_wait`, as a redelivery would.
                executor.in_progress(incoming.ack_subject.as_ref()).await;
                continue;
            }
            let progress = &handling.progress;
            let settling = settle_only(executor, progress, &incoming, &handled, &decision);
            let sent = span.around(settling).await;
            if let (Some(guard), Some((key, revision))) = (&handling.idempotency, claim) {
                span.around(guard.settled(key, revision, &decision)).await;
            }
            if let Some(hooks) = run_after_ack(Some(&span), executor, &incoming, &decision, sent) {
                hooks.await;
            }
            handling.give_back(dispatcher);
            return;
        }
    }

    /// Waits `delay` before a retry in place, telling the server every `ack_wait / 2` that
    /// the delivery is still being worked on; `false` when the app stops first (the retry is
    /// then given back to the server).
    async fn wait(&self, incoming: &Incoming, delay: Duration) -> bool {
        if self.stopping() {
            return false;
        }
        let stopped = super::stopping(self.stop.clone());
        tokio::pin!(stopped);
        let until = Instant::now() + delay;
        let every = keep_alive_every(&self.endpoint);
        loop {
            let tick = every.map_or(until, |every| (Instant::now() + every).min(until));
            tokio::select! {
                biased;
                _ = &mut stopped => return false,
                () = tokio::time::sleep_until(tick) => {
                    if tick >= until {
                        return true;
                    }
                    self.handling
                        .executor
                        .in_progress(incoming.ack_subject.as_ref())
                        .await;
                }
            }
        }
    }
}

/// The delay of a retry that runs again in its lane: a decision that gives the delivery back
/// to the server to be delivered again (`-NAK`, `-NAK` with a delay). A dead letter, `+TERM`,
/// `+ACK` are settled as decided.
fn in_place(decision: &Decision) -> Option<Duration> {
    if decision.dead_letter {
        return None;
    }
    match decision.settle {
        Settle::Send(AckKind::Nak) => Some(Duration::ZERO),
        Settle::Send(AckKind::NakAfter(delay)) => Some(delay),
        _ => None,
    }
}

/// The same delivery, as its next attempt (the cap counts it; the server's `delivered` count
/// stays what the server said).
fn next_attempt(incoming: Incoming) -> Incoming {
    let Incoming {
        delivery,
        ack_subject,
    } = incoming;
    let attempt = delivery.attempt().saturating_add(1);
    // The attempt that asked for the retry registered its hooks for an ack that never came.
    drop(delivery.take_after_ack());
    Incoming {
        delivery: delivery.with_attempt(attempt),
        ack_subject,
    }
}

/// How often a delivery held in a lane tells the server it is still being worked on: half its
/// `ack_wait` (JetStream), at least 10 ms; `None` when there is no `ack_wait`.
fn keep_alive_every(endpoint: &Endpoint) -> Option<Duration> {
    let info = endpoint.info();
    match info.descriptor.model {
        ruststream::settle::DeliveryModel::JetStream => info
            .descriptor
            .ack_wait
            .map(|ack_wait| (ack_wait / 2).max(Duration::from_millis(10))),
        _ => None,
    }
}

/// Every `every`, tells the server that each delivery waiting behind a head is still being
/// worked on, so its `ack_wait` does not run out while its lane is busy (it would be delivered
/// again, behind itself). Ends with the lanes, or when the app stops.
async fn keep_waiting_alive(shared: Weak<Shared>, every: Duration) {
    let mut ticks = tokio::time::interval_at(Instant::now() + every, every);
    loop {
        ticks.tick().await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        // Kept alive through the drain too, while the lanes still run them.
        if shared.releasing() {
            return;
        }
        let acks: Vec<ReplySubject> = shared
            .lock()
            .waiting()
            .filter_map(|taken| taken.incoming.ack_subject.clone())
            .collect();
        for ack_subject in &acks {
            shared
                .handling
                .executor
                .in_progress(Some(ack_subject))
                .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Queues;

    #[test]
    fn one_key_runs_in_arrival_order_and_other_keys_run_at_once() {
        let mut queues = Queues::default();
        assert_eq!(queues.arrive("a", 1), Some(1), "a free key runs at once");
        assert_eq!(queues.arrive("b", 2), Some(2), "another key too");
        assert_eq!(queues.arrive("a", 3), None, "behind a's head");
        assert_eq!(queues.arrive("a", 4), None);
        assert_eq!(queues.waiting().count(), 2);
        assert_eq!(queues.next("a"), Some(3), "in arrival order");
        assert_eq!(queues.arrive("a", 5), None, "a is still busy with 3");
        assert_eq!(queues.next("a"), Some(4));
        assert_eq!(queues.next("a"), Some(5));
        assert_eq!(queues.next("a"), None, "a is free again");
        assert_eq!(queues.arrive("a", 6), Some(6), "and runs at once");
        assert_eq!(queues.next("b"), None);
        assert_eq!(queues.next("a"), None);
        assert_eq!(queues.waiting().count(), 0);
    }

    #[test]
    fn a_stop_takes_what_waits_and_the_heads_end_their_lanes() {
        let mut queues = Queues::default();
        for (key, item) in [("a", 1), ("b", 2), ("a", 3), ("b", 4), ("a", 5)] {
            let _ = queues.arrive(key, item);
        }
        let mut waiting = queues.take_waiting();
        waiting.sort_unstable();
        assert_eq!(waiting, [3, 4, 5]);
        assert_eq!(queues.next("a"), None, "nothing left behind a's head");
        assert_eq!(queues.next("b"), None);
        assert_eq!(queues.arrive("a", 6), Some(6));
    }
}
