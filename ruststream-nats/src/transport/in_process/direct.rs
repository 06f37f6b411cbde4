//! What a test does to the emulated server besides what the runtime does through
//! [`Transport`](crate::transport::Transport), as a test's own client does to a real server:
//! create and delete a consumer, fetch one batch, read a consumer's ack floor. The
//! differential test (`tests/in_process_differential.rs`) drives both servers with these.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::InProcessNats;
use super::state::FeedKey;
use crate::transport::{ConsumerSpec, RawMessage, TransportError, TransportErrorKind};

impl InProcessNats {
    /// Creates the consumer `spec` describes, or updates an existing durable's ack_wait and
    /// max_ack_pending, without pulling from it; its name. A durable whose filter or deliver
    /// policy differs is refused (`ConsumerConflict`), a missing stream is `StreamNotFound`.
    pub fn create_consumer(&self, spec: &ConsumerSpec) -> Result<String, TransportError> {
        self.state().open_consumer(spec)
    }

    /// Deletes consumer `consumer` of `stream`; false when there was none.
    pub fn delete_consumer(&self, stream: &str, consumer: &str) -> bool {
        self.state().delete_consumer(stream, consumer)
    }

    /// The ack floor of `consumer` on `stream`, as `consumer info` reports it:
    /// `(consumer sequence, stream sequence)`; `None` without such a consumer.
    pub fn ack_floor(&self, stream: &str, consumer: &str) -> Option<(u64, u64)> {
        self.state().ack_floor(stream, consumer)
    }

    /// One pull request of up to `batch` messages, as a client's fetch sends it: what the
    /// consumer delivers to it within `expires` (the request ends early once it has `batch`).
    /// `StreamNotFound` without such a stream or consumer.
    pub async fn fetch(
        &self,
        stream: &str,
        consumer: &str,
        batch: usize,
        expires: Duration,
    ) -> Result<Vec<RawMessage>, TransportError> {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let Some(id) = self.state().add_pull(stream, consumer, tx, batch) else {
            return Err(TransportError::new(
                TransportErrorKind::StreamNotFound,
                format!("no consumer `{consumer}` on stream `{stream}` to fetch from"),
            ));
        };
        self.ensure_driver();
        self.poke();
        let deadline = Instant::now() + expires;
        let mut got = Vec::new();
        // Messages are not marked taken: the pull holds at most `batch`, as the request asks.
        while got.len() < batch.max(1) {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(message)) => got.push(message),
                Ok(None) | Err(_) => break,
            }
        }
        self.state().stop(&FeedKey::Pull {
            stream: stream.to_owned(),
            consumer: consumer.to_owned(),
            id,
        });
        Ok(got)
    }
}
