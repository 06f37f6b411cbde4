//! Everything a real server carries, as a live [`TestApp`](super::TestApp) records it: a
//! subscription to `>` on the test's own connection, and the round trips that make the record
//! complete up to a moment.
//!
//! A flush only says that the bytes left the client. What makes a record complete is the
//! server's order: it handles one connection's commands in order and writes to one connection
//! in order. So a marker the test publishes, once it comes back on the `>` subscription, comes
//! after every message the server sent the test before, and an echo on the app's connection
//! says the server handled everything the app sent before it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt as _;
use tokio::sync::watch;

/// The token before a marker's number in its subject.
const MARKER: &str = "rs-testapp-marker";

/// How long a marker or an echo may take to come back.
const ROUND_TRIP: Duration = Duration::from_secs(10);

/// Every message the test's subscription to `>` got, markers left out.
pub(super) struct Wire {
    client: async_nats::Client,
    messages: Arc<Mutex<Vec<async_nats::Message>>>,
    /// The highest marker number seen.
    seen: watch::Receiver<u64>,
    /// The inbox the markers are published under.
    inbox: String,
    next: AtomicU64,
}

impl Wire {
    /// Subscribes `client` to `>` and records from now on; the server has the subscription
    /// when this returns.
    pub(super) async fn start(client: async_nats::Client) -> Result<Self, String> {
        let mut subscription = client
            .subscribe(">")
            .await
            .map_err(|e| format!("cannot subscribe to `>`: {e}"))?;
        let messages: Arc<Mutex<Vec<async_nats::Message>>> = Arc::default();
        let (mark, seen) = watch::channel(0);
        let sink = Arc::clone(&messages);
        tokio::spawn(async move {
            while let Some(message) = subscription.next().await {
                match marker_number(&message.subject) {
                    Some(n) => mark.send_modify(|seen| *seen = (*seen).max(n)),
                    None if is_marker(&message.subject) => {}
                    None => sink
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(message),
                }
            }
        });
        let wire = Self {
            inbox: client.new_inbox(),
            client,
            messages,
            seen,
            next: AtomicU64::new(1),
        };
        wire.sync().await?;
        Ok(wire)
    }

    /// Returns once every message the server sent the test before now is on the record.
    pub(super) async fn sync(&self) -> Result<(), String> {
        let n = self.next.fetch_add(1, Ordering::SeqCst);
        self.client
            .publish(format!("{}.{MARKER}.{n}", self.inbox), bytes::Bytes::new())
            .await
            .map_err(|e| format!("cannot publish the test's marker: {e}"))?;
        let _ = self.client.flush().await;
        let mut seen = self.seen.clone();
        tokio::time::timeout(ROUND_TRIP, seen.wait_for(|seen| *seen >= n))
            .await
            .map_err(|_| format!("the test's marker did not come back within {ROUND_TRIP:?}"))?
            .map_err(|_| "the test's subscription to `>` ended".to_owned())?;
        Ok(())
    }

    /// Every message recorded so far, in the order the server sent them.
    pub(super) fn messages(&self) -> Vec<async_nats::Message> {
        self.messages
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Returns once the server handled everything `client` sent before: an echo on a fresh inbox
/// came back.
pub(super) async fn round_trip(client: &async_nats::Client) -> Result<(), String> {
    let subject = format!("{}.{MARKER}", client.new_inbox());
    let mut echo = client
        .subscribe(subject.clone())
        .await
        .map_err(|e| format!("cannot subscribe to the app's echo: {e}"))?;
    client
        .publish(subject, bytes::Bytes::new())
        .await
        .map_err(|e| format!("cannot publish the app's echo: {e}"))?;
    let _ = client.flush().await;
    let back = tokio::time::timeout(ROUND_TRIP, echo.next()).await;
    let _ = echo.unsubscribe().await;
    match back {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err("the app's connection closed".to_owned()),
        Err(_) => Err(format!(
            "the app's echo did not come back within {ROUND_TRIP:?}"
        )),
    }
}

/// Whether `subject` is a marker or an echo (`<inbox>.rs-testapp-marker[.<n>]`).
fn is_marker(subject: &str) -> bool {
    subject.rsplit('.').take(2).any(|token| token == MARKER)
}

/// The number of the test's marker `subject` (`<inbox>.rs-testapp-marker.<n>`).
fn marker_number(subject: &str) -> Option<u64> {
    let (rest, n) = subject.rsplit_once('.')?;
    rest.ends_with(MARKER).then(|| n.parse().ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::{is_marker, marker_number};

    #[test]
    fn markers_and_echoes_are_told_apart_from_messages() {
        assert_eq!(marker_number("_INBOX.abc.rs-testapp-marker.7"), Some(7));
        assert_eq!(marker_number("_INBOX.abc.rs-testapp-marker"), None);
        assert!(is_marker("_INBOX.abc.rs-testapp-marker"));
        assert!(is_marker("_INBOX.abc.rs-testapp-marker.7"));
        assert!(!is_marker("orders.created"));
        assert_eq!(marker_number("orders.7"), None);
    }
}
