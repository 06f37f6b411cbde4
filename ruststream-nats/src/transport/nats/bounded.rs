//! A Core subscription held to `.subscription_capacity(n)` messages.
//!
//! async-nats sizes every subscription's buffer from one client-wide setting, the JetStream
//! pull inboxes' included, so the broker leaves that at its own default
//! (`options::CLIENT_SUBSCRIPTION_CAPACITY`) and bounds Core subscriptions here: a task takes each message off the client's buffer as it arrives and
//! keeps at most `n` for the handlers; past that it drops the newest and counts it in
//! [`Events`] (a warning and `ruststream_slow_consumer_dropped_total`), every drop. A pull's
//! lookahead is never throttled by it.
//!
//! On stop the task drains the subscription (unsubscribed on the server) and hands over what
//! the client still received, waiting for room instead of dropping: the handlers take it in the
//! drain.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use futures::{Stream, StreamExt};
use tokio::sync::{mpsc, oneshot};

use super::reading::raw_sharing;
use crate::events::Events;
use crate::transport::{RawMessage, Subscription, TransportError, Unsubscribe};

/// Reads `subscriber` keeping at most `capacity` messages (at least 1) for the handlers,
/// counting each one dropped past that under `sid` in `events`.
pub(super) fn bounded(
    subscriber: async_nats::Subscriber,
    capacity: usize,
    events: Option<Arc<Events>>,
    sid: Option<u64>,
) -> Subscription {
    let (sender, receiver) = mpsc::channel(capacity.max(1));
    let (stop, stopped) = oneshot::channel();
    tokio::spawn(pump(subscriber, sender, stopped, events, sid));
    let messages = Bounded {
        receiver,
        subject: None,
    };
    (
        messages.boxed(),
        Box::new(StopPump(std::sync::Mutex::new(Some(stop)))),
    )
}

/// Moves messages from the client's buffer into the bounded one until asked to stop (or the
/// reader is gone), then drains the subscription into it.
async fn pump(
    mut subscriber: async_nats::Subscriber,
    sender: mpsc::Sender<async_nats::Message>,
    mut stopped: oneshot::Receiver<()>,
    events: Option<Arc<Events>>,
    sid: Option<u64>,
) {
    loop {
        let message = tokio::select! {
            biased;
            // Asked to stop, or the handle is gone.
            _ = &mut stopped => break,
            message = subscriber.next() => message,
        };
        // The subscription ended (the connection closed for good): so does the reading.
        let Some(message) = message else { return };
        match sender.try_send(message) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                if let (Some(events), Some(sid)) = (&events, sid) {
                    events.dropped(sid, 1);
                }
            }
            Err(mpsc::error::TrySendError::Closed(_)) => return,
        }
    }
    if let Err(err) = subscriber.drain().await {
        tracing::debug!(%err, "draining a subscription failed");
    }
    while let Some(message) = subscriber.next().await {
        if sender.send(message).await.is_err() {
            return;
        }
    }
}

/// The bounded buffer's side the source reads.
struct Bounded {
    receiver: mpsc::Receiver<async_nats::Message>,
    /// The last message's subject, shared with the next one when it is the same.
    subject: Option<Arc<str>>,
}

impl Stream for Bounded {
    type Item = Result<RawMessage, TransportError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        this.receiver
            .poll_recv(cx)
            .map(|message| message.map(|m| Ok(raw_sharing(m, None, &mut this.subject))))
    }
}

/// Asks the pump to stop; dropped, it stops it too.
struct StopPump(std::sync::Mutex<Option<oneshot::Sender<()>>>);

impl Unsubscribe for StopPump {
    fn stop(&self) -> BoxFuture<'_, ()> {
        if let Some(stop) = self.0.lock().ok().and_then(|mut s| s.take()) {
            // An error means the pump is gone: it takes nothing either way.
            let _ = stop.send(());
        }
        Box::pin(std::future::ready(()))
    }
}
