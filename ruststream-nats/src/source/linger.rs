//! A batch with a linger (`JetStreamSubject::max_wait`): once the first message of a batch
//! came, the source takes more until the batch is full or the linger is over, so light traffic
//! still forms batches instead of batches of one.

use futures::StreamExt;
use tokio::time::Instant;

use super::Source;
use crate::executor::Incoming;

impl Source {
    /// Adds to `unit` what arrives until it holds the batch size or `until` passed. Not cancelled
    /// by a stop: the messages taken are handled, and a stop waits for at most the linger.
    pub(super) async fn linger(&mut self, unit: &mut Vec<Incoming>, until: Instant) {
        while unit.len() < self.batch {
            match tokio::time::timeout_at(until, self.messages.next()).await {
                Ok(Some(Ok(raw))) => unit.push(self.incoming(raw)),
                Ok(Some(Err(err))) => self.transport_error(&err),
                // The subscription ended (the source opens it again), or the linger is over.
                Ok(None) | Err(_) => return,
            }
        }
    }
}
