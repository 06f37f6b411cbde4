//! Reading a Core subscription or a pull consumer in the runtime's own task, and stopping it:
//! the stream ends after what the client already holds is handed over.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::task::AtomicWaker;
use futures::{Stream, StreamExt};
use tokio::sync::oneshot;

use super::from_header_map;
use super::pull::{Delivered, Polled, Puller, Step};
use crate::JetStreamInfo;
use crate::transport::{RawMessage, ReplySubject, Subscription, TransportError, Unsubscribe};

pub(super) fn raw(message: async_nats::Message, jetstream: Option<JetStreamInfo>) -> RawMessage {
    RawMessage {
        subject: Arc::from(message.subject.as_str()),
        // Kept as the client's subject: an acknowledgement goes back to it without a copy.
        reply: message.reply.map(ReplySubject::from),
        headers: from_header_map(message.headers.as_ref()),
        payload: message.payload,
        jetstream,
    }
}

/// What a subscription reads from.
pub(super) enum Pumped {
    Core(async_nats::Subscriber),
    Pull(Box<Puller>),
}

type Item = Result<RawMessage, TransportError>;

/// `source`'s messages, read in the reader's own task (no task or channel in between): a message
/// leaves the client only when the runtime asks for the next one, which it does when a handler
/// is free.
pub(super) fn reading(source: Pumped) -> Subscription {
    match source {
        // Read directly, without a stream adapter moving its state on every message.
        Pumped::Core(subscriber) => {
            let stop = Arc::new(CoreStop::default());
            let messages = CoreReading {
                state: CoreState::Running {
                    subscriber,
                    stop: Arc::clone(&stop),
                },
                subject: None,
            };
            (messages.boxed(), Box::new(StopCore(stop)))
        }
        // Polled directly too: a future only for what awaits besides messages.
        Pumped::Pull(puller) => {
            let (stop, stopped) = oneshot::channel();
            let messages = PullReading {
                state: PullState::Running {
                    puller,
                    stop: stopped,
                },
                subject: None,
            };
            (
                messages.boxed(),
                Box::new(StopReading {
                    request: Mutex::new(Some(stop)),
                }),
            )
        }
    }
}

/// Asks the stream to stop taking new messages: it does at its next read (the runtime reads
/// on at once, to hand over what the client still holds).
struct StopReading {
    request: Mutex<Option<oneshot::Sender<()>>>,
}

impl Unsubscribe for StopReading {
    fn stop(&self) -> BoxFuture<'_, ()> {
        if let Some(request) = self.request.lock().ok().and_then(|mut r| r.take()) {
            // An error means the stream is gone: it takes nothing either way.
            let _ = request.send(());
        }
        Box::pin(std::future::ready(()))
    }
}

/// A Core subscription's stop request: a flag looked at before each message (an atomic load,
/// where a `oneshot` poll registered the reader's waker every time), and the waker of a reader
/// waiting for its next message.
#[derive(Default)]
struct CoreStop {
    requested: AtomicBool,
    waiting: AtomicWaker,
}

impl CoreStop {
    fn request(&self) {
        self.requested.store(true, Ordering::Release);
        self.waiting.wake();
    }

    fn requested(&self) -> bool {
        self.requested.load(Ordering::Acquire)
    }
}

/// [`StopReading`] for a [`CoreReading`]; dropped, it stops the reading too (as the `oneshot`
/// of [`StopReading`] does when its sender is gone).
struct StopCore(Arc<CoreStop>);

impl Unsubscribe for StopCore {
    fn stop(&self) -> BoxFuture<'_, ()> {
        self.0.request();
        Box::pin(std::future::ready(()))
    }
}

impl Drop for StopCore {
    fn drop(&mut self) {
        self.0.request();
    }
}

/// A Core subscription read in place: the subscriber polled directly while running; once
/// asked to stop, drained and read on through [`Reading`] (once per subscription).
struct CoreReading {
    state: CoreState,
    /// The last message's subject, shared with the next one when it is the same.
    subject: Option<Arc<str>>,
}

enum CoreState {
    Running {
        subscriber: async_nats::Subscriber,
        stop: Arc<CoreStop>,
    },
    /// Asked to stop: the subscription is draining.
    Stopping(BoxFuture<'static, Reading>),
    /// What the client still held.
    Stopped(BoxStream<'static, Item>),
    Ended,
}

impl Stream for CoreReading {
    type Item = Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Item>> {
        let this = &mut *self;
        loop {
            match &mut this.state {
                CoreState::Running { subscriber, stop } => {
                    // Asked to stop, or the handle is gone: checked first.
                    if !stop.requested() {
                        if let Poll::Ready(message) = subscriber.poll_next_unpin(cx) {
                            return Poll::Ready(
                                message.map(|m| Ok(raw_sharing(m, None, &mut this.subject))),
                            );
                        }
                        // Waiting: a stop asked for from now on wakes this reader too.
                        stop.waiting.register(cx.waker());
                        if !stop.requested() {
                            return Poll::Pending;
                        }
                    }
                    if let CoreState::Running { subscriber, .. } =
                        std::mem::replace(&mut this.state, CoreState::Ended)
                    {
                        this.state = CoreState::Stopping(Box::pin(Reading::stopped(subscriber)));
                    }
                }
                CoreState::Stopping(stopping) => {
                    let reading = ready!(stopping.as_mut().poll(cx));
                    this.state =
                        CoreState::Stopped(futures::stream::unfold(reading, Reading::step).boxed());
                }
                CoreState::Stopped(rest) => {
                    let next = ready!(rest.poll_next_unpin(cx));
                    if next.is_none() {
                        // Ended for good: polled again, it says so (not the drained stream).
                        this.state = CoreState::Ended;
                    }
                    return Poll::Ready(next);
                }
                CoreState::Ended => return Poll::Ready(None),
            }
        }
    }
}

/// A Core subscription once stopped: its last messages, read as it drains.
enum Reading {
    Draining(async_nats::Subscriber),
}

impl Reading {
    async fn step(self) -> Option<(Item, Self)> {
        let Self::Draining(mut subscriber) = self;
        let message = subscriber.next().await?;
        Some((Ok(raw(message, None)), Self::Draining(subscriber)))
    }

    /// Takes no new messages from `subscriber`; what the client already holds is still handed
    /// over.
    async fn stopped(mut subscriber: async_nats::Subscriber) -> Self {
        if let Err(err) = subscriber.drain().await {
            // The connection is gone, and with it the subscription: the stream ends.
            tracing::debug!(%err, "draining a subscription failed");
        }
        Self::Draining(subscriber)
    }
}

/// A pull read in place: the puller polled directly ([`Puller::poll_next`]); what awaits
/// besides messages (a request to send, the consumer to check, a pause) runs as a future that
/// holds the puller and hands it back (once per request: at most once per half lookahead of
/// messages, not per message).
struct PullReading {
    state: PullState,
    /// The last message's subject, shared with the next one when it is the same.
    subject: Option<Arc<str>>,
}

enum PullState {
    Running {
        puller: Box<Puller>,
        stop: oneshot::Receiver<()>,
    },
    /// A step of the pull that awaits something besides messages.
    Stepping(BoxFuture<'static, Stepped>),
    /// Asked to stop: nothing more is asked for; what was on its way is taken
    /// ([`Puller::stop`]), then the inbox closes with the puller.
    Stopping(BoxFuture<'static, Vec<Delivered>>),
    /// What the pull had brought into the client when it stopped.
    Leftovers(std::vec::IntoIter<Delivered>),
    Ended,
}

/// A step taken: the puller back, with the stop signal unless it came during the step.
struct Stepped {
    puller: Box<Puller>,
    stop: Option<oneshot::Receiver<()>>,
    next: Option<Option<Result<Delivered, TransportError>>>,
}

impl PullState {
    fn stopping(mut puller: Box<Puller>) -> Self {
        Self::Stopping(Box::pin(async move {
            let held = puller.stop().await;
            puller.close().await;
            held
        }))
    }
}

/// Takes `step` with `puller`. Asked to stop meanwhile, the step is left (nothing was taken
/// from the client yet), except a request sent before a delivery is handed over: that one
/// finishes, and the delivery is handed over.
async fn stepping(mut puller: Box<Puller>, mut stop: oneshot::Receiver<()>, step: Step) -> Stepped {
    if let Step::AskThenHand(_) = step {
        let next = puller.step(step).await;
        return Stepped {
            puller,
            stop: Some(stop),
            next,
        };
    }
    tokio::select! {
        biased;
        // Asked to stop, or the handle is gone.
        _ = &mut stop => Stepped { puller, stop: None, next: None },
        next = puller.step(step) => Stepped { puller, stop: Some(stop), next },
    }
}

impl Stream for PullReading {
    type Item = Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Item>> {
        let this = &mut *self;
        let next = loop {
            match &mut this.state {
                PullState::Running { puller, stop } => {
                    // Asked to stop, or the handle is gone: checked first.
                    if Pin::new(stop).poll(cx).is_ready() {
                        if let PullState::Running { puller, .. } =
                            std::mem::replace(&mut this.state, PullState::Ended)
                        {
                            this.state = PullState::stopping(puller);
                        }
                        continue;
                    }
                    match ready!(puller.poll_next(cx)) {
                        Polled::Ready(next) => break next,
                        Polled::Await(step) => {
                            if let PullState::Running { puller, stop } =
                                std::mem::replace(&mut this.state, PullState::Ended)
                            {
                                this.state =
                                    PullState::Stepping(Box::pin(stepping(puller, stop, step)));
                            }
                        }
                    }
                }
                PullState::Stepping(step) => {
                    let Stepped { puller, stop, next } = ready!(step.as_mut().poll(cx));
                    this.state = match stop {
                        Some(stop) => PullState::Running { puller, stop },
                        None => PullState::stopping(puller),
                    };
                    if let Some(next) = next {
                        break next;
                    }
                }
                PullState::Stopping(stopping) => {
                    let held = ready!(stopping.as_mut().poll(cx));
                    this.state = PullState::Leftovers(held.into_iter());
                }
                PullState::Leftovers(rest) => break rest.next().map(Ok),
                PullState::Ended => return Poll::Ready(None),
            }
        };
        match next {
            Some(next) => Poll::Ready(Some(next.map(|(message, jetstream)| {
                raw_sharing(message, Some(jetstream), &mut this.subject)
            }))),
            None => {
                // Nothing more comes: the puller (and its inbox) goes.
                this.state = PullState::Ended;
                Poll::Ready(None)
            }
        }
    }
}

/// [`raw`], sharing the subject with the previous message when it is the same.
pub(super) fn raw_sharing(
    message: async_nats::Message,
    jetstream: Option<JetStreamInfo>,
    last: &mut Option<Arc<str>>,
) -> RawMessage {
    let subject = match last {
        Some(subject) if **subject == *message.subject => Arc::clone(subject),
        _ => Arc::clone(last.insert(Arc::from(message.subject.as_str()))),
    };
    RawMessage {
        subject,
        // Kept as the client's subject: an acknowledgement goes back to it without a copy.
        reply: message.reply.map(ReplySubject::from),
        headers: from_header_map(message.headers.as_ref()),
        payload: message.payload,
        jetstream,
    }
}
