//! One unit's handling (a message, or a batch) in a handler slot: the idempotency claim before
//! the handler, the registration's [`Dispatcher`] running it, the progress signals meanwhile,
//! and the settlement after, unless a later delivery of the same message was settled first.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ruststream::__private::guard_user_code;
use ruststream::registration::{Dispatcher, Handled};
use ruststream::settle::{Decision, DeliveryModel};
use ruststream::{Delivery, Endpoint, Publish};
use tokio::time::Instant;

use super::Progress;
use crate::JetStreamInfo;
use crate::executor::{Executor, Incoming};
use crate::publish::NatsPublisher;
use crate::telemetry;
use crate::transport::ReplySubject;

/// What every unit's handling shares, made once per registration: what runs the handler, what
/// executes its decisions, and the registration's idle [`Dispatcher`]s, one per handler slot.
pub(crate) struct Handling {
    pub(super) endpoint: Endpoint,
    pub(super) executor: Arc<Executor>,
    pub(super) progress: Arc<Progress>,
    pub(super) idempotency: Option<Arc<crate::idempotency::Guard>>,
    publisher: Arc<NatsPublisher>,
    /// Dispatchers not in a handler slot now: a slot takes one and gives it back when its unit
    /// is settled. A slot holds one only while it holds one of the source's permits, so there
    /// are never more than the registration's concurrency.
    idle: Mutex<Vec<Dispatcher>>,
}

impl Handling {
    pub(crate) fn new(
        endpoint: &Endpoint,
        executor: &Arc<Executor>,
        publisher: &Arc<NatsPublisher>,
        progress: &Arc<Progress>,
        idempotency: Option<Arc<crate::idempotency::Guard>>,
    ) -> Arc<Self> {
        Arc::new(Self {
            endpoint: endpoint.clone(),
            executor: Arc::clone(executor),
            progress: Arc::clone(progress),
            idempotency,
            publisher: Arc::clone(publisher),
            idle: Mutex::new(Vec::new()),
        })
    }

    /// A dispatcher for a handler slot: an idle one, or a new one (the first use of a slot, or
    /// one lost to a panic outside the handler).
    pub(super) fn dispatcher(&self) -> Dispatcher {
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        idle.unwrap_or_else(|| {
            let publisher: Arc<dyn Publish> = self.publisher.clone();
            self.endpoint.dispatcher(publisher)
        })
    }

    /// Gives `dispatcher` back once its slot's unit is settled.
    pub(super) fn give_back(&self, dispatcher: Dispatcher) {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(dispatcher);
    }

    /// Runs the handler on one delivery through `dispatcher`: the idempotency claim, the
    /// progress signals while it runs, the settlement, the key recorded and the after-ack hooks.
    /// Resolves with the delivery once it is settled (`None` when it was settled before the
    /// handler ran).
    pub(super) async fn one(
        &self,
        incoming: Incoming,
        dispatcher: &mut Dispatcher,
    ) -> Option<Delivery> {
        // Boxed: the guard's future is large, and only idempotent registrations run it.
        let claim = match &self.idempotency {
            Some(guard) => {
                let admitted = Box::pin(admit(
                    guard,
                    &self.endpoint,
                    &self.executor,
                    &self.progress,
                    &incoming,
                ));
                match admitted.await {
                    Some(claim) => claim,
                    None => return None,
                }
            }
            None => None,
        };
        let Incoming {
            delivery,
            ack_subject,
        } = incoming;
        // Runs the user's tracing layers outside the handler's panic guard: it guards itself
        // (a panic there leaves the delivery without a span, not unsettled).
        let span = telemetry::delivery_span(&self.endpoint, &delivery);
        let metrics = &self.executor.metrics;
        let (delivery, (handled, decision)) = if progress_signals(&self.endpoint) {
            // Boxed: its timer is kept out of the future every other delivery's handling moves.
            let acks = [ack_subject.clone()];
            let dispatch = with_progress(
                &self.endpoint,
                &self.executor,
                &acks,
                dispatcher.one(delivery),
            );
            Box::pin(telemetry::observed(&span, metrics, 1, dispatch)).await
        } else {
            telemetry::observed(&span, metrics, 1, dispatcher.one(delivery)).await
        };
        let incoming = Incoming {
            delivery,
            ack_subject,
        };
        // A decision with nothing to send (a Core message's) is carried out without a future
        // when nothing listens to the span.
        let quiet = span.is_quiet();
        let at_once = if quiet && incoming.delivery.extension::<JetStreamInfo>().is_none() {
            self.executor
                .execute_at_once(&incoming, &handled, &decision)
        } else {
            None
        };
        let sent = match at_once {
            Some(sent) => sent,
            None => {
                let settling = settle_only(
                    &self.executor,
                    &self.progress,
                    &incoming,
                    &handled,
                    &decision,
                );
                if quiet {
                    settling.await
                } else {
                    span.around(settling).await
                }
            }
        };
        if let (Some(guard), Some((key, revision))) = (&self.idempotency, claim) {
            Box::pin(span.around(guard.settled(key, revision, &decision))).await;
        }
        if let Some(hooks) = run_after_ack(Some(&span), &self.executor, &incoming, &decision, sent)
        {
            hooks.await;
        }
        Some(incoming.delivery)
    }

    /// Runs a batch handler on `unit` through `dispatcher` and executes the decisions.
    async fn batch(&self, unit: Vec<Incoming>, dispatcher: &mut Dispatcher) {
        let (deliveries, acks): (Vec<Delivery>, Vec<_>) = unit
            .into_iter()
            .map(|incoming| (incoming.delivery, incoming.ack_subject))
            .unzip();
        let span = {
            let refs: Vec<&Delivery> = deliveries.iter().collect();
            telemetry::batch_span(&self.endpoint, &refs)
        };
        let count = deliveries.len();
        let dispatch = with_progress(
            &self.endpoint,
            &self.executor,
            &acks,
            dispatcher.batch(deliveries),
        );
        let (deliveries, decided) =
            telemetry::observed(&span, &self.executor.metrics, count, dispatch).await;
        for ((delivery, ack_subject), (handled, decision)) in
            deliveries.into_iter().zip(acks).zip(decided)
        {
            let incoming = Incoming {
                delivery,
                ack_subject,
            };
            span.around(settle(
                &self.executor,
                &self.progress,
                &incoming,
                &handled,
                &decision,
            ))
            .await;
        }
    }

    /// Runs the handler on `unit` through `dispatcher` and executes the decisions; resolves with
    /// a single delivery once it is settled, for the next message to be built in.
    pub(super) async fn run(&self, unit: Unit, dispatcher: &mut Dispatcher) -> Option<Delivery> {
        match unit {
            Unit::One(incoming) => return self.one(incoming, dispatcher).await,
            // The batch path is boxed: its future is the largest, and only batch handlers run it.
            Unit::Batch(unit) if self.endpoint.is_batch() => {
                Box::pin(self.batch(unit, dispatcher)).await;
            }
            Unit::Batch(unit) => {
                for incoming in unit {
                    self.one(incoming, dispatcher).await;
                }
            }
        }
        None
    }
}

/// [`Handling::run`] as a future of its own, for a task; resolves with the dispatcher, for the
/// slot's next unit.
pub(super) fn handle(
    handling: &Arc<Handling>,
    unit: Unit,
    mut dispatcher: Dispatcher,
) -> impl Future<Output = Dispatcher> + Send + 'static {
    let handling = Arc::clone(handling);
    async move {
        handling.run(unit, &mut dispatcher).await;
        dispatcher
    }
}

/// What one handler call takes: a message, or the messages of a batch.
pub(super) enum Unit {
    One(Incoming),
    Batch(Vec<Incoming>),
}

/// Whether [`with_progress`] has anything to do for `endpoint`'s deliveries.
fn progress_signals(endpoint: &Endpoint) -> bool {
    let info = endpoint.info();
    info.policy.progress_until.is_some()
        && info.descriptor.ack_wait.is_some()
        && info.descriptor.model == DeliveryModel::JetStream
}

/// Runs `handling`; while it runs, and for at most the registration's `progress_until`, tells
/// the server every `ack_wait / 2` that each delivery of `unit` (their acknowledgement subjects)
/// is still being worked on (JetStream only).
pub(super) async fn with_progress<T>(
    endpoint: &Endpoint,
    executor: &Executor,
    unit: &[Option<ReplySubject>],
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
                    for ack_subject in unit {
                        executor.in_progress(ack_subject.as_ref()).await;
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
    if let Some(hooks) = run_after_ack(None, executor, incoming, decision, sent) {
        hooks.await;
    }
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

/// The after-ack hooks `incoming`'s handler registered, to run once it is settled (`sent`),
/// inside the delivery's `span` when given; `None`, with nothing to await, when there are none
/// (most handlers register none). A registration with an idempotency guard records the key as
/// handled first, so a slow hook does not hold the key's claim.
#[inline]
pub(super) fn run_after_ack<'a>(
    span: Option<&'a telemetry::DeliverySpan>,
    executor: &'a Executor,
    incoming: &'a Incoming,
    decision: &'a Decision,
    sent: Option<ruststream::settle::AckKind>,
) -> Option<futures::future::BoxFuture<'a, ()>> {
    let hooks = incoming.delivery.take_after_ack();
    if hooks.is_empty() {
        return None;
    }
    let run = after_ack(executor, incoming, decision, sent, hooks);
    Some(match span {
        Some(span) => Box::pin(span.around(run)),
        None => Box::pin(run),
    })
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
