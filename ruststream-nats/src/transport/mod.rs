//! The boundary between the NATS runtime and the wire.
//!
//! Everything above this trait (sources, dispatch, settlement, copies, dead letters, drain) is
//! the same code whether the bytes go to a real nats-server through async-nats
//! ([`nats::NatsTransport`]) or to the NATS emulated in the process for tests
//! (`in_process`, feature `testing`). JetStream acknowledgements are plain publishes of the
//! wire form (`+ACK`, `-NAK`, `-NAK {"delay": ns}`, `+TERM`) to the delivery's reply subject
//! (`$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<ts>.<pending>`),
//! exactly as on a real server, so both transports parse and settle the same way.

mod declaration;
mod error;
#[cfg(feature = "embedded")]
pub(crate) mod in_process;
mod message;
pub mod nats;

pub(crate) use declaration::{Limits, add_subjects};
pub use declaration::{StreamChanges, StreamDeclaration};
pub use error::{Refusal, StoredAck, TransportError, TransportErrorKind};
pub use message::{RawMessage, ReplySubject};

/// The header JetStream deduplicates on (`crate::publish::MSG_ID_HEADER` re-exports it): the
/// transport adds it to a stored output, and the in-process NATS's streams read it.
pub const MSG_ID_HEADER: &str = "Nats-Msg-Id";

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use ruststream::Headers;

use ruststream::registration::DeliverPolicy;

/// A stream to declare at startup (opt-in: without a declaration the crate declares nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSpec {
    /// The stream's name.
    pub name: String,
    /// The subjects it stores.
    pub subjects: Vec<String>,
}

/// Which stream a registration reads, as its consumer is opened: a stream deleted and created
/// again under the same name is another one, whose sequences start over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamPlace {
    /// When the stream was created, as the server reports it: what tells two streams of one
    /// name apart.
    pub created: String,
    /// The lowest sequence the stream still holds: the messages below it are gone for good.
    pub first_sequence: u64,
    /// How many messages the stream holds now.
    pub messages: u64,
}

/// The consumer a `JetStreamSubject` reads through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerSpec {
    /// The stream.
    pub stream: String,
    /// The durable name; `None` for an ephemeral consumer.
    pub durable: Option<String>,
    /// The filter subject.
    pub filter_subject: String,
    /// How long the server waits for a settlement.
    pub ack_wait: Duration,
    /// How many deliveries may wait for a settlement at once.
    pub max_ack_pending: Option<i64>,
    /// Where a new consumer starts.
    pub deliver_policy: DeliverPolicy,
    /// A batch handler's batch size, or how many single messages are handled at once: how many
    /// messages the client holds ahead of the handlers at first.
    pub batch: usize,
    /// How long one pull waits on the server.
    pub expires: Duration,
}

/// A stream of messages from a subscription or a pull consumer. It ends when the subscription
/// is closed (drain) or the connection is gone for good.
pub type MessageStream = BoxStream<'static, Result<RawMessage, TransportError>>;

/// An open subscription or pull: its messages, and how to stop them.
pub type Subscription = (MessageStream, Box<dyn Unsubscribe>);

/// The subject of a message a handling publishes: shared with the runtime, or known at compile
/// time (an `#[outgoing]` subject without placeholders), which a transport may send without
/// copying it.
#[derive(Debug, Clone)]
pub enum Target {
    /// A subject made at run time (a filled template, a reply inbox, `ctx.publish_to`).
    Shared(Arc<str>),
    /// A subject written in the program.
    Static(&'static str),
}

impl Target {
    /// The subject as a shared string (a copy of a static one).
    pub fn into_shared(self) -> Arc<str> {
        match self {
            Self::Shared(subject) => subject,
            Self::Static(subject) => Arc::from(subject),
        }
    }
}

impl std::ops::Deref for Target {
    type Target = str;

    fn deref(&self) -> &str {
        match self {
            Self::Shared(subject) => subject,
            Self::Static(subject) => subject,
        }
    }
}

impl From<std::borrow::Cow<'static, str>> for Target {
    fn from(subject: std::borrow::Cow<'static, str>) -> Self {
        match subject {
            std::borrow::Cow::Borrowed(subject) => Self::Static(subject),
            std::borrow::Cow::Owned(subject) => Self::Shared(Arc::from(subject)),
        }
    }
}

/// The wire, as the NATS runtime uses it.
pub trait Transport: Send + Sync + 'static {
    /// Publishes a Core message (also how acknowledgements are sent, by default: see
    /// [`Transport::acknowledge`]).
    fn publish(
        &self,
        subject: Arc<str>,
        headers: Headers,
        payload: Bytes,
    ) -> BoxFuture<'_, Result<(), TransportError>>;

    /// Core-publishes one message, the same headers and payload, to each of `subjects` in
    /// turn: a handling's output, or the response to a request and the output it answers
    /// with. The headers are lent, so that a transport with a form of its own converts them
    /// once for all the subjects. Stops at the first subject that fails: its index and the
    /// error (the subjects before it were sent). Headers the transport cannot carry fail
    /// before anything is sent, at the last index: the output, which a response goes before.
    /// The default publishes each with [`Transport::publish`].
    fn publish_each<'a>(
        &'a self,
        subjects: &'a [Target],
        headers: &'a Headers,
        payload: Bytes,
    ) -> BoxFuture<'a, Result<(), (usize, TransportError)>> {
        Box::pin(async move {
            for (index, subject) in subjects.iter().enumerate() {
                self.publish(
                    subject.clone().into_shared(),
                    headers.clone(),
                    payload.clone(),
                )
                .await
                .map_err(|err| (index, err))?;
            }
            Ok(())
        })
    }

    /// Whether a publish only hands the message to another task, which writes it to the
    /// connection (async-nats's connection task): the message is on the wire only once the
    /// publishing task lets that task run. The publisher then yields once after a response
    /// to a request, so that the response is written before the runtime's work after the
    /// handler (the settlement, the metrics, the next message). `false` by default: the
    /// in-process NATS delivers a message as it is published.
    fn hands_writes_to_a_task(&self) -> bool {
        false
    }

    /// Publishes to a stream and waits for the stream's acknowledgement; returns the stream
    /// sequence. `NoStream` when no stream stores the subject.
    fn publish_stored(
        &self,
        subject: Arc<str>,
        headers: Headers,
        payload: Bytes,
    ) -> BoxFuture<'_, Result<u64, TransportError>>;

    /// Publishes to a stream and returns the stream's acknowledgement: which stream, which
    /// sequence, whether it was a duplicate. `NoStream` when no stream stores the subject,
    /// `Refused` when the stream refused it, `TimedOut` when it did not answer.
    ///
    /// The default asks [`Transport::publish_stored`] and cannot tell the stream's name nor a
    /// duplicate.
    fn publish_confirmed(
        &self,
        subject: Arc<str>,
        headers: Headers,
        payload: Bytes,
    ) -> BoxFuture<'_, Result<StoredAck, TransportError>> {
        Box::pin(async move {
            let sequence = self.publish_stored(subject, headers, payload).await?;
            Ok(StoredAck {
                stream: String::new(),
                sequence,
                duplicate: false,
            })
        })
    }

    /// [`Transport::publish_confirmed`] with the headers lent: a transport that converts them
    /// to a form of its own reads them in place, and the caller keeps them (for a Core publish
    /// when no stream stores the subject after all). `msg_id`, when given, is sent as the
    /// message's `Nats-Msg-Id` (`headers` then has none): the transport adds it to its own
    /// form of the headers, converted once. The default clones the headers and adds it.
    fn publish_confirmed_lent(
        &self,
        subject: Target,
        headers: &Headers,
        msg_id: Option<String>,
        payload: Bytes,
    ) -> BoxFuture<'_, Result<StoredAck, TransportError>> {
        let mut headers = headers.clone();
        if let Some(id) = msg_id {
            headers.insert(MSG_ID_HEADER, id);
        }
        self.publish_confirmed(subject.into_shared(), headers, payload)
    }

    /// Every stream and the subjects it stores: how the runtime learns, once at startup and
    /// again from time to time, which outputs are stored. The default does not know (an
    /// error), and every output is then a Core publish.
    fn streams(&self) -> BoxFuture<'_, Result<Vec<StreamSpec>, TransportError>> {
        Box::pin(async {
            Err(TransportError::new(
                TransportErrorKind::Other,
                "this transport cannot list streams",
            ))
        })
    }

    /// Sends a Core request and waits up to `timeout` for the first response.
    /// `NoResponders` at once when nobody listens, `TimedOut` when nobody answered in time.
    fn request(
        &self,
        subject: Arc<str>,
        headers: Headers,
        payload: Bytes,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<RawMessage, TransportError>> {
        let _ = (headers, payload, timeout);
        Box::pin(async move {
            Err(TransportError::new(
                TransportErrorKind::Other,
                format!("this transport cannot send a request to `{subject}`"),
            ))
        })
    }

    /// Waits until everything published so far reached the server.
    fn flush(&self) -> BoxFuture<'_, Result<(), TransportError>>;

    /// Subscribes to a Core subject or pattern, in a queue group when one is given.
    fn subscribe(
        &self,
        subject: String,
        queue_group: Option<String>,
    ) -> BoxFuture<'_, Result<Subscription, TransportError>>;

    /// Whether stream `name` exists.
    fn stream_exists(&self, name: &str) -> BoxFuture<'_, Result<bool, TransportError>>;

    /// The stream that stores `subject`, if any. A dead letter goes there with a stored publish
    /// (confirmed by the stream), else as a Core publish: asking first keeps a Core subscriber
    /// on the subject from being mistaken for a stream that never answers.
    ///
    /// The default does not know (an error), and the runtime then tries a stored publish and
    /// falls back to Core on `NoStream`.
    fn stream_by_subject(
        &self,
        subject: &str,
    ) -> BoxFuture<'_, Result<Option<String>, TransportError>> {
        let _ = subject;
        Box::pin(async {
            Err(TransportError::new(
                TransportErrorKind::Other,
                "this transport cannot tell which stream stores a subject",
            ))
        })
    }

    /// Creates stream `spec`, or adds the subjects it lacks to the existing one (never
    /// removing one).
    fn declare_stream(&self, spec: StreamSpec) -> BoxFuture<'_, Result<(), TransportError>>;

    /// [`declare_stream`](Self::declare_stream) with the declaration's replicas and limits:
    /// created with them, or, when the stream exists, its subjects added and each limit below
    /// the declared one raised (never tightened); returns what changed on an existing stream.
    ///
    /// The default declares the subjects and refuses a declaration with limits.
    fn declare_stream_with(
        &self,
        declaration: StreamDeclaration,
    ) -> BoxFuture<'_, Result<StreamChanges, TransportError>> {
        Box::pin(async move {
            if declaration.has_limits() {
                return Err(TransportError::new(
                    TransportErrorKind::Other,
                    format!(
                        "this transport cannot declare stream `{}` with replicas or limits",
                        declaration.name
                    ),
                ));
            }
            self.declare_stream(declaration.spec()).await?;
            Ok(StreamChanges::default())
        })
    }

    /// Gets, creates, or updates (when mutable settings changed) the consumer, and starts
    /// pulling from it.
    fn consume(&self, spec: ConsumerSpec) -> BoxFuture<'_, Result<Subscription, TransportError>>;

    /// Publishes a settlement to a JetStream acknowledgement subject as a request, and waits
    /// for the server's answer: it acted on it ("AckAck").
    ///
    /// The default publishes and flushes (a transport without requests cannot know more).
    fn settle_confirmed(
        &self,
        subject: Arc<str>,
        payload: Bytes,
    ) -> BoxFuture<'_, Result<(), TransportError>> {
        Box::pin(async move {
            self.publish(subject, Headers::new(), payload).await?;
            self.flush().await
        })
    }

    /// Sends a JetStream acknowledgement (`payload`: `+ACK`, `-NAK`, `+WPI`, ...) to
    /// `subject`, the reply subject of the delivery, as it came in its [`RawMessage`]. The
    /// default publishes it as [`Transport::publish`] does.
    fn acknowledge(
        &self,
        subject: &ReplySubject,
        payload: Bytes,
    ) -> BoxFuture<'_, Result<(), TransportError>> {
        self.publish(subject.to_shared(), Headers::new(), payload)
    }

    /// Which stream `stream` is now ([`StreamPlace`]); `None` when the transport cannot tell
    /// (the default), and then a consumer created again trusts [`resume`](Self::resume)'s own
    /// look at the stream.
    fn stream_place(
        &self,
        stream: String,
    ) -> BoxFuture<'_, Result<Option<StreamPlace>, TransportError>> {
        let _ = stream;
        Box::pin(async { Ok(None) })
    }

    /// [`consume`](Self::consume) again after the pull ended (the consumer vanished): a
    /// consumer that has to be created starts at `start_sequence`, where the registration
    /// stood, and an existing durable goes on from its own position.
    ///
    /// The default starts at `start_sequence`. A transport that can read the stream should not
    /// when the stream holds fewer messages than that (it was created again, and its sequences
    /// started over): it then starts where `spec` says.
    fn resume(
        &self,
        spec: ConsumerSpec,
        start_sequence: u64,
    ) -> BoxFuture<'_, Result<Subscription, TransportError>> {
        let spec = ConsumerSpec {
            deliver_policy: DeliverPolicy::ByStartSequence(start_sequence),
            ..spec
        };
        self.consume(spec)
    }

    /// Makes sure key-value bucket `bucket` exists, keeping each key's last value for
    /// `max_age`: creates it when missing, sets its `max_age` when it differs. The default
    /// cannot (an error).
    fn kv_bucket(
        &self,
        bucket: String,
        max_age: Duration,
    ) -> BoxFuture<'_, Result<(), TransportError>> {
        let _ = max_age;
        Box::pin(async move { Err(no_kv(&bucket)) })
    }

    /// The value key `key` holds in `bucket`, with its revision and age; `None` when it holds
    /// none (never written, deleted, or older than the bucket's `max_age`).
    fn kv_get(
        &self,
        bucket: String,
        key: String,
    ) -> BoxFuture<'_, Result<Option<KvEntry>, TransportError>> {
        let _ = key;
        Box::pin(async move { Err(no_kv(&bucket)) })
    }

    /// Writes `value` to `key` only when it holds none; its revision, or `None` when the key
    /// holds a value (someone else wrote it first).
    fn kv_create(
        &self,
        bucket: String,
        key: String,
        value: Bytes,
    ) -> BoxFuture<'_, Result<Option<u64>, TransportError>> {
        let _ = (key, value);
        Box::pin(async move { Err(no_kv(&bucket)) })
    }

    /// Writes `value` to `key` only when its last revision is `revision`; the new revision, or
    /// `None` when the key changed since.
    fn kv_update(
        &self,
        bucket: String,
        key: String,
        value: Bytes,
        revision: u64,
    ) -> BoxFuture<'_, Result<Option<u64>, TransportError>> {
        let _ = (key, value, revision);
        Box::pin(async move { Err(no_kv(&bucket)) })
    }

    /// Deletes the value of `key`.
    fn kv_delete(&self, bucket: String, key: String) -> BoxFuture<'_, Result<(), TransportError>> {
        let _ = key;
        Box::pin(async move { Err(no_kv(&bucket)) })
    }
}

/// The value a key of a key-value bucket holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvEntry {
    /// The value.
    pub value: Bytes,
    /// Its revision (the bucket's stream sequence on NATS).
    pub revision: u64,
    /// How long ago it was written, by the server's clock as this process reads it.
    pub age: Duration,
}

fn no_kv(bucket: &str) -> TransportError {
    TransportError::new(
        TransportErrorKind::Other,
        format!("this transport has no key-value buckets (bucket `{bucket}`)"),
    )
}

/// Stops a subscription or a pull: once it resolves, the stream takes no new messages (the
/// async-nats transport at its next read), hands over what the client already holds, then
/// ends. Messages handed over stay valid (they can still be settled).
pub trait Unsubscribe: Send + Sync {
    /// Stops taking new messages.
    fn stop(&self) -> BoxFuture<'_, ()>;
}

/// Put into the app's [`Env`](ruststream::Env): every `NatsBroker` of the app uses this
/// transport instead of connecting to its URL. `testing::TestApp` puts the in-process NATS here.
#[derive(Clone)]
pub struct TransportOverride(pub Arc<dyn Transport>);

impl std::fmt::Debug for TransportOverride {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TransportOverride")
    }
}
