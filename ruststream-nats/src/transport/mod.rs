//! The boundary between the NATS runtime and the wire.
//!
//! Everything above it (sources, dispatch, settlement, copies, dead letters, drain) is the same
//! code whether the bytes go to a real nats-server through async-nats ([`nats::NatsTransport`])
//! or to the NATS emulated in the process for tests (`in_process`, feature `testing`). The
//! boundary is one trait a capability (`capabilities.rs`: [`CorePubSub`], [`JetStreamPublish`],
//! [`StreamAdmin`], [`PullConsumer`], [`KeyValue`]); [`Transport`] is all of them. JetStream
//! acknowledgements are plain publishes of the wire form (`+ACK`, `-NAK`, `-NAK {"delay": ns}`,
//! `+TERM`) to the delivery's reply subject
//! (`$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<ts>.<pending>`),
//! exactly as on a real server, so both transports parse and settle the same way.

mod capabilities;
mod declaration;
mod error;
#[cfg(feature = "embedded")]
pub(crate) mod in_process;
mod message;
pub mod nats;

pub use capabilities::{
    CorePubSub, JetStreamPublish, KeyValue, KvEntry, PullConsumer, StreamAdmin,
};
pub(crate) use declaration::{Limits, add_subjects};
pub use declaration::{StreamChanges, StreamDeclaration};
pub use error::{Refusal, StoredAck, TransportError, TransportErrorKind};
pub use message::{RawMessage, ReplySubject};

/// The header JetStream deduplicates on (`crate::publish::MSG_ID_HEADER` re-exports it): the
/// transport adds it to a stored output, and the in-process NATS's streams read it.
pub const MSG_ID_HEADER: &str = "Nats-Msg-Id";

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::BoxStream;

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

/// Which messages of the stream a new consumer starts from. Defined beside [`ConsumerSpec`],
/// which the transports read; `ruststream_nats::DeliverPolicy` is the same type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum DeliverPolicy {
    /// Every message the stream holds (the default).
    #[default]
    All,
    /// Only messages stored after the consumer was created.
    New,
    /// The last message, then new ones.
    Last,
    /// The last message of each subject, then new ones.
    LastPerSubject,
    /// From this stream sequence on.
    ByStartSequence(u64),
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

/// The whole wire, as the NATS runtime uses it: every capability of one connection. The
/// runtime holds one handle for all of them; a part that needs one capability alone takes
/// that trait ([`KeyValue`] for the idempotency store, say). Implemented for every type that
/// implements the capabilities: a transport implements those, never this.
pub trait Transport: CorePubSub + JetStreamPublish + StreamAdmin + PullConsumer + KeyValue {}

impl<T: CorePubSub + JetStreamPublish + StreamAdmin + PullConsumer + KeyValue> Transport for T {}

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
