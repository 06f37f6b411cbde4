//! What a transport can do, one trait a capability: Core publish and subscribe
//! ([`CorePubSub`]), JetStream publishes a stream confirms ([`JetStreamPublish`]), streams
//! ([`StreamAdmin`]), pull consumers and their settlements ([`PullConsumer`]), key-value
//! buckets ([`KeyValue`]). A new capability is a trait of its own here, not a method more on
//! every transport; [`Transport`](super::Transport) is all of them, what one connection offers.

use std::sync::Arc;
use std::time::Duration;

use crate::transport::DeliverPolicy;
use bytes::Bytes;
use futures::future::BoxFuture;
use ruststream::Headers;

use super::{
    ConsumerSpec, MSG_ID_HEADER, RawMessage, ReplySubject, StoredAck, StreamChanges,
    StreamDeclaration, StreamPlace, StreamSpec, Subscription, Target, TransportError,
    TransportErrorKind,
};

/// Core NATS: publishes, requests and subscriptions.
pub trait CorePubSub: Send + Sync + 'static {
    /// Publishes a Core message (also how acknowledgements are sent, by default: see
    /// [`PullConsumer::acknowledge`]).
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
    /// The default publishes each with [`CorePubSub::publish`].
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
}

/// JetStream publishes: to a stream, waiting for its acknowledgement.
pub trait JetStreamPublish: Send + Sync + 'static {
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
    /// The default asks [`JetStreamPublish::publish_stored`] and cannot tell the stream's name
    /// nor a duplicate.
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

    /// [`JetStreamPublish::publish_confirmed`] with the headers lent: a transport that converts
    /// them to a form of its own reads them in place, and the caller keeps them (for a Core
    /// publish when no stream stores the subject after all). `msg_id`, when given, is sent as
    /// the message's `Nats-Msg-Id` (`headers` then has none): the transport adds it to its own
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
}

/// Streams: which exist, which stores a subject, and declaring them.
pub trait StreamAdmin: Send + Sync + 'static {
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
}

/// JetStream pull consumers: opening and resuming them, and settling what they deliver.
/// Settlements are publishes to the delivery's reply subject, hence [`CorePubSub`] beneath.
pub trait PullConsumer: CorePubSub {
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
    /// default publishes it as [`CorePubSub::publish`] does.
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
}

/// Key-value buckets. Every method's default answers that the transport has none (an error).
pub trait KeyValue: Send + Sync + 'static {
    /// Makes sure key-value bucket `bucket` exists, keeping each key's last value for
    /// `max_age`: creates it when missing, sets its `max_age` when it differs.
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
