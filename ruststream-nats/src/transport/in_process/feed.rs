//! Feeds: how the runtime reads a subscription or a pull of the emulated server (a message
//! taken frees room in a pull), how it stops one, and the driver that fires the timers.

use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context as TaskContext, Poll};

use futures::Stream;
use futures::future::BoxFuture;
use tokio::sync::Notify;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;

use super::Shared;
use super::state::FeedKey;
use crate::transport::{RawMessage, TransportError, Unsubscribe};

/// Fires the timers: sleeps until the next deadline (or a poke), moves what is due to the
/// redelivery queues and delivers it. Ends when the server is gone.
pub(super) async fn drive(shared: Weak<Shared>, wake: Arc<Notify>) {
    loop {
        let next = {
            let Some(shared) = shared.upgrade() else {
                return;
            };
            let mut state = shared.lock();
            state.fire_timers(Instant::now());
            state.next_deadline()
        };
        match next {
            Some(at) => {
                tokio::select! {
                    () = tokio::time::sleep_until(at) => {}
                    () = wake.notified() => {}
                }
            }
            None => wake.notified().await,
        }
    }
}

/// The messages of one subscription or pull, as the runtime reads them.
pub(super) struct Feed {
    pub(super) rx: UnboundedReceiver<RawMessage>,
    pub(super) shared: Arc<Shared>,
    pub(super) key: FeedKey,
}

impl Stream for Feed {
    type Item = Result<RawMessage, TransportError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Self::Item>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(message)) => {
                self.shared.lock().taken(&self.key);
                self.shared.wake.notify_one();
                Poll::Ready(Some(Ok(message)))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Stops one feed.
pub(super) struct Stop {
    pub(super) shared: Arc<Shared>,
    pub(super) key: FeedKey,
}

impl Unsubscribe for Stop {
    fn stop(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.shared.lock().stop(&self.key);
        })
    }
}
