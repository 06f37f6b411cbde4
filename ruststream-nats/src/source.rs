//! One source per registration: reads the wire's messages, turns each into a
//! [`Delivery`](ruststream::Delivery), runs the handler with bounded concurrency and hands the
//! decision to the [`Executor`].
//!
//! A source takes a message only once a handler slot is free (`policy.concurrency` of them), so
//! the transport's flow control sees the service's real pace. A batch handler gets up to its
//! batch size of messages that are ready at once. At concurrency 1 the handler runs in the
//! source's own task (a task and a permit per message cost as much as the rest of the delivery
//! path); above it, each unit is a task, so handlers run in parallel.
//!
//! On stop the source takes no new message, asks the transport to stop, and handles what the
//! transport still hands over: a JetStream delivery pulled but not started is released with
//! `-NAK` (delivered again at once, to whichever instance pulls); a Core message, the only copy
//! there is, is handled. Then it waits for its handlers in flight until the drain deadline.
//!
//! # When the subscription ends
//!
//! A subscription ends when its consumer is gone (deleted by an operator, an ephemeral consumer
//! the server forgot while the link was down, a memory stream lost in a restart) or the
//! connection closed for good. The source then opens it again, with a pause that doubles from
//! 250 ms up to 30 s between tries, until it opens or the app stops; a try that fails is logged
//! as an error from the second one on (the registration handles nothing meanwhile).
//!
//! A JetStream consumer opened again starts where the registration stood, never from the start
//! of the stream: at the lowest stream sequence it took and has not settled yet, or else one
//! past the highest it took ([`Progress`]); a durable that still exists is used as it is.

use std::collections::BTreeMap;
use std::future::Future;
use std::num::NonZeroU32;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use ruststream::registration::Handled;
use ruststream::settle::{Decision, DeliveryModel};
use ruststream::{Delivery, Endpoint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::{JoinError, JoinSet};
use tokio::time::Instant;
use tracing::Instrument;

use crate::JetStreamInfo;
use crate::copies::RETRY_COUNT_HEADER;
use crate::executor::{Executor, Incoming};
use crate::publish::NatsPublisher;
use crate::rate::RateLimited;
use crate::telemetry;
use crate::transport::{MessageStream, RawMessage, Subscription, TransportError, Unsubscribe};

/// How long a source waits after the transport reported an error, so a failing connection does
/// not flood the logs.
const ERROR_PAUSE: Duration = Duration::from_millis(250);

/// The first pause before a subscription that ended is opened again; it doubles up to
/// [`REOPEN_PAUSE_MAX`].
const REOPEN_PAUSE: Duration = Duration::from_millis(250);
const REOPEN_PAUSE_MAX: Duration = Duration::from_secs(30);

/// Opens a registration's subscription again after it ended; a JetStream consumer that has to
/// be created again starts at the stream sequence given, when one is.
pub(crate) type Reopen = Arc<
    dyn Fn(Option<u64>) -> BoxFuture<'static, Result<Subscription, ruststream::Error>>
        + Send
        + Sync,
>;

/// Where a JetStream registration stands in its stream: the stream sequences it took and has not
/// settled yet, and the highest it took.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    inner: Mutex<ProgressInner>,
}

#[derive(Debug, Default)]
struct ProgressInner {
    /// Stream sequences taken and not settled yet.
    unsettled: BTreeMap<u64, Pending>,
    /// One past the highest stream sequence taken.
    next: Option<u64>,
}

/// The deliveries of one stream sequence taken and not settled yet.
#[derive(Debug, Default)]
struct Pending {
    /// How many (a redelivery can be taken while an earlier delivery still runs).
    count: u32,
    /// The highest delivered count among those already settled.
    settled: u64,
}

impl Progress {
    fn lock(&self) -> std::sync::MutexGuard<'_, ProgressInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A delivery of `sequence` was taken for handling.
    pub(crate) fn taken(&self, sequence: u64) {
        let mut inner = self.lock();
        inner.unsettled.entry(sequence).or_default().count += 1;
        let next = sequence.saturating_add(1);
        inner.next = Some(inner.next.map_or(next, |at| at.max(next)));
    }

    /// Delivery `delivered` of `sequence` was settled (or given up on).
    pub(crate) fn settled(&self, sequence: u64, delivered: u64) {
        let mut inner = self.lock();
        if let Some(pending) = inner.unsettled.get_mut(&sequence) {
            pending.count = pending.count.saturating_sub(1);
            pending.settled = pending.settled.max(delivered);
            if pending.count == 0 {
                inner.unsettled.remove(&sequence);
            }
        }
    }

    /// Whether a later delivery of `sequence` than `delivered` was already settled here: this
    /// one's settlement is stale (the server has moved on; a hung handler that finished after
    /// its message was dead-lettered past the cap, say).
    pub(crate) fn superseded(&self, sequence: u64, delivered: u64) -> bool {
        self.lock()
            .unsettled
            .get(&sequence)
            .is_some_and(|pending| pending.settled > delivered)
    }

    /// Where a consumer created again starts: the lowest sequence not settled, or one past the
    /// highest taken; `None` when nothing was taken yet (the descriptor's deliver policy).
    pub(crate) fn resume(&self) -> Option<u64> {
        let inner = self.lock();
        inner.unsettled.keys().next().copied().or(inner.next)
    }
}

/// `None` while running; the drain deadline once the broker is stopping.
pub(crate) type StopSignal = watch::Receiver<Option<Instant>>;

/// A registration's messages, its handler and what carries out its decisions.
pub(crate) struct Source {
    pub(crate) endpoint: Endpoint,
    pub(crate) messages: MessageStream,
    pub(crate) unsubscribe: Box<dyn Unsubscribe>,
    pub(crate) executor: Arc<Executor>,
    pub(crate) publisher: Arc<NatsPublisher>,
    pub(crate) stop: StopSignal,
    pub(crate) reopen: Reopen,
    /// How many ready messages one handler call takes: 1, or a batch handler's batch size.
    pub(crate) batch: usize,
    /// Where the registration stands in its stream (JetStream).
    pub(crate) progress: Arc<Progress>,
    /// The bucket of the keys handled, when the registration is idempotent.
    pub(crate) idempotency: Option<Arc<crate::idempotency::Guard>>,
}

impl Source {
    /// Runs until the broker stops; returns how many handlers were still running at the drain
    /// deadline (abandoned, their deliveries unsettled).
    pub(crate) async fn run(mut self) -> usize {
        let model = self.endpoint.info().descriptor.model;
        let permits = Arc::new(Semaphore::new(self.endpoint.policy().concurrency.get()));
        let mut tasks = JoinSet::new();
        let mut ended = false;
        // Set up once for the whole run, not once per message.
        let stopped = stopping(self.stop.clone());
        tokio::pin!(stopped);
        // One handler at a time: it runs in this task, without a task or a permit per message.
        let inline = self.endpoint.policy().concurrency.get() == 1;
        let deadline = loop {
            let permit = if inline {
                None
            } else {
                while let Some(result) = tasks.try_join_next() {
                    joined(self.endpoint.name(), result);
                }
                let permit = tokio::select! {
                    biased;
                    deadline = &mut stopped => break deadline,
                    permit = Arc::clone(&permits).acquire_owned() => permit,
                };
                let Ok(permit) = permit else {
                    break (&mut stopped).await;
                };
                Some(permit)
            };
            let first = tokio::select! {
                biased;
                deadline = &mut stopped => break deadline,
                first = self.first() => first,
            };
            if let Some(first) = first {
                // Not cancelled: a message taken is always handled.
                let unit = self.gather(first).await;
                if let Some(permit) = permit {
                    self.spawn(&mut tasks, unit, permit);
                    continue;
                }
                let mut handling = Box::pin(AssertUnwindSafe(self.handle(unit)).catch_unwind());
                tokio::select! {
                    biased;
                    done = &mut handling => {
                        if let Err(panic) = done {
                            tracing::error!(
                                registration = self.endpoint.name(),
                                panic = panic_message(&*panic),
                                "settling a delivery panicked"
                            );
                        }
                    }
                    deadline = &mut stopped => {
                        // Stopping: the handler finishes alongside the drain, as a task.
                        let permit = Arc::clone(&permits).try_acquire_owned().ok();
                        tasks.spawn(async move {
                            let _permit = permit;
                            if let Err(panic) = handling.await {
                                std::panic::resume_unwind(panic);
                            }
                        });
                        break deadline;
                    }
                }
            } else {
                drop(permit);
                tracing::warn!(
                    registration = self.endpoint.name(),
                    subject = %self.endpoint.info().descriptor.subject,
                    "the subscription ended (the consumer was deleted, or the connection closed); opening it again"
                );
                if let Some(deadline) = self.reopen_until_stopped(stopped.as_mut()).await {
                    ended = true;
                    break deadline;
                }
            }
        };

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
            self.leftovers(model, &permits, &mut tasks, deadline).await;
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

    /// Opens the subscription again, with a growing pause between tries, until it opens (`None`)
    /// or the broker stops (its drain deadline).
    async fn reopen_until_stopped(
        &mut self,
        mut stopped: Pin<&mut impl Future<Output = Instant>>,
    ) -> Option<Instant> {
        let mut pause = REOPEN_PAUSE;
        let mut tries = 0_u32;
        loop {
            tokio::select! {
                biased;
                deadline = stopped.as_mut() => return Some(deadline),
                () = tokio::time::sleep(pause) => {}
            }
            let reopened = tokio::select! {
                biased;
                deadline = stopped.as_mut() => return Some(deadline),
                reopened = (self.reopen)(self.progress.resume()) => reopened,
            };
            match reopened {
                Ok((messages, unsubscribe)) => {
                    self.messages = messages;
                    self.unsubscribe = unsubscribe;
                    tracing::info!(registration = self.endpoint.name(), "subscribed again");
                    return None;
                }
                Err(err) => {
                    pause = (pause * 2).min(REOPEN_PAUSE_MAX);
                    tries += 1;
                    if tries == 1 {
                        tracing::warn!(
                            registration = self.endpoint.name(),
                            %err,
                            retry_in = ?pause,
                            "cannot subscribe again"
                        );
                    } else {
                        // Not a blip: the registration handles nothing until this works (a
                        // deleted stream, JetStream turned off, a server still down).
                        tracing::error!(
                            registration = self.endpoint.name(),
                            %err,
                            tries,
                            retry_in = ?pause,
                            "the registration is not consuming: cannot subscribe again"
                        );
                    }
                }
            }
        }
    }

    /// What the transport hands over after the stop: JetStream deliveries are released, Core
    /// messages handled.
    async fn leftovers(
        &mut self,
        model: DeliveryModel,
        permits: &Arc<Semaphore>,
        tasks: &mut JoinSet<()>,
        deadline: Instant,
    ) {
        loop {
            let next = match tokio::time::timeout_at(deadline, self.messages.next()).await {
                Ok(Some(next)) => next,
                Ok(None) | Err(_) => return,
            };
            let raw = match next {
                Ok(raw) => raw,
                Err(err) => {
                    tracing::debug!(registration = self.endpoint.name(), %err, "while stopping");
                    continue;
                }
            };
            let incoming = self.incoming(raw);
            match model {
                DeliveryModel::JetStream => self.executor.release(&incoming).await,
                DeliveryModel::Core => {
                    let permit =
                        tokio::time::timeout_at(deadline, Arc::clone(permits).acquire_owned())
                            .await;
                    match permit {
                        Ok(Ok(permit)) => self.spawn(tasks, Unit::One(incoming), permit),
                        _ => {
                            tracing::warn!(
                                registration = self.endpoint.name(),
                                "a Core message received before the stop was not handled: the drain timed out"
                            );
                            return;
                        }
                    }
                }
            }
        }
    }

    /// The next message; `None` when the stream ended. Cancel-safe: a message is taken only
    /// when this resolves.
    async fn first(&mut self) -> Option<RawMessage> {
        loop {
            match self.messages.next().await? {
                Ok(raw) => return Some(raw),
                Err(err) => {
                    self.transport_error(&err);
                    tokio::time::sleep(ERROR_PAUSE).await;
                }
            }
        }
    }

    /// `first`, and for a batch handler the messages ready with it, up to `batch`.
    async fn gather(&mut self, first: RawMessage) -> Unit {
        if self.batch <= 1 {
            return Unit::One(self.incoming(first));
        }
        let mut unit = Vec::with_capacity(self.batch);
        unit.push(self.incoming(first));
        // The rest of a pull arrives together; let it reach the client.
        tokio::task::yield_now().await;
        while unit.len() < self.batch {
            match self.messages.next().now_or_never() {
                Some(Some(Ok(raw))) => unit.push(self.incoming(raw)),
                Some(Some(Err(err))) => self.transport_error(&err),
                Some(None) | None => break,
            }
        }
        Unit::Batch(unit)
    }

    fn transport_error(&self, err: &TransportError) {
        tracing::warn!(
            registration = self.endpoint.name(),
            subject = %self.endpoint.info().descriptor.subject,
            %err,
            "the subscription reported an error"
        );
    }

    /// Runs the handler on `unit` and executes the decisions, holding `permit` throughout.
    fn spawn(&self, tasks: &mut JoinSet<()>, unit: Unit, permit: OwnedSemaphorePermit) {
        let handling = self.handle(unit);
        tasks.spawn(async move {
            let _permit = permit;
            handling.await;
        });
    }

    /// Runs the handler on `unit` and executes the decisions.
    fn handle(&self, unit: Unit) -> impl Future<Output = ()> + Send + 'static {
        let endpoint = self.endpoint.clone();
        let executor = Arc::clone(&self.executor);
        let publisher = Arc::clone(&self.publisher);
        let progress = Arc::clone(&self.progress);
        let idempotency = self.idempotency.clone();
        async move {
            let unit = unit.as_slice();
            if endpoint.is_batch() {
                let deliveries: Vec<&Delivery> = unit.iter().map(|i| &i.delivery).collect();
                let dispatch = endpoint.dispatch_batch(&deliveries, &*publisher);
                let span = telemetry::batch_span(&endpoint, &deliveries);
                let dispatch = with_progress(&endpoint, &executor, unit, dispatch);
                let decided =
                    telemetry::observed(&span, &executor.metrics, unit.len(), dispatch).await;
                for (incoming, (handled, decision)) in unit.iter().zip(decided) {
                    settle(&executor, &progress, incoming, &handled, &decision)
                        .instrument(span.clone())
                        .await;
                }
            } else {
                for incoming in unit {
                    let claim = match &idempotency {
                        Some(guard) => {
                            match admit(guard, &endpoint, &executor, &progress, incoming).await {
                                Some(claim) => claim,
                                None => continue,
                            }
                        }
                        None => None,
                    };
                    let dispatch = endpoint.dispatch(&incoming.delivery, &*publisher);
                    let span = telemetry::delivery_span(&endpoint, &incoming.delivery);
                    let one = std::slice::from_ref(incoming);
                    let dispatch = with_progress(&endpoint, &executor, one, dispatch);
                    let decided = telemetry::observed(&span, &executor.metrics, 1, async {
                        vec![dispatch.await]
                    });
                    for (handled, decision) in decided.await {
                        settle(&executor, &progress, incoming, &handled, &decision)
                            .instrument(span.clone())
                            .await;
                        if let (Some(guard), Some((key, revision))) = (&idempotency, &claim) {
                            guard
                                .settled(key.clone(), *revision, &decision)
                                .instrument(span.clone())
                                .await;
                        }
                    }
                }
            }
        }
    }

    /// A message taken for handling (counted in the registration's [`Progress`]).
    fn incoming(&self, raw: RawMessage) -> Incoming {
        let incoming = incoming_capped(
            raw,
            self.endpoint.info().descriptor.model,
            self.endpoint.name(),
            self.endpoint.policy().max_attempts,
        );
        if let Some(info) = incoming.delivery.extension::<JetStreamInfo>() {
            self.progress.taken(info.stream_sequence);
        }
        incoming
    }
}

/// What one handler call takes: a message, or the messages of a batch.
enum Unit {
    One(Incoming),
    Batch(Vec<Incoming>),
}

impl Unit {
    fn as_slice(&self) -> &[Incoming] {
        match self {
            Self::One(incoming) => std::slice::from_ref(incoming),
            Self::Batch(unit) => unit,
        }
    }
}

/// Runs `handling`; while it runs, and for at most the registration's `progress_until`, tells
/// the server every `ack_wait / 2` that each of `unit` is still being worked on (JetStream
/// only).
async fn with_progress<T>(
    endpoint: &Endpoint,
    executor: &Executor,
    unit: &[Incoming],
    handling: impl Future<Output = T>,
) -> T {
    let info = endpoint.info();
    let (Some(deadline), Some(ack_wait), DeliveryModel::JetStream) = (
        info.policy.progress_until,
        info.descriptor.ack_wait,
        info.descriptor.model,
    ) else {
        return handling.await;
    };
    let every = (ack_wait / 2).max(Duration::from_millis(10));
    let started = Instant::now();
    let until = started + deadline;
    let mut ticks = tokio::time::interval_at(started + every, every);
    tokio::pin!(handling);
    loop {
        tokio::select! {
            biased;
            done = &mut handling => return done,
            at = ticks.tick(), if Instant::now() < until => {
                if at < until {
                    for incoming in unit {
                        executor.in_progress(incoming).await;
                    }
                }
            }
        }
    }
}

/// Before an idempotent handler runs: `Some(Some((key, revision)))` when `incoming` holds the
/// claim on its key, `Some(None)` when it has no key (it runs unguarded), `None` when it was
/// settled here without running the handler (its key was handled, or is claimed).
async fn admit(
    guard: &crate::idempotency::Guard,
    endpoint: &Endpoint,
    executor: &Executor,
    progress: &Progress,
    incoming: &Incoming,
) -> Option<Option<(String, u64)>> {
    use crate::idempotency::Admission;
    use ruststream::HandlerOutcome;
    use ruststream::settle::{AckKind, Settle};
    let key = match endpoint.idempotency_key(&incoming.delivery)? {
        Ok(key) => key,
        Err(why) => {
            tracing::warn!(
                registration = endpoint.name(),
                subject = incoming.delivery.subject(),
                why,
                "the delivery has no idempotency key: its handler runs without the guard"
            );
            return Some(None);
        }
    };
    let (handled, decision) = match guard.admit(&key).await {
        Admission::Claimed { key, revision } => return Some(Some((key, revision))),
        Admission::Handled => {
            tracing::debug!(
                registration = endpoint.name(),
                key,
                "the key was already handled: acknowledged without running the handler"
            );
            let handled = Handled::Outcome(HandlerOutcome::ack());
            let decision = endpoint.decide(&incoming.delivery, &handled);
            (handled, decision)
        }
        Admission::HeldBack(delay) => {
            tracing::debug!(
                registration = endpoint.name(),
                key,
                ?delay,
                "the key is claimed by another delivery: held back"
            );
            let settle = match endpoint.info().descriptor.model {
                DeliveryModel::JetStream => Settle::Send(AckKind::NakAfter(delay)),
                DeliveryModel::Core => Settle::Nothing,
            };
            let decision = Decision {
                dead_letter: false,
                copy: None,
                settle,
            };
            (
                Handled::Outcome(HandlerOutcome::retry_after(delay)),
                decision,
            )
        }
    };
    settle(executor, progress, incoming, &handled, &decision).await;
    None
}

/// Executes `decision` for `incoming`, unless a later delivery of the same message was already
/// settled here; then `incoming` no longer holds the registration's place in its stream.
async fn settle(
    executor: &Executor,
    progress: &Progress,
    incoming: &Incoming,
    handled: &Handled,
    decision: &Decision,
) {
    let info = incoming.delivery.extension::<JetStreamInfo>();
    if let Some(info) = info
        && progress.superseded(info.stream_sequence, info.delivered)
    {
        tracing::debug!(
            subject = incoming.delivery.subject(),
            stream_sequence = info.stream_sequence,
            delivered = info.delivered,
            "a later delivery of this message was already settled: this one's settlement is stale and not sent"
        );
    } else {
        executor.execute(incoming, handled, decision).await;
    }
    if let Some(info) = info {
        progress.settled(info.stream_sequence, info.delivered);
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic with a non-string payload")
}

/// Logs a handler task that panicked outside the handler (the handler's own panics are caught
/// and settled).
fn joined(registration: &str, result: Result<(), JoinError>) {
    if let Err(err) = result
        && err.is_panic()
    {
        tracing::error!(registration, %err, "settling a delivery panicked");
    }
}

/// Resolves with the drain deadline once the broker is stopping (at once when the broker is
/// gone).
async fn stopping(mut stop: StopSignal) -> Instant {
    match stop.wait_for(Option::is_some).await {
        Ok(deadline) => deadline.unwrap_or_else(Instant::now),
        Err(_) => Instant::now(),
    }
}

/// A wire message as a delivery of `model`.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn incoming(raw: RawMessage, model: DeliveryModel, registration: &str) -> Incoming {
    incoming_capped(raw, model, registration, None)
}

/// [`incoming`] for a registration whose cap is `cap`: a Core retry-count header never puts a
/// delivery past it.
pub(crate) fn incoming_capped(
    raw: RawMessage,
    model: DeliveryModel,
    registration: &str,
    cap: Option<NonZeroU32>,
) -> Incoming {
    let RawMessage {
        subject,
        reply,
        headers,
        payload,
    } = raw;
    match model {
        DeliveryModel::JetStream => {
            let mut delivery = Delivery::new(subject, payload).with_headers(headers);
            match reply.as_deref().and_then(JetStreamInfo::parse) {
                Some(info) => {
                    let attempt = u32::try_from(info.delivered).unwrap_or(u32::MAX);
                    delivery = delivery
                        .with_delivered(Some(info.delivered))
                        .with_attempt(NonZeroU32::new(attempt).unwrap_or(NonZeroU32::MIN));
                    delivery.extensions_mut().insert(info);
                }
                None => tracing::warn!(
                    registration,
                    subject = delivery.subject(),
                    reply = reply.as_deref().unwrap_or(""),
                    "a JetStream message without a readable acknowledgement subject; handled as a first delivery"
                ),
            }
            Incoming {
                delivery,
                ack_subject: reply,
            }
        }
        // Core, and anything a later model might be: the publisher's reply subject is kept.
        _ => {
            let attempt = core_attempt(&headers, &subject, registration, cap);
            let delivery = Delivery::new(subject, payload)
                .with_headers(headers)
                .with_reply(reply)
                .with_attempt(attempt);
            Incoming {
                delivery,
                ack_subject: None,
            }
        }
    }
}

/// Malformed or out-of-range retry-count headers, logged at most once per period.
static FORGED_RETRY_COUNT: RateLimited = RateLimited::new();

/// A Core message's attempt: its retry-count header plus one, 1 without it.
///
/// The header comes from whoever published the message, so it is not trusted further than
/// this: a malformed value (negative, not a number, larger than `u32`) counts as attempt 1, and
/// a count at or past the registration's cap counts as the cap, so the message is handled once
/// before the cap applies, never refused unhandled. Both are logged, at most once per 10 s with
/// how many were not logged, so a publisher cannot flood the log.
fn core_attempt(
    headers: &ruststream::Headers,
    subject: &str,
    registration: &str,
    cap: Option<NonZeroU32>,
) -> NonZeroU32 {
    let Some(value) = headers.get(RETRY_COUNT_HEADER) else {
        return NonZeroU32::MIN;
    };
    let attempt = match value.trim().parse::<u32>() {
        Ok(count) => NonZeroU32::MIN.saturating_add(count),
        Err(err) => {
            if let Some(not_logged) = FORGED_RETRY_COUNT.check() {
                tracing::warn!(
                    registration,
                    subject,
                    header = RETRY_COUNT_HEADER,
                    value = ?value.chars().take(32).collect::<String>(),
                    %err,
                    not_logged,
                    "a malformed retry-count header; the message is handled as attempt 1"
                );
            }
            return NonZeroU32::MIN;
        }
    };
    match cap {
        Some(cap) if attempt > cap => {
            if let Some(not_logged) = FORGED_RETRY_COUNT.check() {
                tracing::warn!(
                    registration,
                    subject,
                    header = RETRY_COUNT_HEADER,
                    value,
                    cap = cap.get(),
                    not_logged,
                    "a retry-count header past the registration's cap (not a copy this app published); the message is handled once, as its last attempt"
                );
            }
            cap
        }
        _ => attempt,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use ruststream::Headers;

    fn raw(reply: Option<&str>, headers: Headers) -> RawMessage {
        RawMessage {
            subject: Arc::from("orders.created"),
            reply: reply.map(Arc::from),
            headers,
            payload: Bytes::from_static(b"{}"),
        }
    }

    #[test]
    fn a_jetstream_delivery_counts_with_the_server() {
        let incoming = incoming(
            raw(
                Some("$JS.ACK.ORDERS.worker.3.10.12.1700000000000000000.0"),
                Headers::new(),
            ),
            DeliveryModel::JetStream,
            "worker",
        );
        assert_eq!(incoming.delivery.delivered(), Some(3));
        assert_eq!(incoming.delivery.attempt().get(), 3);
        assert_eq!(incoming.delivery.reply(), None);
        assert_eq!(
            incoming
                .delivery
                .extension::<JetStreamInfo>()
                .map(|i| i.stream_sequence),
            Some(10)
        );
        assert!(incoming.ack_subject.is_some());
    }

    #[test]
    fn a_consumer_opened_again_starts_where_the_registration_stood() {
        let progress = Progress::default();
        assert_eq!(progress.resume(), None, "nothing taken: the deliver policy");
        progress.taken(5);
        progress.taken(7);
        assert_eq!(progress.resume(), Some(5), "the lowest unsettled");
        progress.settled(5, 1);
        assert_eq!(progress.resume(), Some(7));
        progress.taken(7); // a redelivery while the first still runs
        assert!(!progress.superseded(7, 1));
        progress.settled(7, 2);
        assert!(progress.superseded(7, 1), "the later delivery was settled");
        assert_eq!(progress.resume(), Some(7));
        progress.settled(7, 1);
        assert!(!progress.superseded(7, 1), "forgotten once all are settled");
        assert_eq!(progress.resume(), Some(8), "one past the highest taken");
        progress.settled(8, 1); // never taken: ignored
        assert_eq!(progress.resume(), Some(8));
    }

    #[test]
    fn a_core_delivery_counts_with_the_header() {
        let first = incoming(
            raw(Some("_INBOX.x"), Headers::new()),
            DeliveryModel::Core,
            "r",
        );
        assert_eq!(first.delivery.attempt().get(), 1);
        assert_eq!(first.delivery.delivered(), None);
        assert_eq!(first.delivery.reply(), Some("_INBOX.x"));

        let copy: Headers = [(RETRY_COUNT_HEADER, "2")].into_iter().collect();
        let third = incoming(raw(None, copy), DeliveryModel::Core, "r");
        assert_eq!(third.delivery.attempt().get(), 3);

        let bad: Headers = [(RETRY_COUNT_HEADER, "two")].into_iter().collect();
        let malformed = incoming(raw(None, bad), DeliveryModel::Core, "r");
        assert_eq!(malformed.delivery.attempt().get(), 1);
    }

    #[test]
    fn a_forged_retry_count_never_goes_past_the_cap() {
        let cap = NonZeroU32::new(3);
        let attempt = |value: &str| {
            let headers: Headers = [(RETRY_COUNT_HEADER, value)].into_iter().collect();
            incoming_capped(raw(None, headers), DeliveryModel::Core, "r", cap)
                .delivery
                .attempt()
                .get()
        };
        assert_eq!(attempt("1"), 2);
        assert_eq!(attempt("2"), 3);
        // At or past the cap: handled once, as the last attempt.
        assert_eq!(attempt("3"), 3);
        assert_eq!(attempt("4294967295"), 3);
        // Malformed: a first attempt.
        for forged in ["-1", "99999999999999999999", "NaN", "", " 1 2", "0x10"] {
            assert_eq!(attempt(forged), 1, "{forged:?}");
        }
        // Without a cap, the count stands (saturating).
        let headers: Headers = [(RETRY_COUNT_HEADER, "4294967295")].into_iter().collect();
        let uncapped = incoming(raw(None, headers), DeliveryModel::Core, "r");
        assert_eq!(uncapped.delivery.attempt().get(), u32::MAX);
    }
}
