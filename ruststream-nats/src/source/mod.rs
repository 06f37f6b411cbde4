//! One source per registration: reads the wire's messages, turns each into a
//! [`Delivery`](ruststream::Delivery), runs the handler with bounded concurrency and hands the
//! decision to the [`Executor`].
//!
//! A source takes a message only once a handler slot is free (`policy.concurrency` of them), so
//! the transport's flow control sees the service's real pace. A batch handler gets up to its
//! batch size of messages that are ready at once. Each handler slot runs its units through a
//! [`Dispatcher`](ruststream::registration::Dispatcher) of its own, made once. At concurrency 1
//! the one slot is the source's own task; above it, each unit is a task, so handlers run in
//! parallel.
//!
//! On stop the source takes no new message, asks the transport to stop, and handles what the
//! transport still hands over, JetStream deliveries and Core messages alike (`stopping.rs`: a
//! JetStream delivery released instead would lose an attempt without its handler running).
//! Then it waits for its handlers in flight until the drain deadline.
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
//! of the stream: at the lowest stream sequence it owes (taken and not settled with `+ACK` or
//! `+TERM`: in flight, or released or held back with `-NAK` to come again), or else one past the
//! highest it took ([`Progress`]); a stream created again is read from where the descriptor
//! says. A durable that still exists is used as it is.
//!
//! `incoming.rs` turns a wire message into a delivery; `handling.rs` handles one unit (the
//! idempotency claim, progress signals, the settlement); `progress.rs` keeps where a JetStream
//! registration stands; `lanes.rs` runs the deliveries of one key in order (`.by_key(..)`);
//! `stopping.rs` handles what the transport hands over after the stop.

mod handling;
mod incoming;
mod lanes;
mod linger;
mod progress;
mod stopping;

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use ruststream::Endpoint;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

pub(crate) use self::handling::Handling;
use self::handling::{Unit, handle};
#[cfg(test)]
pub(crate) use self::incoming::incoming_capped;
use self::incoming::incoming_into;
pub(crate) use self::progress::{Progress, Resume};
use self::stopping::{joined, panicked, stop_sent, stopping};
use crate::JetStreamInfo;
use crate::executor::Incoming;
use crate::publish::AwaitedRequest;
use crate::transport::{MessageStream, RawMessage, Subscription, TransportError, Unsubscribe};

/// How long a source waits after the transport reported an error, so a failing connection does
/// not flood the logs.
const ERROR_PAUSE: Duration = Duration::from_millis(250);

/// The first pause before a subscription that ended is opened again; it doubles up to
/// [`REOPEN_PAUSE_MAX`].
const REOPEN_PAUSE: Duration = Duration::from_millis(250);
const REOPEN_PAUSE_MAX: Duration = Duration::from_secs(30);

/// Opens a registration's subscription again after it ended; a JetStream consumer that has to
/// be created again starts where the registration's [`Progress`] says.
pub(crate) type Reopen =
    Arc<dyn Fn() -> BoxFuture<'static, Result<Subscription, ruststream::Error>> + Send + Sync>;

/// What a look at the messages ([`Source::ready_now`]) found instead of a message: `first`
/// hands it over next, as if it had read it.
pub(crate) enum Looked {
    /// The subscription reported an error.
    Failed(TransportError),
    /// The subscription ended.
    Ended,
}

/// `None` while running; the drain deadline once the broker is stopping.
pub(crate) type StopSignal = watch::Receiver<Option<Instant>>;

/// A registration's messages, its handler and what carries out its decisions.
pub(crate) struct Source {
    pub(crate) endpoint: Endpoint,
    pub(crate) messages: MessageStream,
    pub(crate) unsubscribe: Box<dyn Unsubscribe>,
    pub(crate) stop: StopSignal,
    pub(crate) reopen: Reopen,
    /// How many ready messages one handler call takes: 1, or a batch handler's batch size.
    pub(crate) batch: usize,
    /// How long a batch may wait to fill once its first message came (`max_wait`).
    pub(crate) linger: Option<Duration>,
    /// A message found ready behind a Core request as it was taken ([`Source::behind`]):
    /// taken next, before anything else is read.
    pub(crate) ahead: Option<Incoming>,
    /// The last delivery handled in place, settled: the next message is built in its allocation.
    pub(crate) spent: Option<ruststream::Delivery>,
    /// What a look ([`Source::ready_now`]) found instead of a message, handed over next.
    pub(crate) looked: Option<Looked>,
    /// Told whether the registration consumes (`/readyz`).
    pub(crate) supervisor: crate::supervise::Supervisor,
    /// What runs each unit in a handler slot, shared by the slots.
    pub(crate) handling: Arc<Handling>,
}

impl Source {
    /// Runs until the broker stops; returns how many handlers were still running at the drain
    /// deadline (abandoned, their deliveries unsettled).
    pub(crate) async fn run(mut self) -> usize {
        crate::telemetry::warm_clock();
        let permits = Arc::new(Semaphore::new(self.endpoint.policy().concurrency.get()));
        let mut tasks = JoinSet::new();
        let mut ended = false;
        // Set up once for the whole run, not once per message.
        let stopped = stopping(self.stop.clone());
        tokio::pin!(stopped);
        // `first`'s own receiver: its versions are marked seen by `first` alone (see there),
        // and it starts marked changed, so a stop sent before this run is looked at too.
        let mut watch = self.stop.clone();
        watch.mark_changed();
        // One handler at a time: it runs in place in this task, without a task, a permit or an
        // allocation per message, through the slot's own dispatcher.
        let inline = self.endpoint.policy().concurrency.get() == 1;
        let handling = Arc::clone(&self.handling);
        let mut own = inline.then(|| handling.dispatcher());
        // `.by_key(..)`: deliveries of one key in order (`lanes.rs`).
        let lanes = lanes::Lanes::of(&self);
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
            let first = match self.first(&mut watch, stopped.as_mut()).await {
                Ok(first) => first,
                Err(deadline) => break deadline,
            };
            let Some(first) = first else {
                drop(permit);
                self.supervisor.consuming(self.endpoint.name(), false);
                tracing::warn!(
                    registration = self.endpoint.name(),
                    subject = %self.endpoint.info().descriptor.subject,
                    "the subscription ended (the consumer was deleted, or the connection closed); opening it again"
                );
                if let Some(deadline) = self.reopen_until_stopped(stopped.as_mut()).await {
                    ended = true;
                    break deadline;
                }
                continue;
            };
            // Not cancelled: a message taken is always handled. One message is taken as it
            // is, not moved through `gather`'s future.
            let unit = if self.batch <= 1 {
                Unit::One(first)
            } else {
                self.gather(first).await
            };
            if let Some(permit) = permit {
                match (&lanes, unit) {
                    (Some(lanes), Unit::One(incoming)) => {
                        lanes.take(incoming, permit, &mut tasks);
                    }
                    (_, unit) => self.spawn(&mut tasks, unit, permit),
                }
                continue;
            }
            // Then whatever the client already holds, handled the same way without going
            // back through `first` (a look: `ready_now`).
            let mut unit = unit;
            loop {
                let done = {
                    let dispatcher = own.get_or_insert_with(|| handling.dispatcher());
                    let run = AssertUnwindSafe(handling.run(unit, dispatcher)).catch_unwind();
                    let mut in_place = std::pin::pin!(run);
                    let done = std::future::poll_fn(|cx| match in_place.as_mut().poll(cx) {
                        Poll::Ready(done) => Poll::Ready(Ok(done)),
                        Poll::Pending => stopped.as_mut().poll(cx).map(Err),
                    })
                    .await;
                    match done {
                        Ok(done) => done,
                        Err(deadline) => {
                            let lanes = lanes.as_ref();
                            return self
                                .stop_in_place(in_place, deadline, &permits, &mut tasks, lanes)
                                .await;
                        }
                    }
                };
                match done {
                    Ok(spent) => self.spent = spent,
                    Err(panic) => {
                        panicked(self.endpoint.name(), &*panic);
                        // A panic outside the handler may have left the dispatcher mid-call: the
                        // next unit makes one.
                        own = None;
                    }
                }
                match self.ready_now(&watch) {
                    Some(next) => unit = Unit::One(next),
                    None => break,
                }
            }
        };
        self.drain(deadline, ended, &permits, &mut tasks, lanes.as_ref())
            .await
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
                reopened = (self.reopen)() => reopened,
            };
            match reopened {
                Ok((messages, unsubscribe)) => {
                    self.messages = messages;
                    self.unsubscribe = unsubscribe;
                    self.supervisor.consuming(self.endpoint.name(), true);
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

    /// The next message, taken ([`incoming`](Self::incoming)) as soon as the transport hands
    /// it over (`None` when the stream ended), or the drain deadline once the broker is
    /// stopping: the stop is looked at first, as before each message.
    ///
    /// Taken inside the poll: a `RawMessage` is large and would be copied through each wrapper
    /// on its way out (the poll, this `Result`, the loop's `match`); an [`Incoming`] (its
    /// delivery boxed) moves in registers.
    ///
    /// The stop signal is waited on only while no message is ready; with one ready, a look at
    /// `watch`'s version (`has_changed`: an atomic load) tells whether the signal moved, so a
    /// busy source does not poll the signal's future for every message. At concurrency 1 with a
    /// handler that finishes at once, this look is the only place a busy source notices the
    /// stop (`run` polls the handling first). So `watch` is `run`'s own receiver, used
    /// nowhere else: a new version is marked seen here only after its value was read (a stop
    /// is then acted on at once), and `run` marks it changed before the first look.
    async fn first(
        &mut self,
        watch: &mut StopSignal,
        mut stopped: Pin<&mut impl Future<Output = Instant>>,
    ) -> Result<Option<Incoming>, Instant> {
        loop {
            let next = std::future::poll_fn(|cx| {
                // Taken already: handed over before the stop is looked at, so it is not lost.
                if let Some(ahead) = self.ahead.take() {
                    return Poll::Ready(Ok(Ok(Some(self.behind(ahead)))));
                }
                match self.looked.take() {
                    Some(Looked::Failed(err)) => return Poll::Ready(Ok(Err(err))),
                    Some(Looked::Ended) => return Poll::Ready(Ok(Ok(None))),
                    None => {}
                }
                // Changed (or the broker gone: the signal then resolves at once).
                if watch.has_changed().unwrap_or(true)
                    && stop_sent(watch)
                    && let Poll::Ready(deadline) = stopped.as_mut().poll(cx)
                {
                    return Poll::Ready(Err(deadline));
                }
                match self.poll_message(cx) {
                    Poll::Ready(Some(Ok(incoming))) => Poll::Ready(Ok(Ok(Some(incoming)))),
                    Poll::Ready(Some(Err(err))) => Poll::Ready(Ok(Err(err))),
                    Poll::Ready(None) => Poll::Ready(Ok(Ok(None))),
                    // Waiting: woken by a message or by the stop.
                    Poll::Pending => stopped.as_mut().poll(cx).map(Err),
                }
            })
            .await?;
            match next {
                Ok(next) => return Ok(next),
                Err(err) => {
                    self.transport_error(&err);
                    tokio::select! {
                        biased;
                        deadline = stopped.as_mut() => return Err(deadline),
                        () = tokio::time::sleep(ERROR_PAUSE) => {}
                    }
                }
            }
        }
    }

    /// After a message handled in place: the next one when the client holds it already and the
    /// stop signal did not move (`None` otherwise, and `first` waits). A look, not a wait: the
    /// waker it registers is replaced by `first`'s own before the task waits.
    fn ready_now(&mut self, watch: &StopSignal) -> Option<Incoming> {
        if self.batch > 1 || watch.has_changed().unwrap_or(true) {
            return None;
        }
        if let Some(ahead) = self.ahead.take() {
            return Some(self.behind(ahead));
        }
        let mut look = std::task::Context::from_waker(std::task::Waker::noop());
        match self.poll_message(&mut look) {
            Poll::Ready(Some(Ok(incoming))) => Some(incoming),
            Poll::Ready(Some(Err(err))) => {
                self.looked = Some(Looked::Failed(err));
                None
            }
            Poll::Ready(None) => {
                self.looked = Some(Looked::Ended);
                None
            }
            Poll::Pending => None,
        }
    }

    /// The transport's next message, taken ([`incoming`](Self::incoming)) and looked behind
    /// ([`behind`](Self::behind)).
    fn poll_message(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<Option<Result<Incoming, TransportError>>> {
        self.messages.poll_next_unpin(cx).map(|next| {
            next.map(|read| {
                read.map(|raw| {
                    let incoming = self.incoming(raw);
                    self.behind(incoming)
                })
            })
        })
    }

    /// `first`, and for a batch handler the messages ready with it, up to `batch`.
    async fn gather(&mut self, first: Incoming) -> Unit {
        if self.batch <= 1 {
            return Unit::One(first);
        }
        let mut unit = Vec::with_capacity(self.batch);
        unit.push(first);
        if let Some(linger) = self.linger {
            self.linger(&mut unit, Instant::now() + linger).await;
            return Unit::Batch(unit);
        }
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

    /// Runs the handler on `unit` in a task of its own and executes the decisions, holding
    /// `permit` and a dispatcher throughout.
    fn spawn(&self, tasks: &mut JoinSet<()>, unit: Unit, permit: OwnedSemaphorePermit) {
        let handling = Arc::clone(&self.handling);
        let run = handle(&handling, unit, handling.dispatcher());
        tasks.spawn(async move {
            // Given back before the permit, so a slot that frees finds it idle.
            handling.give_back(run.await);
            drop(permit);
        });
    }

    /// `incoming`, the message `first` hands over: when it is a Core request (one message per
    /// handler call), a look at what is ready behind it. With nothing ready, the request is
    /// marked [`AwaitedRequest`]: its response is then written before the handling goes on,
    /// since this task would otherwise settle, record and then wait with the response unsent.
    /// A message ready behind it is kept in `ahead` and taken next; the response then goes out
    /// with the next ones', when the task next waits.
    fn behind(&mut self, mut incoming: Incoming) -> Incoming {
        // A JetStream delivery has no reply inbox (its reply subject is the acknowledgement's);
        // a batch takes what is behind it into the batch itself, and its responses go out
        // together when the handler's task next waits. (`first` took `ahead` before this.)
        if incoming.delivery.reply().is_none() || self.batch > 1 {
            return incoming;
        }
        // A look, not a wait: whatever waker this registers is replaced by `first`'s own
        // before the task waits for messages.
        let mut look = std::task::Context::from_waker(std::task::Waker::noop());
        match self.messages.poll_next_unpin(&mut look) {
            Poll::Ready(Some(Ok(raw))) => self.ahead = Some(self.incoming(raw)),
            Poll::Pending => incoming.delivery.extensions_mut().insert(AwaitedRequest),
            Poll::Ready(Some(Err(err))) => self.transport_error(&err),
            // Ended: the next read says so again.
            Poll::Ready(None) => {}
        }
        incoming
    }

    /// A message taken for handling (counted in the registration's [`Progress`]).
    fn incoming(&mut self, raw: RawMessage) -> Incoming {
        let incoming = incoming_into(
            raw,
            self.endpoint.info().descriptor.model,
            self.endpoint.name(),
            self.endpoint.policy().max_attempts,
            self.spent.take(),
        );
        if let Some(info) = incoming.delivery.extension::<JetStreamInfo>() {
            self.handling.progress.taken(info.stream_sequence);
        }
        incoming
    }
}
