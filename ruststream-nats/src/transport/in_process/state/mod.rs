//! The emulated server's state and every rule it follows. All of it is synchronous: the
//! transport methods, the feeds and the timer driver take the lock, act, and let go before any
//! await.
//!
//! [`State`] is one value; its rules are split by concept, each file an `impl State` block:
//! `core.rs` (Core subscriptions and routing), `stream.rs` (streams and what they store),
//! `consumer.rs` (pull consumers and delivery), `ack.rs` (acknowledgements and the timers of
//! ack_wait and `-NAK` delays). This file holds the state itself, publishing, and the feeds.

mod ack;
mod consumer;
mod core;
mod stream;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use ruststream::Headers;
use tokio::time::Instant;

use self::consumer::PendingState;
use self::core::Subscription;
pub(super) use self::stream::Storing;
use self::stream::Stream;
use crate::jetstream_info::ACK_PREFIX;
use crate::subject::matches;
use crate::transport::RawMessage;

/// The whole emulated server.
#[derive(Debug)]
pub(super) struct State {
    subscriptions: Vec<Subscription>,
    group_cursor: HashMap<String, usize>,
    streams: BTreeMap<String, Stream>,
    history: Vec<RawMessage>,
    /// Bumped by every change anyone could observe: a publish, a delivery, a settlement, a
    /// timer that fired, a feed that handed a message over.
    activity: u64,
    next_id: u64,
    clock: WallClock,
}

/// Nanoseconds since the epoch on tokio's clock, for the timestamps in acknowledgement subjects.
#[derive(Debug)]
struct WallClock {
    epoch_ns: u128,
    start: Instant,
}

impl WallClock {
    fn new() -> Self {
        Self {
            epoch_ns: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
            start: Instant::now(),
        }
    }

    fn now_ns(&self) -> u128 {
        self.epoch_ns
            + Instant::now()
                .saturating_duration_since(self.start)
                .as_nanos()
    }
}

/// What a feed reads from.
#[derive(Debug, Clone)]
pub(super) enum FeedKey {
    /// A Core subscription.
    Subscription(u64),
    /// A pull on a consumer.
    Pull {
        stream: String,
        consumer: String,
        id: u64,
    },
}

/// A message as a stream stores it, and as a consumer delivers it.
#[derive(Debug, Clone)]
pub(super) struct Stored {
    pub(super) subject: Arc<str>,
    pub(super) headers: Headers,
    pub(super) payload: Bytes,
    pub(super) timestamp_ns: u128,
}

impl State {
    pub(super) fn new() -> Self {
        Self {
            subscriptions: Vec::new(),
            group_cursor: HashMap::new(),
            streams: BTreeMap::new(),
            history: Vec::new(),
            activity: 0,
            next_id: 0,
            clock: WallClock::new(),
        }
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    // ---- publishing -----------------------------------------------------------------------

    /// Publishes one message as the server takes it: an acknowledgement is acted on, a stream
    /// whose subjects match stores it, and every matching Core subscription (one member per
    /// queue group) gets it. Returns the stream and sequence it was stored under.
    pub(super) fn publish(
        &mut self,
        subject: Arc<str>,
        headers: Headers,
        payload: Bytes,
        now: Instant,
    ) -> Option<(String, u64)> {
        let message = RawMessage {
            subject,
            reply: None,
            headers,
            payload,
            jetstream: None,
        };
        match self.publish_message(message, now) {
            Storing::Stored(stream, seq) => Some((stream, seq)),
            _ => None,
        }
    }

    /// Publishes `message` (with its reply subject) and says what a stream did with it.
    pub(super) fn publish_message(&mut self, message: RawMessage, now: Instant) -> Storing {
        self.history.push(message.clone());
        self.activity += 1;
        if message.subject.starts_with(ACK_PREFIX) {
            self.acknowledge(&message.subject, &message.payload, now);
        }
        let stored = self.store(&message, now);
        self.route(&message);
        stored
    }

    pub(super) fn activity(&self) -> u64 {
        self.activity
    }

    pub(super) fn published(&self, pattern: &str) -> Vec<RawMessage> {
        self.history
            .iter()
            .filter(|m| matches(pattern, &m.subject))
            .cloned()
            .collect()
    }

    // ---- feeds ----------------------------------------------------------------------------

    /// A feed's reader took one message: it leaves the count of queued messages, and a pull
    /// has room for another.
    pub(super) fn taken(&mut self, key: &FeedKey) {
        self.activity += 1;
        match key {
            FeedKey::Subscription(id) => {
                if let Some(sub) = self.subscriptions.iter_mut().find(|s| s.id == *id) {
                    sub.queued = sub.queued.saturating_sub(1);
                }
            }
            FeedKey::Pull {
                stream,
                consumer,
                id,
            } => {
                if let Some(pull) = self
                    .streams
                    .get_mut(stream)
                    .and_then(|s| s.consumers.get_mut(consumer))
                    .and_then(|c| c.pulls.iter_mut().find(|p| p.id == *id))
                {
                    pull.buffered = pull.buffered.saturating_sub(1);
                }
                let stream = stream.clone();
                self.pump_stream(&stream);
            }
        }
    }

    /// Stops a feed: no new message goes to it (its sender is dropped, so its reader ends after
    /// the messages already queued).
    pub(super) fn stop(&mut self, key: &FeedKey) {
        self.activity += 1;
        match key {
            FeedKey::Subscription(id) => self.subscriptions.retain(|s| s.id != *id),
            FeedKey::Pull {
                stream,
                consumer,
                id,
            } => {
                if let Some(s) = self.streams.get_mut(stream) {
                    let now_unused = s.consumers.get_mut(consumer).is_some_and(|c| {
                        c.pulls.retain(|p| p.id != *id);
                        c.pulls.is_empty() && !c.durable
                    });
                    // An ephemeral consumer goes away with its last reader.
                    if now_unused {
                        s.consumers.remove(consumer);
                    }
                }
            }
        }
    }

    /// Messages handed to a reader and not yet taken by it, plus deliveries handed out and not
    /// yet settled.
    pub(super) fn in_flight(&self) -> usize {
        let core: usize = self.subscriptions.iter().map(|s| s.queued).sum();
        let out = self
            .streams
            .values()
            .flat_map(|s| s.consumers.values())
            .flat_map(|c| c.pending.values())
            .filter(|p| matches!(p.state, PendingState::Out { .. }))
            .count();
        core + out
    }
}
