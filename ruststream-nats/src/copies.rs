//! Core retry copies: how a Core message comes back, since the server keeps nothing to deliver
//! again.
//!
//! A copy carries the delivery's payload and headers (less the server's `Nats-*` control
//! headers, see [`without_server_headers`]), with [`RETRY_COUNT_HEADER`] set to the
//! attempt it came from, and goes to the registration's `retry_to` subject or the descriptor's
//! own. A `retry()` copy is published at once; a `retry_after(d)` copy waits for `d` on a timer
//! inside the process, so a stop before the timer fires loses it (the drain logs how many).
//!
//! Copies waiting on a timer hold their payload in memory, so their number is bounded
//! ([`DEFAULT_MAX_DELAYED_COPIES`], or the broker's `.max_delayed_copies(..)`). Past it a
//! `retry_after` copy is refused: the message is lost, as any Core message the app does not
//! handle, and an error says so (at most one line per 10 s, with how many were refused). Losing
//! the newest copy rather than an older one or the process keeps the app serving.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ruststream::Delivery;
use ruststream::settle::RetryCopy;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::rate::RateLimited;
use crate::transport::CorePubSub;

/// The header a Core retry copy carries: the attempt it came from (`1` on the first copy). The
/// copy arrives as attempt `count + 1`.
pub const RETRY_COUNT_HEADER: &str = "x-ruststream-retry-count";

/// How many `retry_after` copies may wait on their timers at once, by default.
pub(crate) const DEFAULT_MAX_DELAYED_COPIES: usize = 10_000;

/// How long a stop waits for copies whose timer already fired to be published.
const PUBLISHING_GRACE: Duration = Duration::from_secs(2);

/// The copies of one broker: published at once, or waiting on their timers.
pub(crate) struct Copies {
    transport: Arc<dyn CorePubSub>,
    timers: Mutex<JoinSet<()>>,
    /// Copies whose timer has not fired yet.
    waiting: Arc<AtomicUsize>,
    /// The most copies that may wait at once.
    max_waiting: usize,
    /// Copies refused for the bound, logged at most once per period.
    refused: RateLimited,
    closed: watch::Sender<bool>,
}

impl Copies {
    pub(crate) fn new(transport: Arc<dyn CorePubSub>) -> Self {
        Self {
            transport,
            timers: Mutex::new(JoinSet::new()),
            waiting: Arc::new(AtomicUsize::new(0)),
            max_waiting: DEFAULT_MAX_DELAYED_COPIES,
            refused: RateLimited::new(),
            closed: watch::Sender::new(false),
        }
    }

    /// At most `max` copies wait on their timers at once.
    pub(crate) fn with_max_waiting(mut self, max: usize) -> Self {
        self.max_waiting = max;
        self
    }

    /// Publishes a copy of `delivery` to `target` now, or after `copy.after` from a timer.
    pub(crate) async fn send(
        &self,
        registration: &Arc<str>,
        target: &Arc<str>,
        delivery: &Delivery,
        copy: RetryCopy,
    ) {
        let mut headers = without_server_headers(delivery.headers());
        headers.insert(RETRY_COUNT_HEADER, copy.retry_count.to_string());
        // The delivery's context now: a delayed copy is sent from a task of its own.
        let headers = crate::telemetry::with_context(headers);
        let payload = delivery.payload().clone();
        if copy.after.is_zero() {
            publish_copy(
                &*self.transport,
                registration,
                target,
                headers,
                payload,
                copy,
            )
            .await;
            return;
        }
        if *self.closed.borrow() {
            tracing::warn!(
                registration = %registration,
                retry_to = %target,
                "the app is stopping: a pending retry copy was dropped"
            );
            return;
        }
        let transport = Arc::clone(&self.transport);
        let registration = Arc::clone(registration);
        let target = Arc::clone(target);
        let waiting = Arc::clone(&self.waiting);
        let max = self.max_waiting;
        if waiting
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < max).then_some(n + 1)
            })
            .is_err()
        {
            if let Some(not_logged) = self.refused.check() {
                tracing::error!(
                    registration = %registration,
                    retry_to = %target,
                    waiting = max,
                    refused_since_last_line = not_logged,
                    "a delayed retry copy was refused: as many as the broker allows already wait on their timers; the message is lost (Core NATS is at most once); raise `.max_delayed_copies(..)` on the broker, retry sooner, or use JetStream"
                );
            }
            return;
        }
        let mut closed = self.closed.subscribe();
        let mut timers = self.timers.lock().unwrap_or_else(PoisonError::into_inner);
        while timers.try_join_next().is_some() {}
        timers.spawn(async move {
            tokio::select! {
                () = tokio::time::sleep(copy.after) => {
                    waiting.fetch_sub(1, Ordering::SeqCst);
                    publish_copy(&*transport, &registration, &target, headers, payload, copy).await;
                }
                () = until_closed(&mut closed) => {}
            }
        });
    }

    /// Drops every copy still waiting for its timer and returns how many there were; copies
    /// already being published get a moment to go out.
    pub(crate) async fn shutdown(&self) -> usize {
        self.closed.send_replace(true);
        let mut timers =
            std::mem::take(&mut *self.timers.lock().unwrap_or_else(PoisonError::into_inner));
        let joined = tokio::time::timeout(PUBLISHING_GRACE, async {
            while timers.join_next().await.is_some() {}
        })
        .await;
        if joined.is_err() {
            timers.abort_all();
        }
        self.waiting.swap(0, Ordering::SeqCst)
    }
}

/// `headers` without the ones NATS reserves for the server (`Nats-*`: `Nats-Msg-Id`,
/// `Nats-Expected-*`, `Nats-Rollup`, `Nats-TTL`, ...), which tell the server what to do with the
/// original publish: on a copy or a dead letter they would make the server drop it as a
/// duplicate, refuse it, or purge a stream. Every other header is kept, in order.
pub(crate) fn without_server_headers(headers: &ruststream::Headers) -> ruststream::Headers {
    let mut kept = ruststream::Headers::new();
    for (name, value) in headers.iter() {
        let reserved = name
            .get(..5)
            .is_some_and(|prefix| prefix.eq_ignore_ascii_case("nats-"));
        if !reserved {
            kept.append(name, value);
        }
    }
    kept
}

async fn until_closed(closed: &mut watch::Receiver<bool>) {
    let _ = closed.wait_for(|closed| *closed).await;
}

async fn publish_copy(
    transport: &dyn CorePubSub,
    registration: &Arc<str>,
    target: &Arc<str>,
    headers: ruststream::Headers,
    payload: bytes::Bytes,
    copy: RetryCopy,
) {
    match transport
        .publish(Arc::clone(target), headers, payload)
        .await
    {
        Ok(()) => tracing::debug!(
            registration = %registration,
            retry_to = %target,
            retry_count = copy.retry_count,
            "published a retry copy"
        ),
        Err(err) => tracing::error!(
            registration = %registration,
            retry_to = %target,
            retry_count = copy.retry_count,
            %err,
            "the retry copy was not published: the message is lost (Core NATS is at most once)"
        ),
    }
}
