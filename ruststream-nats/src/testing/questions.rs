//! The questions a test asks about what the server carried and holds, answered the same way by
//! the emulation and by a real server: what was published where, the dead letters, a
//! consumer's counters, a stream's messages, the acknowledgements the app sent.

use serde::de::DeserializeOwned;

use super::{Backend, ConsumerFacts, RawMessage, StoredMessage, TestApp};

impl TestApp {
    /// Every message published to `subject` (a subject or a pattern) that decodes as `T`, in
    /// order: by the test, by handlers, as replies, copies and dead letters.
    pub fn published<T: DeserializeOwned>(&self, subject: &str) -> Vec<T> {
        self.raw_published(subject)
            .iter()
            .filter_map(|m| serde_json::from_slice(&m.payload).ok())
            .collect()
    }

    /// Every message published to dead-letter subject `subject`, as it went: payload and
    /// headers of the delivery as it arrived.
    pub fn dead_letters(&self, subject: &str) -> Vec<RawMessage> {
        self.raw_published(subject)
    }

    /// The counters of consumer `consumer` of `stream`, as the server reports them; `None`
    /// when there is no such consumer.
    pub async fn consumer_info(&self, stream: &str, consumer: &str) -> Option<ConsumerFacts> {
        match &self.backend {
            Backend::InProcess(nats) => nats.consumer_info(stream, consumer),
            Backend::Live(live) => live
                .consumer_info(stream, consumer)
                .await
                .map(|info| ConsumerFacts::from(&info)),
        }
    }

    /// Every message `stream` stores, in order (none when there is no such stream).
    pub async fn stream_messages(&self, stream: &str) -> Vec<StoredMessage> {
        match &self.backend {
            Backend::InProcess(nats) => nats.stream_messages(stream),
            Backend::Live(live) => live
                .stream_messages(stream)
                .await
                .into_iter()
                .map(StoredMessage::from)
                .collect(),
        }
    }

    /// The acknowledgements the app sent for consumer `consumer` of `stream`, as their wire
    /// forms (`+ACK`, `-NAK`, `-NAK {"delay": ..}`, `+TERM`), in order.
    pub fn acknowledgements(&self, stream: &str, consumer: &str) -> Vec<String> {
        self.raw_published(&format!("$JS.ACK.{stream}.{consumer}.>"))
            .iter()
            .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
            .collect()
    }

    /// Every message published to a subject `subject` matches, as it went.
    fn raw_published(&self, subject: &str) -> Vec<RawMessage> {
        match &self.backend {
            Backend::InProcess(nats) => nats.published(subject),
            Backend::Live(live) => live.published(subject),
        }
    }
}
