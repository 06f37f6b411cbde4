//! Reading a Core subscription or a pull consumer in the runtime's own task, and stopping it:
//! the stream ends after what the client already holds is handed over.

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
use super::pull::{Delivered, Puller};
use crate::JetStreamInfo;
use crate::transport::{RawMessage, Subscription, TransportError, Unsubscribe};

pub(super) fn raw(message: async_nats::Message, jetstream: Option<JetStreamInfo>) -> RawMessage {
    RawMessage {
        subject: Arc::from(message.subject.as_str()),
        reply: message.reply.map(|reply| Arc::from(reply.as_str())),
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
    let source = match source {
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
            return (messages.boxed(), Box::new(StopCore(stop)));
        }
        source => source,
    };
    let (stop, stopped) = oneshot::channel();
    let state = Reading::Running {
        source,
        stop: stopped,
        subject: None,
    };
    (
        futures::stream::unfold(state, Reading::step).boxed(),
        Box::new(StopReading {
            request: Mutex::new(Some(stop)),
        }),
    )
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
                    // Asked to stop, or the handle is gone: checked first, as `Reading` does.
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
                        this.state = CoreState::Stopping(Box::pin(Reading::stopped(Pumped::Core(
                            subscriber,
                        ))));
                    }
                }
                CoreState::Stopping(stopping) => {
                    let reading = ready!(stopping.as_mut().poll(cx));
                    this.state =
                        CoreState::Stopped(futures::stream::unfold(reading, Reading::step).boxed());
                }
                CoreState::Stopped(rest) => return rest.poll_next_unpin(cx),
                CoreState::Ended => return Poll::Ready(None),
            }
        }
    }
}

enum Reading {
    Running {
        source: Pumped,
        stop: oneshot::Receiver<()>,
        /// The last message's subject: the next one's too, most of the time (shared, not
        /// copied again).
        subject: Option<Arc<str>>,
    },
    /// Stopped: the last messages of a drained Core subscription.
    Draining(async_nats::Subscriber),
    /// Stopped: what a pull had already brought into the client.
    Leftovers(std::vec::IntoIter<Delivered>),
}

impl Reading {
    async fn step(mut self) -> Option<(Item, Self)> {
        loop {
            self = match self {
                Self::Running {
                    mut source,
                    mut stop,
                    mut subject,
                } => {
                    tokio::select! {
                        biased;
                        // Asked to stop, or the handle is gone.
                        _ = &mut stop => Self::stopped(source).await,
                        item = next(&mut source) => {
                            let item = item?.map(|(message, jetstream)| {
                                raw_sharing(message, jetstream, &mut subject)
                            });
                            return Some((item, Self::Running { source, stop, subject }));
                        }
                    }
                }
                Self::Draining(mut subscriber) => {
                    let message = subscriber.next().await?;
                    return Some((Ok(raw(message, None)), Self::Draining(subscriber)));
                }
                Self::Leftovers(mut rest) => {
                    let (message, jetstream) = rest.next()?;
                    return Some((Ok(raw(message, Some(jetstream))), Self::Leftovers(rest)));
                }
            };
        }
    }

    /// Takes no new messages from `source`; what the client already holds is still handed
    /// over.
    async fn stopped(source: Pumped) -> Self {
        match source {
            Pumped::Core(mut subscriber) => {
                if let Err(err) = subscriber.drain().await {
                    // The connection is gone, and with it the subscription: the stream ends.
                    tracing::debug!(%err, "draining a subscription failed");
                }
                Self::Draining(subscriber)
            }
            // Nothing more is asked for; what was on its way is taken (`Puller::stop`), then
            // the inbox closes with the puller.
            Pumped::Pull(mut puller) => Self::Leftovers(puller.stop().await.into_iter()),
        }
    }
}

/// The next message; a pull's with the facts of its acknowledgement subject.
async fn next(
    source: &mut Pumped,
) -> Option<Result<(async_nats::Message, Option<JetStreamInfo>), TransportError>> {
    match source {
        Pumped::Core(subscriber) => subscriber.next().await.map(|message| Ok((message, None))),
        Pumped::Pull(puller) => puller
            .next()
            .await
            .map(|delivered| delivered.map(|(message, info)| (message, Some(info)))),
    }
}

/// [`raw`], sharing the subject with the previous message when it is the same.
fn raw_sharing(
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
        reply: message.reply.map(|reply| Arc::from(reply.as_str())),
        headers: from_header_map(message.headers.as_ref()),
        payload: message.payload,
        jetstream,
    }
}
