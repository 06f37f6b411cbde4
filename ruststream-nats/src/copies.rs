//! Core retry copies: how a Core message comes back, since the server keeps nothing to deliver
//! again.
//!
//! A copy carries the delivery's payload and headers, with [`RETRY_COUNT_HEADER`] set to the
//! attempt it came from, and goes to the registration's `retry_to` subject or the descriptor's
//! own. A `retry()` copy is published at once; a `retry_after(d)` copy waits for `d` on a timer
//! inside the process, so a stop before the timer fires loses it (the drain logs how many).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ruststream::Delivery;
use ruststream::settle::RetryCopy;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::transport::Transport;

/// The header a Core retry copy carries: the attempt it came from (`1` on the first copy). The
/// copy arrives as attempt `count + 1`.
pub const RETRY_COUNT_HEADER: &str = "x-ruststream-retry-count";

/// How long a stop waits for copies whose timer already fired to be published.
const PUBLISHING_GRACE: Duration = Duration::from_secs(2);

/// The copies of one broker: published at once, or waiting on their timers.
pub(crate) struct Copies {
    transport: Arc<dyn Transport>,
    timers: Mutex<JoinSet<()>>,
    /// Copies whose timer has not fired yet.
    waiting: Arc<AtomicUsize>,
    closed: watch::Sender<bool>,
}

impl Copies {
    pub(crate) fn new(transport: Arc<dyn Transport>) -> Self {
        Self {
            transport,
            timers: Mutex::new(JoinSet::new()),
            waiting: Arc::new(AtomicUsize::new(0)),
            closed: watch::Sender::new(false),
        }
    }

    /// Publishes a copy of `delivery` to `target` now, or after `copy.after` from a timer.
    pub(crate) async fn send(
        &self,
        registration: &Arc<str>,
        target: &Arc<str>,
        delivery: &Delivery,
        copy: RetryCopy,
    ) {
        let mut headers = delivery.headers().clone();
        headers.insert(RETRY_COUNT_HEADER, copy.retry_count.to_string());
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
        let mut closed = self.closed.subscribe();
        waiting.fetch_add(1, Ordering::SeqCst);
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

async fn until_closed(closed: &mut watch::Receiver<bool>) {
    let _ = closed.wait_for(|closed| *closed).await;
}

async fn publish_copy(
    transport: &dyn Transport,
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
