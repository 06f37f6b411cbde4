//! The counter both sides call once per handled message.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::alloc::allocations;
use crate::payload::{Order, SENTINEL_ID, lane_key, now_ns};

/// What a counter records besides the count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    /// The window from the first to the `target`-th message: rate and allocations.
    Window,
    /// The window, and each message's publish-to-handler latency.
    Latency,
    /// The time of the latest message (a burst that may lose some never reaches its target),
    /// and the end marker ([`SENTINEL_ID`]).
    Burst,
    /// The window, and whether each key's ([`lane_key`]) orders arrived in published order
    /// (their ids counting up): the ordering lanes' promise.
    KeyOrder,
}

/// Counts handled messages; records the measured window (first to `target`-th message) and,
/// per [`Record`], latencies or the latest message.
pub struct Counter {
    target: u64,
    record: Record,
    seen: AtomicU64,
    first: OnceLock<(Instant, u64)>,
    last: OnceLock<(Instant, u64)>,
    /// Burst: when the latest message arrived.
    latest: Mutex<Option<Instant>>,
    done: Notify,
    /// Woken every [`PROGRESS_EVERY`] messages, for the Core publisher's window.
    pub progress: Notify,
    latencies: Option<Mutex<Vec<u64>>>,
    finished: AtomicBool,
    /// Burst: the end marker arrived.
    ended: AtomicBool,
    /// Key order: each key's latest id.
    latest_by_key: Mutex<HashMap<u64, u64>>,
    /// Key order: orders that arrived after a later order of their key.
    out_of_order: AtomicU64,
}

const PROGRESS_EVERY: u64 = 256;

impl Counter {
    pub fn new(target: u64, record: Record) -> Arc<Self> {
        Arc::new(Self {
            target,
            record,
            seen: AtomicU64::new(0),
            first: OnceLock::new(),
            last: OnceLock::new(),
            latest: Mutex::new(None),
            done: Notify::new(),
            progress: Notify::new(),
            latencies: (record == Record::Latency)
                .then(|| Mutex::new(Vec::with_capacity(usize::try_from(target).unwrap_or(0)))),
            finished: AtomicBool::new(false),
            ended: AtomicBool::new(false),
            latest_by_key: Mutex::new(HashMap::new()),
            out_of_order: AtomicU64::new(0),
        })
    }

    pub fn hit(&self, order: &Order) {
        match self.record {
            Record::Window => {}
            Record::KeyOrder => {
                let mut latest = self.latest_by_key.lock().expect("not poisoned");
                let previous = latest.insert(lane_key(order.id), order.id);
                if previous.is_some_and(|previous| previous > order.id) {
                    self.out_of_order.fetch_add(1, Ordering::AcqRel);
                }
            }
            Record::Latency => {
                let latency = now_ns().saturating_sub(order.sent_ns);
                if let Some(latencies) = &self.latencies {
                    latencies.lock().expect("not poisoned").push(latency);
                }
            }
            Record::Burst => {
                if order.id == SENTINEL_ID {
                    self.ended.store(true, Ordering::Release);
                    self.done.notify_one();
                    return;
                }
                *self.latest.lock().expect("not poisoned") = Some(Instant::now());
            }
        }
        let n = self.seen.fetch_add(1, Ordering::AcqRel) + 1;
        if n == 1 {
            let _ = self.first.set((Instant::now(), allocations()));
        }
        if n == self.target {
            let _ = self.last.set((Instant::now(), allocations()));
            self.finished.store(true, Ordering::Release);
            self.done.notify_one();
        }
        if n.is_multiple_of(PROGRESS_EVERY) {
            self.progress.notify_one();
        }
    }

    pub fn seen(&self) -> u64 {
        self.seen.load(Ordering::Acquire)
    }

    pub fn is_done(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }

    /// Burst: the end marker arrived, so every message published before it was handled or lost.
    pub fn has_ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    /// All `target` messages are handled (in a burst: the end marker is).
    pub fn complete(&self) -> bool {
        match self.record {
            Record::Burst => self.has_ended(),
            Record::Window | Record::Latency | Record::KeyOrder => self.is_done(),
        }
    }

    /// Waits until [`Counter::complete`]; panics after `patience`.
    pub async fn wait(&self, what: &str, patience: Duration) {
        let deadline = tokio::time::Instant::now() + patience;
        while !self.complete() {
            if tokio::time::timeout_at(deadline, self.done.notified())
                .await
                .is_err()
                && !self.complete()
            {
                panic!(
                    "{what}: only {} of {} messages arrived within {patience:?}",
                    self.seen(),
                    self.target
                );
            }
        }
    }

    /// Key order: orders handled after a later order of their key (0 when every lane kept
    /// its order).
    pub fn out_of_order(&self) -> u64 {
        self.out_of_order.load(Ordering::Acquire)
    }

    /// Messages per second over the window, and allocations per message.
    pub fn result(&self) -> Sample {
        let (t0, a0) = *self.first.get().expect("a first message");
        let (t1, a1) = *self.last.get().expect("a last message");
        let intervals = (self.target - 1).max(1) as f64;
        let secs = t1.duration_since(t0).as_secs_f64().max(1e-9);
        Sample {
            rate: intervals / secs,
            allocs: (a1 - a0) as f64 / intervals,
        }
    }

    /// Burst: messages lost (of `target`), and the rate from the first handled message to the
    /// latest.
    pub fn burst_result(&self) -> Burst {
        let seen = self.seen();
        let rate = match self.first.get() {
            Some(&(t0, _)) if seen > 1 => {
                let t1 = self.latest.lock().expect("not poisoned").unwrap_or(t0);
                (seen - 1) as f64 / t1.duration_since(t0).as_secs_f64().max(1e-9)
            }
            _ => 0.0,
        };
        Burst {
            lost: self.target.saturating_sub(seen),
            rate,
        }
    }

    pub fn latencies(&self) -> Vec<u64> {
        let mut v = self
            .latencies
            .as_ref()
            .map(|l| l.lock().expect("not poisoned").clone())
            .unwrap_or_default();
        v.sort_unstable();
        v
    }
}

/// One round of a throughput scenario.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub rate: f64,
    pub allocs: f64,
}

/// One round of the burst scenario.
#[derive(Debug, Clone, Copy)]
pub struct Burst {
    pub lost: u64,
    pub rate: f64,
}
