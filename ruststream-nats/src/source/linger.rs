//! A batch with a linger (`max_wait` on a JetStream or Core descriptor): once the first message
//! of a batch came, the source takes more until the batch is full or the linger is over, so
//! light traffic still forms batches instead of batches of one.

use futures::StreamExt;
use tokio::time::Instant;

use super::Source;
use crate::executor::Incoming;

impl Source {
    /// Adds to `unit` what arrives until it holds the batch size or `until` passed, or the broker
    /// begins stopping: the batch is then handed over at once (the messages taken are always
    /// handled), and what arrives after it is handled with the stop's leftovers. So a long
    /// linger never holds a stop up, nor lets a batch miss the drain deadline.
    pub(super) async fn linger(&mut self, unit: &mut Vec<Incoming>, until: Instant) {
        let mut stop = self.stop.clone();
        let stopping = stop.wait_for(Option::is_some);
        tokio::pin!(stopping);
        while unit.len() < self.batch {
            let next = tokio::select! {
                biased;
                next = tokio::time::timeout_at(until, self.messages.next()) => next,
                // A stop, or the broker gone.
                _ = &mut stopping => return,
            };
            match next {
                Ok(Some(Ok(raw))) => unit.push(self.incoming(raw)),
                Ok(Some(Err(err))) => self.transport_error(&err),
                // The subscription ended (the source opens it again), or the linger is over.
                Ok(None) | Err(_) => return,
            }
        }
    }
}
