//! NATS emulated inside the process, for tests: the [`Transport`](super::Transport) behind
//! `testing::TestApp`.
//!
//! [`InProcessNats`] follows the server's rules closely enough that the unchanged runtime
//! (sources, dispatch, settlement, executor, copies, dead letters) runs on it:
//!
//! | what | how the emulation behaves |
//! | --- | --- |
//! | Core publish | every matching subscription gets it (`*` one token, `>` the rest); one member per queue group, in turn; no subscriber, and it is gone |
//! | stream | stores every publish to one of its subjects, and Core subscribers still get it |
//! | pull consumer | durable by name, else ephemeral; deliver policy, filter subject, ack_wait, max_ack_pending; delivers a redelivery first, then new messages in stream order |
//! | delivery | reply subject `$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<ts>.<pending>` |
//! | `+ACK` (`+NXT`) | finished |
//! | `-NAK` | delivered again at once, delivered + 1, same stream sequence |
//! | `-NAK {"delay": ns}` | held for the delay, then delivered again, delivered + 1 |
//! | `+TERM` | never delivered again |
//! | `+WPI` | ack_wait starts over |
//! | no settlement by ack_wait | delivered again, delivered + 1 |
//!
//! Every deadline is on tokio's clock, so under `#[tokio::test(start_paused = true)]` a 30 s
//! delay passes as soon as nothing else can run.
//!
//! This file holds the handle and its transport methods; `state/` the server's state and
//! rules, `feed.rs` how the runtime reads and stops a subscription or pull (and the timer
//! driver), `checks.rs` what is refused before anything happens, `kv.rs` key-value buckets
//! (and the `KeyValue` methods), `facts.rs` what a test reads back, `direct.rs` what a test
//! does besides (create, delete and fetch from a consumer).

mod checks;
mod direct;
mod facts;
mod feed;
mod kv;
mod state;
#[cfg(test)]
mod tests;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use ruststream::Headers;
use tokio::sync::Notify;
use tokio::sync::mpsc::{self, UnboundedReceiver};
use tokio::task::JoinHandle;
use tokio::time::Instant;

#[cfg(feature = "testing")]
pub use self::checks::MAX_PAYLOAD;
use self::checks::{check_name, check_payload, check_subject};
pub use self::facts::{ConsumerFacts, StoredMessage, StreamLimits};
use self::feed::{Feed, Stop, drive};
use self::state::{FeedKey, State};
use super::{
    ConsumerSpec, CorePubSub, JetStreamPublish, MessageStream, PullConsumer, RawMessage, StoredAck,
    StreamAdmin, StreamChanges, StreamDeclaration, StreamSpec, TransportError, TransportErrorKind,
    Unsubscribe,
};

/// A NATS server (Core and JetStream) emulated inside the process.
///
/// A cheap handle: clones share one server. Use it as a [`Transport`](super::Transport) (for
/// `testing::TestApp`, or directly), and ask it what a test would ask a real server:
/// [`consumer_info`](Self::consumer_info), [`stream_messages`](Self::stream_messages),
/// [`published`](Self::published).
///
/// ```
/// use ruststream::Headers;
/// use ruststream_nats::testing::InProcessNats;
/// use ruststream_nats::transport::{JetStreamPublish, StreamAdmin, StreamSpec};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let nats = InProcessNats::new();
/// nats.declare_stream(StreamSpec {
///     name: "PAYMENTS".into(),
///     subjects: vec!["payments.>".into()],
/// })
/// .await?;
/// let seq = nats
///     .publish_stored("payments.authorized".into(), Headers::new(), "{}".into())
///     .await?;
/// assert_eq!(seq, 1);
/// assert_eq!(nats.stream_messages("PAYMENTS").len(), 1);
/// assert_eq!(nats.published("payments.*").len(), 1);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct InProcessNats {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// Wakes the timer driver when a deadline may have moved.
    wake: Arc<Notify>,
    driver: Mutex<Option<JoinHandle<()>>>,
    /// The key-value buckets.
    kv: kv::Buckets,
}

impl std::fmt::Debug for InProcessNats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InProcessNats")
            .field("streams", &self.stream_names())
            .field("activity", &self.activity())
            .finish_non_exhaustive()
    }
}

impl Default for InProcessNats {
    fn default() -> Self {
        Self::new()
    }
}

impl InProcessNats {
    /// An empty server: no subscription, no stream.
    pub fn new() -> Self {
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State::new()),
                wake: Arc::new(Notify::new()),
                driver: Mutex::new(None),
                kv: kv::Buckets::default(),
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.shared.lock()
    }

    /// A consumer's counters, as `consumer info` reports them; `None` without such a stream or
    /// consumer.
    pub fn consumer_info(&self, stream: &str, consumer: &str) -> Option<ConsumerFacts> {
        self.state().consumer_info(stream, consumer)
    }

    /// The names of the consumers of `stream`.
    pub fn consumer_names(&self, stream: &str) -> Vec<String> {
        self.state().consumer_names(stream)
    }

    /// Every message `stream` stores, in sequence order; empty without such a stream.
    pub fn stream_messages(&self, stream: &str) -> Vec<StoredMessage> {
        self.state().stream_messages(stream)
    }

    /// The names of every stream.
    pub fn stream_names(&self) -> Vec<String> {
        self.state().stream_names()
    }

    /// Sets the limits of `stream` (most messages, discard policy, duplicate window); false
    /// without such a stream.
    pub fn set_stream_limits(&self, stream: &str, limits: StreamLimits) -> bool {
        self.state().set_limits(stream, limits)
    }

    /// The limits of `stream`; `None` without such a stream.
    pub fn stream_limits(&self, stream: &str) -> Option<StreamLimits> {
        self.state().stream_limits(stream)
    }

    /// The subjects `stream` stores; `None` without such a stream.
    pub fn stream_subjects(&self, stream: &str) -> Option<Vec<String>> {
        self.state().stream_subjects(stream)
    }

    /// Every message published to a subject `subject` matches (a subject or a pattern), in the
    /// order the server saw them, whether or not anyone was subscribed: what a subscriber to
    /// `subject` from the start would have recorded. Acknowledgements are publishes too, on
    /// `$JS.ACK.>`. A stored publish refused with `NoStream` reached no one and is not here.
    pub fn published(&self, subject: &str) -> Vec<RawMessage> {
        self.state().published(subject)
    }

    /// The acknowledgements sent for deliveries of `consumer` on `stream`, as their wire forms
    /// (`+ACK`, `-NAK`, `-NAK {"delay": 30000000000}`, `+TERM`), in order.
    pub fn acknowledgements(&self, stream: &str, consumer: &str) -> Vec<String> {
        self.published(&format!("$JS.ACK.{stream}.{consumer}.>"))
            .into_iter()
            .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
            .collect()
    }

    /// The earliest time something is due: an ack_wait running out or a `-NAK` delay ending.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.state().next_deadline()
    }

    /// Messages in flight: handed to a subscription or a pull and not read yet, or delivered
    /// from a consumer and not settled yet.
    pub fn in_flight(&self) -> usize {
        self.state().in_flight()
    }

    /// A counter that every change moves on: a publish, a delivery, a settlement, a timer, a
    /// message a reader took. Equal readings mean nothing happened in between.
    pub fn activity(&self) -> u64 {
        self.state().activity()
    }

    /// Makes sure the timer driver runs on the current runtime.
    fn ensure_driver(&self) {
        let mut driver = self
            .shared
            .driver
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if driver.as_ref().is_some_and(|d| !d.is_finished()) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let shared = Arc::downgrade(&self.shared);
        let wake = Arc::clone(&self.shared.wake);
        *driver = Some(runtime.spawn(drive(shared, wake)));
    }

    /// Tells the driver a deadline may have moved.
    fn poke(&self) {
        self.shared.wake.notify_one();
    }

    fn feed(&self, rx: UnboundedReceiver<RawMessage>, key: FeedKey) -> MessageStream {
        Box::pin(Feed {
            rx,
            shared: Arc::clone(&self.shared),
            key,
        })
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl CorePubSub for InProcessNats {
    fn publish(
        &self,
        subject: Arc<str>,
        headers: Headers,
        payload: Bytes,
    ) -> BoxFuture<'_, Result<(), TransportError>> {
        Box::pin(async move {
            check_subject(&subject, false)?;
            check_payload(&subject, &headers, &payload)?;
            self.state()
                .publish(subject, headers, payload, Instant::now());
            self.poke();
            Ok(())
        })
    }

    fn request(
        &self,
        subject: Arc<str>,
        headers: Headers,
        payload: Bytes,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<RawMessage, TransportError>> {
        Box::pin(async move {
            check_subject(&subject, false)?;
            check_payload(&subject, &headers, &payload)?;
            let (tx, mut rx) = mpsc::unbounded_channel();
            let id = {
                let mut state = self.state();
                if !state.has_subscriber(&subject) {
                    return Err(TransportError::new(
                        TransportErrorKind::NoResponders,
                        format!("the request to `{subject}` failed (nobody listens on it)"),
                    ));
                }
                let inbox = state.new_inbox();
                let id = state.subscribe(inbox.clone(), None, tx);
                let message = RawMessage {
                    subject: Arc::clone(&subject),
                    reply: Some(inbox.into()),
                    headers,
                    payload,
                    jetstream: None,
                };
                state.publish_message(message, Instant::now());
                id
            };
            self.poke();
            let response = tokio::time::timeout(timeout, rx.recv()).await;
            self.state().stop(&FeedKey::Subscription(id));
            match response {
                Ok(Some(message)) => Ok(message),
                Ok(None) => Err(TransportError::new(
                    TransportErrorKind::Other,
                    format!("the request to `{subject}` failed: the server is gone"),
                )),
                Err(_) => Err(TransportError::new(
                    TransportErrorKind::TimedOut,
                    format!("the request to `{subject}` failed (no response within {timeout:?})"),
                )),
            }
        })
    }

    fn flush(&self) -> BoxFuture<'_, Result<(), TransportError>> {
        Box::pin(async { Ok(()) })
    }

    fn subscribe(
        &self,
        subject: String,
        queue_group: Option<String>,
    ) -> BoxFuture<'_, Result<(MessageStream, Box<dyn Unsubscribe>), TransportError>> {
        Box::pin(async move {
            check_subject(&subject, true)?;
            let (tx, rx) = mpsc::unbounded_channel();
            let id = self.state().subscribe(subject, queue_group, tx);
            let key = FeedKey::Subscription(id);
            let stop: Box<dyn Unsubscribe> = Box::new(Stop {
                shared: Arc::clone(&self.shared),
                key: key.clone(),
            });
            Ok((self.feed(rx, key), stop))
        })
    }
}

impl JetStreamPublish for InProcessNats {
    fn publish_stored(
        &self,
        subject: Arc<str>,
        headers: Headers,
        payload: Bytes,
    ) -> BoxFuture<'_, Result<u64, TransportError>> {
        Box::pin(async move {
            check_subject(&subject, false)?;
            check_payload(&subject, &headers, &payload)?;
            let stored = self
                .state()
                .publish_stored(subject, headers, payload, Instant::now());
            self.poke();
            stored
        })
    }

    fn publish_confirmed(
        &self,
        subject: Arc<str>,
        headers: Headers,
        payload: Bytes,
    ) -> BoxFuture<'_, Result<StoredAck, TransportError>> {
        Box::pin(async move {
            check_subject(&subject, false)?;
            check_payload(&subject, &headers, &payload)?;
            let stored = self
                .state()
                .publish_confirmed(subject, headers, payload, Instant::now());
            self.poke();
            stored
        })
    }
}

impl StreamAdmin for InProcessNats {
    fn streams(&self) -> BoxFuture<'_, Result<Vec<StreamSpec>, TransportError>> {
        Box::pin(async move { Ok(self.state().streams()) })
    }

    fn stream_exists(&self, name: &str) -> BoxFuture<'_, Result<bool, TransportError>> {
        let name = name.to_owned();
        Box::pin(async move { Ok(self.state().stream_exists(&name)) })
    }

    fn stream_by_subject(
        &self,
        subject: &str,
    ) -> BoxFuture<'_, Result<Option<String>, TransportError>> {
        let subject = subject.to_owned();
        Box::pin(async move {
            check_subject(&subject, true)?;
            Ok(self.state().stream_storing(&subject))
        })
    }

    fn declare_stream(&self, spec: StreamSpec) -> BoxFuture<'_, Result<(), TransportError>> {
        Box::pin(async move { self.declare_stream_with(spec.into()).await.map(drop) })
    }

    fn declare_stream_with(
        &self,
        spec: StreamDeclaration,
    ) -> BoxFuture<'_, Result<StreamChanges, TransportError>> {
        Box::pin(async move {
            check_name("stream", &spec.name)?;
            if spec.subjects.is_empty() {
                return Err(TransportError::new(
                    TransportErrorKind::Invalid,
                    format!("stream `{}` names no subject to store", spec.name),
                ));
            }
            for subject in &spec.subjects {
                check_subject(subject, true)?;
            }
            self.state().declare_stream(spec)
        })
    }
}

impl PullConsumer for InProcessNats {
    fn consume(
        &self,
        spec: ConsumerSpec,
    ) -> BoxFuture<'_, Result<(MessageStream, Box<dyn Unsubscribe>), TransportError>> {
        Box::pin(async move {
            check_name("stream", &spec.stream)?;
            if let Some(durable) = &spec.durable {
                check_name("consumer", durable)?;
            }
            check_subject(&spec.filter_subject, true)?;
            let (tx, rx) = mpsc::unbounded_channel();
            let (consumer, id) = self.state().consume(&spec, tx)?;
            self.ensure_driver();
            self.poke();
            let key = FeedKey::Pull {
                stream: spec.stream.clone(),
                consumer,
                id,
            };
            let stop: Box<dyn Unsubscribe> = Box::new(Stop {
                shared: Arc::clone(&self.shared),
                key: key.clone(),
            });
            Ok((self.feed(rx, key), stop))
        })
    }
}
