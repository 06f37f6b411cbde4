//! One unit's handling (a message, or a batch): the idempotency claim before the handler, the
//! progress signals while it runs, and the settlement after, unless a later delivery of the
//! same message was settled first.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ruststream::__private::guard_user_code;
use ruststream::registration::Handled;
use ruststream::registration::InlineHandler;
use ruststream::settle::{Decision, DeliveryModel};
use ruststream::{Delivery, Endpoint, Publish};
use tokio::time::Instant;

use super::{Progress, Source};
use crate::JetStreamInfo;
use crate::executor::{Executor, Incoming};
use crate::publish::NatsPublisher;
use crate::telemetry;

impl Source {
    /// Runs the handler on `unit` and executes the decisions.
    pub(super) fn handle(&self, unit: Unit) -> impl Future<Output = ()> + Send + 'static {
        let endpoint = self.endpoint.clone();
        let executor = Arc::clone(&self.executor);
        let publisher = Arc::clone(&self.publisher);
        let progress = Arc::clone(&self.progress);
        let idempotency = self.idempotency.clone();
        async move {
            let unit = unit.as_slice();
            // The batch path and the idempotency guard are boxed: their futures are the
            // largest of this one's, and every message's handling future is moved whole (into
            // the source's slot, and as it starts), so what only some registrations run is kept
            // out of it. Both already cost more per message than an allocation.
            if endpoint.is_batch() {
                Box::pin(handle_batch(
                    &endpoint, &executor, &publisher, &progress, unit,
                ))
                .await;
                return;
            }
            for incoming in unit {
                let claim = match &idempotency {
                    Some(guard) => {
                        match Box::pin(admit(guard, &endpoint, &executor, &progress, incoming))
                            .await
                        {
                            Some(claim) => claim,
                            None => continue,
                        }
                    }
                    None => None,
                };
                let span = telemetry::delivery_span(&endpoint, &incoming.delivery);
                let dispatch = endpoint.dispatch(&incoming.delivery, &*publisher);
                // Without progress signals (Core, and JetStream without `progress_until`) the
                // dispatch is awaited as it is: one layer less moving it.
                let (handled, decision) = if progress_signals(&endpoint) {
                    let one = std::slice::from_ref(incoming);
                    let dispatch = with_progress(&endpoint, &executor, one, dispatch);
                    telemetry::observed(&span, &executor.metrics, 1, dispatch).await
                } else {
                    telemetry::observed(&span, &executor.metrics, 1, dispatch).await
                };
                let sent = span
                    .around(settle_only(
                        &executor, &progress, incoming, &handled, &decision,
                    ))
                    .await;
                if let (Some(guard), Some((key, revision))) = (&idempotency, claim) {
                    Box::pin(span.around(guard.settled(key, revision, &decision))).await;
                }
                span.around(run_after_ack(&executor, incoming, &decision, sent))
                    .await;
            }
        }
    }
}

/// What [`Source::handle_inline`] shares with each delivery's handling: made once per run.
pub(super) struct Inline {
    endpoint: Endpoint,
    executor: Arc<Executor>,
    progress: Arc<Progress>,
}

impl Source {
    /// The registration's handler called with its type known, when this source can hand it
    /// one delivery at a time as it is (moved): at concurrency 1 ([`Source::run`] checks it),
    /// one message per call, without the idempotency guard, progress signals or middleware.
    pub(super) fn inline(&self) -> Option<(InlineHandler, Arc<Inline>)> {
        if self.batch > 1 || self.idempotency.is_some() || progress_signals(&self.endpoint) {
            return None;
        }
        let publisher: Arc<dyn Publish> = self.publisher.clone();
        let handler = self.endpoint.inline_handler(publisher)?;
        let shared = Inline {
            endpoint: self.endpoint.clone(),
            executor: Arc::clone(&self.executor),
            progress: Arc::clone(&self.progress),
        };
        Some((handler, Arc::new(shared)))
    }

    /// [`handle`](Self::handle) for one message through `handler` (see
    /// [`inline`](Self::inline)): the same span, metrics, dispatch and settlement. The delivery
    /// is moved into the handler's call here, before the handling future is made, so that
    /// future (moved into the source's slot, and into a task on stop) does not carry it; it
    /// comes back with what the handler said, for the settlement. Resolves with `handler`, for
    /// the next.
    // Inlined into the source's loop: the future it makes is then built next to the slot it
    // goes into, not returned through a copy of its own.
    #[inline(always)]
    pub(super) fn handle_inline(
        &self,
        shared: &Arc<Inline>,
        mut handler: InlineHandler,
        incoming: Incoming,
    ) -> impl Future<Output = InlineHandler> + Send + 'static {
        let Incoming {
            delivery,
            ack_subject,
        } = incoming;
        // Runs the user's tracing layers outside the handling's panic guard: it guards itself
        // (a panic there leaves the delivery without a span, not unsettled).
        let span = telemetry::delivery_span(&self.endpoint, &delivery);
        // `start_inline`'s contract: one call started, finished below before the next.
        self.endpoint.start_inline(&mut handler, delivery);
        let shared = Arc::clone(shared);
        async move {
            let Inline {
                endpoint,
                executor,
                progress,
            } = &*shared;
            let dispatch = endpoint.finish_inline(&mut handler);
            let (delivery, (handled, decision)) =
                telemetry::observed(&span, &executor.metrics, 1, dispatch).await;
            let incoming = Incoming {
                delivery,
                ack_subject,
            };
            let settling = settle(executor, progress, &incoming, &handled, &decision);
            if span.is_quiet() {
                settling.await;
            } else {
                span.around(settling).await;
            }
            handler
        }
    }
}

/// Runs a batch handler on `unit` and executes the decisions.
async fn handle_batch(
    endpoint: &Endpoint,
    executor: &Executor,
    publisher: &NatsPublisher,
    progress: &Progress,
    unit: &[Incoming],
) {
    let deliveries: Vec<&Delivery> = unit.iter().map(|i| &i.delivery).collect();
    let dispatch = endpoint.dispatch_batch(&deliveries, publisher);
    let span = telemetry::batch_span(endpoint, &deliveries);
    let dispatch = with_progress(endpoint, executor, unit, dispatch);
    let decided = telemetry::observed(&span, &executor.metrics, unit.len(), dispatch).await;
    for (incoming, (handled, decision)) in unit.iter().zip(decided) {
        span.around(settle(executor, progress, incoming, &handled, &decision))
            .await;
    }
}

/// What one handler call takes: a message, or the messages of a batch.
pub(super) enum Unit {
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

/// Whether [`with_progress`] has anything to do for `endpoint`'s deliveries.
fn progress_signals(endpoint: &Endpoint) -> bool {
    let info = endpoint.info();
    info.policy.progress_until.is_some()
        && info.descriptor.ack_wait.is_some()
        && info.descriptor.model == DeliveryModel::JetStream
}

/// Runs `handling`; while it runs, and for at most the registration's `progress_until`, tells
/// the server every `ack_wait / 2` that each of `unit` is still being worked on (JetStream
/// only).
pub(super) async fn with_progress<T>(
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
pub(super) async fn admit(
    guard: &crate::idempotency::Guard,
    endpoint: &Endpoint,
    executor: &Executor,
    progress: &Progress,
    incoming: &Incoming,
) -> Option<Option<(String, u64)>> {
    use crate::idempotency::Admission;
    use ruststream::HandlerOutcome;
    use ruststream::settle::{AckKind, Settle};
    let key = guard_user_code("the idempotency key (.idempotent_by)", || {
        endpoint.idempotency_key(&incoming.delivery)
    });
    let key = match key {
        Ok(key) => key?,
        Err(panicked) => {
            settle_panicked(endpoint, executor, progress, incoming, panicked).await;
            return None;
        }
    };
    let key = match key {
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

/// Settles `incoming` after user code the runtime ran for it outside the handler panicked
/// (`panicked`, from the guard): decided, observed, counted and settled as a handler panic.
pub(super) async fn settle_panicked(
    endpoint: &Endpoint,
    executor: &Executor,
    progress: &Progress,
    incoming: &Incoming,
    panicked: Handled,
) {
    let span = telemetry::delivery_span(endpoint, &incoming.delivery);
    let concluded = async { endpoint.conclude(&incoming.delivery, panicked) };
    let (handled, decision) = telemetry::observed(&span, &executor.metrics, 1, concluded).await;
    span.around(settle(executor, progress, incoming, &handled, &decision))
        .await;
}

/// [`settle_only`], then the delivery's after-ack hooks ([`run_after_ack`]).
pub(super) async fn settle(
    executor: &Executor,
    progress: &Progress,
    incoming: &Incoming,
    handled: &Handled,
    decision: &Decision,
) {
    let sent = settle_only(executor, progress, incoming, handled, decision).await;
    run_after_ack(executor, incoming, decision, sent).await;
}

/// Executes `decision` for `incoming`, unless a later delivery of the same message was already
/// settled here; then tells `progress` whether the message is settled for good (a `+ACK` or
/// `+TERM` reached the server) or still owed. Returns what was sent, for [`run_after_ack`].
pub(super) async fn settle_only(
    executor: &Executor,
    progress: &Progress,
    incoming: &Incoming,
    handled: &Handled,
    decision: &Decision,
) -> Option<ruststream::settle::AckKind> {
    let info = incoming.delivery.extension::<JetStreamInfo>();
    let sent = if let Some(info) = info
        && progress.superseded(info.stream_sequence, info.delivered)
    {
        tracing::debug!(
            subject = incoming.delivery.subject(),
            stream_sequence = info.stream_sequence,
            delivered = info.delivered,
            "a later delivery of this message was already settled: this one's settlement is stale and not sent"
        );
        None
    } else {
        executor.execute(incoming, handled, decision).await
    };
    if let Some(info) = info {
        let done = sent.is_some_and(ruststream::settle::AckKind::is_final);
        progress.settled(info.stream_sequence, info.delivered, done);
    }
    sent
}

/// Runs the after-ack hooks `incoming`'s handler registered, once it is settled (`sent`); a
/// registration with an idempotency guard records the key as handled first, so a slow hook does
/// not hold the key's claim.
pub(super) async fn run_after_ack(
    executor: &Executor,
    incoming: &Incoming,
    decision: &Decision,
    sent: Option<ruststream::settle::AckKind>,
) {
    let hooks = incoming.delivery.take_after_ack();
    if !hooks.is_empty() {
        Box::pin(after_ack(executor, incoming, decision, sent, hooks)).await;
    }
}

/// Runs the after-ack hooks of `incoming` when it was acknowledged: on JetStream once its
/// `+ACK` reached the server (`sent`; confirmed with `.confirm_acks()`, else flushed), on Core
/// once its handler answered `ack()` (nothing goes to the server). Otherwise they are dropped.
async fn after_ack(
    executor: &Executor,
    incoming: &Incoming,
    decision: &Decision,
    sent: Option<ruststream::settle::AckKind>,
    hooks: ruststream::AfterAck,
) {
    use ruststream::settle::{AckKind, Settle};
    let subject = incoming.delivery.subject();
    let acked = match decision.settle {
        Settle::Unsupported(AckKind::Ack) => !decision.dead_letter && decision.copy.is_none(),
        _ => sent == Some(AckKind::Ack),
    };
    if !acked {
        tracing::debug!(
            registration = executor.registration(),
            subject,
            hooks = hooks.len(),
            "the delivery was not acknowledged: its after-ack hooks do not run"
        );
        return;
    }
    if decision.settle == Settle::Send(AckKind::Ack)
        && let Err(err) = executor.ack_flushed().await
    {
        tracing::warn!(
            registration = executor.registration(),
            subject,
            hooks = hooks.len(),
            %err,
            "the acknowledgement was not flushed to the server: its after-ack hooks do not run (the message comes again after ack_wait)"
        );
        return;
    }
    hooks.run(executor.registration(), subject).await;
}
