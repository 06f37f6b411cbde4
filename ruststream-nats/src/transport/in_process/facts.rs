//! What a test asks the server: a consumer's counters and a stream's messages, in the same shape
//! for the in-process NATS and (through the `From` conversions) for a real server.

use std::sync::Arc;

use bytes::Bytes;
use ruststream::Headers;

/// A consumer's counters, as `consumer info` reports them.
///
/// Read it from the in-process NATS with
/// [`InProcessNats::consumer_info`](super::InProcessNats::consumer_info), or from a real server
/// with `ConsumerFacts::from(&consumer.info().await?)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub struct ConsumerFacts {
    /// Deliveries made so far, counting every redelivery: the consumer sequence of the last one
    /// (`delivered.consumer_seq`).
    pub delivered: u64,
    /// The stream sequence the consumer has read up to (`delivered.stream_seq`).
    pub delivered_stream: u64,
    /// Deliveries waiting for a settlement, or held for a redelivery (`num_ack_pending`).
    pub ack_pending: usize,
    /// Messages still waiting for a settlement that were delivered more than once
    /// (`num_redelivered`).
    pub redelivered: usize,
    /// Messages of the stream the consumer has not delivered yet (`num_pending`).
    pub pending: u64,
}

impl ConsumerFacts {
    /// Counters with every field given, for comparisons in tests.
    pub fn new(
        delivered: u64,
        delivered_stream: u64,
        ack_pending: usize,
        redelivered: usize,
        pending: u64,
    ) -> Self {
        Self {
            delivered,
            delivered_stream,
            ack_pending,
            redelivered,
            pending,
        }
    }
}

impl From<&async_nats::jetstream::consumer::Info> for ConsumerFacts {
    fn from(info: &async_nats::jetstream::consumer::Info) -> Self {
        Self {
            delivered: info.delivered.consumer_sequence,
            delivered_stream: info.delivered.stream_sequence,
            ack_pending: info.num_ack_pending,
            redelivered: info.num_redelivered,
            pending: info.num_pending,
        }
    }
}

/// One message a stream stores.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoredMessage {
    /// Its stream sequence.
    pub sequence: u64,
    /// The subject it was published to.
    pub subject: Arc<str>,
    /// Its headers, as published.
    pub headers: Headers,
    /// Its payload, as published.
    pub payload: Bytes,
}

impl StoredMessage {
    /// A stored message, for comparisons in tests.
    pub fn new(
        sequence: u64,
        subject: impl Into<Arc<str>>,
        headers: Headers,
        payload: impl Into<Bytes>,
    ) -> Self {
        Self {
            sequence,
            subject: subject.into(),
            headers,
            payload: payload.into(),
        }
    }
}

impl From<async_nats::jetstream::message::StreamMessage> for StoredMessage {
    /// A real server's stored message. Its headers come sorted by name (the client keeps them in
    /// a hash map), each name's values in order.
    fn from(message: async_nats::jetstream::message::StreamMessage) -> Self {
        Self {
            sequence: message.sequence,
            subject: Arc::from(message.subject.as_str()),
            headers: headers_from(&message.headers),
            payload: message.payload,
        }
    }
}

/// An async-nats header map as [`Headers`], sorted by name.
pub(crate) fn headers_from(map: &async_nats::HeaderMap) -> Headers {
    let mut entries: Vec<(String, Vec<String>)> = map
        .iter()
        .map(|(name, values)| {
            (
                name.to_string(),
                values.iter().map(|v| v.as_str().to_owned()).collect(),
            )
        })
        .collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    entries
        .into_iter()
        .flat_map(|(name, values)| values.into_iter().map(move |v| (name.clone(), v)))
        .collect()
}

/// A stream's limits, as far as the in-process NATS follows them: the most messages it keeps
/// (then `discard: new` refuses a new one, `discard: old` drops the oldest), the most bytes
/// and the oldest age it keeps (the oldest messages go first), and its duplicate window (a
/// `Nats-Msg-Id` seen within it is acknowledged as a duplicate and not stored again). Its
/// replicas are recorded only: the in-process NATS is one server.
///
/// Set them with [`InProcessNats::set_stream_limits`](super::InProcessNats::set_stream_limits).
/// The defaults are the server's: no limit, `discard: old`, a 2-minute window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct StreamLimits {
    /// The most messages the stream keeps.
    pub max_msgs: Option<u64>,
    /// Whether a full stream refuses new messages (`discard: new`) instead of dropping its
    /// oldest (`discard: old`).
    pub discard_new: bool,
    /// How long a message id is remembered.
    pub duplicate_window: std::time::Duration,
    /// The most bytes (subjects and payloads) the stream keeps.
    pub max_bytes: Option<u64>,
    /// How long a message is kept.
    pub max_age: Option<std::time::Duration>,
    /// How many servers would keep a copy.
    pub replicas: usize,
}

impl Default for StreamLimits {
    fn default() -> Self {
        Self {
            max_msgs: None,
            discard_new: false,
            duplicate_window: std::time::Duration::from_secs(120),
            max_bytes: None,
            max_age: None,
            replicas: 1,
        }
    }
}

impl StreamLimits {
    /// At most `max` messages; a full stream refuses new ones (`discard: new`).
    pub fn refuse_past(max: u64) -> Self {
        Self {
            max_msgs: Some(max),
            discard_new: true,
            ..Self::default()
        }
    }

    /// At most `max` messages; a new one makes room by dropping the oldest (`discard: old`).
    pub fn drop_oldest_past(max: u64) -> Self {
        Self {
            max_msgs: Some(max),
            ..Self::default()
        }
    }

    /// The same limits with a duplicate window of `window`.
    pub fn with_duplicate_window(mut self, window: std::time::Duration) -> Self {
        self.duplicate_window = window;
        self
    }

    /// As the declaration's numbers ([`Limits`](crate::transport::Limits)).
    pub(crate) fn limits(&self) -> crate::transport::Limits {
        crate::transport::Limits {
            replicas: Some(u64::try_from(self.replicas.max(1)).unwrap_or(u64::MAX)),
            max_age: self.max_age,
            max_bytes: self.max_bytes,
            max_messages: self.max_msgs,
            duplicate_window: Some(self.duplicate_window),
        }
    }

    /// With the limits `limits` sets.
    pub(crate) fn set(&mut self, limits: &crate::transport::Limits) {
        if let Some(replicas) = limits.replicas {
            self.replicas = usize::try_from(replicas).unwrap_or(usize::MAX);
        }
        self.max_age = limits.max_age.or(self.max_age);
        self.max_bytes = limits.max_bytes.or(self.max_bytes);
        self.max_msgs = limits.max_messages.or(self.max_msgs);
        if let Some(window) = limits.duplicate_window {
            self.duplicate_window = window;
        }
    }
}
