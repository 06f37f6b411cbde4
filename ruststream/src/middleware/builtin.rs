//! The built-in middleware: backoff for `retry()`, a concurrency limit, a rate limit.

use std::hash::{BuildHasher, Hasher};
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::{Middleware, Next, NextBatch};
use crate::delivery::Delivery;
use crate::handled::Handled;
use crate::outcome::HandlerOutcome;

/// Exponential backoff with jitter for `retry()`: a handler's `retry()` on attempt `n` becomes
/// `retry_after(d)`, where `d` is `base * 2^(n-1)`, at most `max`, and with jitter (the
/// default) a random point of its upper half, `[d/2, d]`, so that messages that failed together
/// do not come back together. Other outcomes pass unchanged, as does a `retry_after` the
/// handler chose itself. The cap still counts every attempt.
///
/// ```
/// use std::num::NonZeroU32;
/// use std::time::Duration;
///
/// use ruststream::middleware::Backoff;
///
/// let backoff = Backoff::exponential(Duration::from_millis(100), Duration::from_secs(5));
/// let third = NonZeroU32::new(3).unwrap();
/// assert_eq!(backoff.ceiling(third), Duration::from_millis(400));
/// let d = backoff.delay(third);
/// assert!(d >= Duration::from_millis(200) && d <= Duration::from_millis(400));
/// assert_eq!(backoff.ceiling(NonZeroU32::new(30).unwrap()), Duration::from_secs(5));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    jitter: bool,
}

impl Backoff {
    /// `base` after the first attempt, doubling each attempt, never above `max`; with jitter.
    pub fn exponential(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max: max.max(base),
            jitter: true,
        }
    }

    /// The same without jitter: exactly `base * 2^(n-1)`, at most `max`.
    pub fn without_jitter(mut self) -> Self {
        self.jitter = false;
        self
    }

    /// The longest delay after attempt `attempt`: `base * 2^(attempt-1)`, at most `max`.
    pub fn ceiling(&self, attempt: NonZeroU32) -> Duration {
        let doublings = attempt.get() - 1;
        2u32.checked_pow(doublings)
            .and_then(|factor| self.base.checked_mul(factor))
            .map_or(self.max, |d| d.min(self.max))
    }

    /// The delay after attempt `attempt`: the ceiling, or with jitter a random point in its
    /// upper half.
    pub fn delay(&self, attempt: NonZeroU32) -> Duration {
        let ceiling = self.ceiling(attempt);
        if !self.jitter {
            return ceiling;
        }
        let half = ceiling / 2;
        let span = u64::try_from((ceiling - half).as_nanos()).unwrap_or(u64::MAX);
        let offset = if span == 0 { 0 } else { random() % (span + 1) };
        half + Duration::from_nanos(offset)
    }

    fn settle(&self, handled: Handled, attempt: NonZeroU32) -> Handled {
        match handled {
            Handled::Outcome(HandlerOutcome::Retry) => {
                Handled::Outcome(HandlerOutcome::RetryAfter(self.delay(attempt)))
            }
            other => other,
        }
    }
}

/// A random `u64` from the standard library's per-process random hash keys.
fn random() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(u64::from(std::process::id()));
    hasher.finish()
}

impl Middleware for Backoff {
    fn handle<'a>(&'a self, delivery: &'a Delivery, next: Next<'a>) -> BoxFuture<'a, Handled> {
        Box::pin(async move {
            let handled = next.run().await;
            self.settle(handled, delivery.attempt())
        })
    }

    fn handle_batch<'a>(
        &'a self,
        deliveries: &'a [&'a Delivery],
        next: NextBatch<'a>,
    ) -> BoxFuture<'a, Vec<Handled>> {
        Box::pin(async move {
            let handled = next.run().await;
            handled
                .into_iter()
                .zip(deliveries)
                .map(|(h, d)| self.settle(h, d.attempt()))
                .collect()
        })
    }

    fn name(&self) -> String {
        format!(
            "backoff {:?}..{:?}{}",
            self.base,
            self.max,
            if self.jitter { " with jitter" } else { "" }
        )
    }
}

/// At most `n` handlers at once behind this layer: one registration's (then like
/// `.concurrency(n)` with more deliveries fetched), or, at broker or app scope, every
/// registration's together (one limit shared by all of them). A delivery waits for a slot
/// before its handler runs; its `ack_wait` runs meanwhile.
#[derive(Debug, Clone)]
pub struct ConcurrencyLimit {
    slots: Arc<Semaphore>,
    limit: NonZeroUsize,
}

impl ConcurrencyLimit {
    /// At most `limit` handlers at once.
    pub fn new(limit: NonZeroUsize) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(limit.get())),
            limit,
        }
    }
}

impl Middleware for ConcurrencyLimit {
    fn handle<'a>(&'a self, _delivery: &'a Delivery, next: Next<'a>) -> BoxFuture<'a, Handled> {
        Box::pin(async move {
            // Never closed: the semaphore lives as long as the layer.
            let _slot = self.slots.acquire().await;
            next.run().await
        })
    }

    fn handle_batch<'a>(
        &'a self,
        _deliveries: &'a [&'a Delivery],
        next: NextBatch<'a>,
    ) -> BoxFuture<'a, Vec<Handled>> {
        Box::pin(async move {
            let _slot = self.slots.acquire().await;
            next.run().await
        })
    }

    fn name(&self) -> String {
        format!("concurrency limit {}", self.limit)
    }
}

/// At most one delivery per `interval` starts its handler behind this layer (`per_second(n)`:
/// `n` a second), evenly spaced, no bursts. A delivery waits for its turn before its handler
/// runs; its `ack_wait` runs meanwhile, so keep the rate above what arrives within `ack_wait`.
#[derive(Debug)]
pub struct RateLimit {
    interval: Duration,
    next: Mutex<Option<Instant>>,
}

impl RateLimit {
    /// One handler start every `interval`.
    pub fn every(interval: Duration) -> Self {
        Self {
            interval,
            next: Mutex::new(None),
        }
    }

    /// `n` handler starts a second.
    pub fn per_second(n: NonZeroU32) -> Self {
        Self::every(Duration::from_secs(1) / n.get())
    }

    /// The instant the next `count` deliveries may start: the first free slot, then the slot
    /// taken.
    fn take(&self, count: usize) -> Instant {
        let now = Instant::now();
        let mut next = self.next.lock().unwrap_or_else(PoisonError::into_inner);
        let slot = next.map_or(now, |n| n.max(now));
        let taken = u32::try_from(count.max(1)).unwrap_or(u32::MAX);
        *next = Some(slot + self.interval.saturating_mul(taken));
        slot
    }
}

impl Middleware for RateLimit {
    fn handle<'a>(&'a self, _delivery: &'a Delivery, next: Next<'a>) -> BoxFuture<'a, Handled> {
        Box::pin(async move {
            tokio::time::sleep_until(self.take(1)).await;
            next.run().await
        })
    }

    fn handle_batch<'a>(
        &'a self,
        deliveries: &'a [&'a Delivery],
        next: NextBatch<'a>,
    ) -> BoxFuture<'a, Vec<Handled>> {
        Box::pin(async move {
            tokio::time::sleep_until(self.take(deliveries.len())).await;
            next.run().await
        })
    }

    fn name(&self) -> String {
        format!("rate limit 1 per {:?}", self.interval)
    }
}
