//! What a handler publishes (a `reply` value, a `Publisher<T>` output, `ctx.publish(..)`).
//!
//! A subject no stream stores is a Core publish on the app's connection. A subject a stream
//! stores is a JetStream publish that waits for the stream's acknowledgement: a refusal (limits
//! with `discard: new`, a failed expectation), a timeout or no responder while the server still
//! names a stream storing the subject (its node down, a leader election) is an error of kind
//! [`PublishErrorKind::NotStored`], which makes the input a `retry()`; a message too large is
//! [`PublishErrorKind::TooLarge`], permanent, and its input is not retried. Which subjects are
//! stored is learned from the server's stream list at startup, never asked per message. A
//! running app learns it again at once when the server announces that a stream was created,
//! updated or deleted ([`STREAM_ADVISORIES`]), and every [`RELEARN_AFTER`] in any case (a
//! connection not allowed to see the announcements); [`StreamWatch`] does both, in a task of
//! its own. A publisher no app runs (a `TestApp`'s client) relearns on a publish once the list
//! is [`RELEARN_AFTER`] old.
//!
//! A stored output of a JetStream input carries a `Nats-Msg-Id` derived from the input (its
//! stream, sequence and time of storing, the registration, and which output of the handling it
//! is): a
//! redelivered input publishes the same ids, and the stream's duplicate window drops the second
//! copies.
//!
//! `client.rs` holds [`NatsClient`] and [`StoredPublish`], the same publishing for code outside
//! a handler; `streams.rs` the list of stored subjects and its watcher; `errors.rs` what a failed
//! publish is (transient or permanent).

mod client;
mod errors;
mod streams;

pub(crate) use self::errors::stream_is_gone;
use self::errors::{broker_error, not_stored, refuse_invalid};
pub(crate) use self::streams::StreamWatch;
use self::streams::{StoredSubjects, learn};

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use ruststream::{
    EncodedOutput, Headers, Origin, OutboundMessage, Publish, PublishError, PublishErrorKind,
};

use crate::JetStreamInfo;
use crate::transport::{StoredAck, Target, Transport, TransportErrorKind};

/// The header JetStream deduplicates on.
pub use crate::transport::MSG_ID_HEADER;

/// How often a running app learns the list of streams again without being told of a change;
/// for a publisher no app runs, how old the list may get before a publish asks for it again
/// (in the background).
pub const RELEARN_AFTER: Duration = Duration::from_secs(30);

/// The subjects of the server's stream advisories, which make a running app learn the list again.
pub use crate::subject::STREAM_ADVISORIES;

/// The message id of output `origin.output` of handling a JetStream delivery:
/// `<stream>:<sequence>:<stored at>:<registration>:<output>`, where `<stored at>` is when the
/// input was stored (nanoseconds since the epoch, from its acknowledgement subject); `None` for
/// a Core delivery, which has no identity to derive one from.
///
/// Every delivery of one stored message derives the same id. The time tells apart the messages
/// of a stream deleted and created again, whose sequences start over: without it their outputs
/// would be dropped as duplicates of the first stream's within the duplicate window.
pub fn output_message_id(origin: &Origin<'_>) -> Option<String> {
    use std::fmt::Write as _;
    let info = origin.delivery.extension::<JetStreamInfo>()?;
    // Sized for the two names, up to 20 digits of sequence and of time and 4 of output, with
    // the colons: written without growing (each growth is a `realloc`).
    let mut id = String::with_capacity(info.stream.len() + origin.registration.len() + 49);
    // Writing to a `String` cannot fail.
    let _ = write!(
        id,
        "{}:{}:{}:{}:{}",
        info.stream, info.stream_sequence, info.timestamp, origin.registration, origin.output
    );
    Some(id)
}

/// [`MSG_ID_HEADER`] as a shared string, made once.
fn msg_id_name() -> Arc<str> {
    static NAME: std::sync::OnceLock<Arc<str>> = std::sync::OnceLock::new();
    Arc::clone(NAME.get_or_init(|| Arc::from(MSG_ID_HEADER)))
}

/// Marks a Core request that had nothing ready behind it as its registration took it (the
/// source's `behind`). Such a request's response is written before the handling goes on
/// ([`NatsPublisher`]'s `let_the_response_out`). A request with another message behind it is
/// not marked: its response goes out with the next ones', once the handler's task next waits,
/// and the task answers the backlog without a pause between requests.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AwaitedRequest;

/// Publishes a handler's messages through the transport.
#[derive(Clone)]
pub(crate) struct NatsPublisher {
    transport: Arc<dyn Transport>,
    stored: Arc<StoredSubjects>,
    /// The transport's
    /// [`hands_writes_to_a_task`](crate::transport::CorePubSub::hands_writes_to_a_task), asked
    /// once.
    yields_after_response: bool,
}

impl NatsPublisher {
    pub(crate) fn new(transport: Arc<dyn Transport>) -> Self {
        Self {
            yields_after_response: transport.hands_writes_to_a_task(),
            transport,
            stored: Arc::default(),
        }
    }

    /// Learns which subjects the streams store. Without an answer (JetStream disabled, say),
    /// every output stays a Core publish, as logged.
    pub(crate) async fn learn(&self) {
        self.stored.due();
        learn(&*self.transport, &self.stored).await;
    }

    /// The stream storing `subject`, as last learned.
    pub(crate) fn stream_of(&self, subject: &str) -> Option<Arc<str>> {
        self.stored.stream_of(subject)
    }

    /// What keeps this publisher's list of streams fresh while the app runs
    /// ([`StreamWatch::run`]): subscribed to the stream advisories here, before the list is
    /// first learned, so that a stream created in between is not missed. From now on no
    /// publish looks at the list's age.
    pub(crate) async fn watch_streams(&self) -> StreamWatch {
        let advisories = match self
            .transport
            .subscribe(STREAM_ADVISORIES.to_owned(), None)
            .await
        {
            Ok(advisories) => Some(advisories),
            Err(err) => {
                tracing::warn!(
                    %err,
                    every = ?RELEARN_AFTER,
                    "cannot subscribe to the stream advisories: a stream created or changed while the app runs is learned only at the next periodic look"
                );
                None
            }
        };
        self.stored.watched.store(true, Ordering::Release);
        StreamWatch {
            transport: self.transport.clone(),
            stored: Arc::clone(&self.stored),
            advisories,
        }
    }

    /// Learns the streams when never learned; relearns them in the background when the list
    /// is old. Nothing to do when a [`StreamWatch`] keeps the list fresh (a running app).
    async fn relearn_if_due(&self) {
        if self.stored.watched.load(Ordering::Acquire) {
            return;
        }
        match self.stored.due() {
            Some(false) => learn(&*self.transport, &self.stored).await,
            Some(true) => {
                let transport = Arc::clone(&self.transport);
                let stored = Arc::clone(&self.stored);
                tokio::spawn(async move { learn(&*transport, &stored).await });
            }
            None => {}
        }
    }

    /// Publishes `message`: confirmed by its stream when one stores the subject (with the
    /// message id derived from `origin`, when given), else a Core publish.
    pub(crate) async fn send(
        &self,
        message: OutboundMessage,
        origin: Option<Origin<'_>>,
    ) -> Result<Option<StoredAck>, PublishError> {
        let target = Target::Shared(message.subject);
        self.deliver(target, message.headers, message.payload, origin, None)
            .await
    }

    /// Publishes a message to `subject`, confirmed by its stream when one stores the subject
    /// (with the message id derived from `origin`, when given), else a Core publish; and when
    /// `inbox` is given, the same headers and payload to it as the response to a request
    /// (first when the output is a Core publish, after the confirmed output otherwise).
    async fn deliver(
        &self,
        subject: Target,
        mut headers: Headers,
        payload: Bytes,
        origin: Option<Origin<'_>>,
        inbox: Option<&Arc<str>>,
    ) -> Result<Option<StoredAck>, PublishError> {
        refuse_invalid(&subject, "publish")?;
        if let Some(inbox) = inbox {
            refuse_invalid(inbox, "publish")?;
        }
        self.relearn_if_due().await;
        let Some(stream) = self.stored.stream_of(&subject) else {
            // The response first: nothing can refuse a Core publish. One conversion of the
            // headers for both.
            let (both, one);
            let subjects: &[Target] = match inbox {
                Some(inbox) => {
                    both = [Target::Shared(Arc::clone(inbox)), subject];
                    &both
                }
                None => {
                    one = [subject];
                    &one
                }
            };
            self.core(subjects, &headers, payload).await?;
            if inbox.is_some() {
                self.let_the_response_out(origin.as_ref()).await;
            }
            return Ok(None);
        };
        // The response goes after the confirmed output, without its message id.
        let response = inbox.map(|inbox| (Target::Shared(Arc::clone(inbox)), headers.clone()));
        // The derived message id goes to the transport on its own, added to the headers in
        // the transport's form: not inserted here first and converted again there (a shared
        // string, a search of the headers, a validation and a copy fewer on every output). A
        // message id the handling set itself is kept.
        let msg_id = match headers.get(MSG_ID_HEADER) {
            None => origin.as_ref().and_then(output_message_id),
            Some(_) => None,
        };
        // The headers are lent: the transport converts them to its own form, and they stay
        // here for the Core publish should the stream be gone.
        let confirmed = self
            .transport
            .publish_confirmed_lent(subject.clone(), &headers, msg_id, payload.clone())
            .await;
        let ack = match confirmed {
            Ok(ack) => {
                ruststream::telemetry::published("stored");
                if ack.duplicate {
                    // The id is made again only when the line is logged (the transport took
                    // the one sent): a field's value is evaluated only when enabled.
                    tracing::debug!(
                        subject = &*subject,
                        stream = %ack.stream,
                        sequence = ack.sequence,
                        msg_id = headers
                            .get(MSG_ID_HEADER)
                            .map(str::to_owned)
                            .or_else(|| origin.as_ref().and_then(output_message_id))
                            .unwrap_or_default(),
                        "the stream already held this output (a redelivered input published it again); the copy was dropped"
                    );
                }
                Some(ack)
            }
            // No responder: the stream is gone since the list was learned (then a Core publish,
            // as for any subject no stream stores), or it is not answering now (then an
            // error: the output is not stored, and its input must come back).
            Err(err) if err.kind == TransportErrorKind::NoStream => {
                if !self.is_gone(&subject).await {
                    return Err(not_stored(&subject, &stream, &err));
                }
                tracing::warn!(
                    subject = &*subject,
                    %stream,
                    "stream `{stream}` no longer stores the subject; published on Core NATS, unconfirmed"
                );
                self.stored.forget();
                // With the message id it would have been stored with, as before.
                if headers.get(MSG_ID_HEADER).is_none()
                    && let Some(id) = origin.as_ref().and_then(output_message_id)
                {
                    headers.insert(msg_id_name(), id);
                }
                self.core(&[subject], &headers, payload.clone()).await?;
                None
            }
            Err(err) => return Err(not_stored(&subject, &stream, &err)),
        };
        if let Some((inbox, headers)) = response {
            self.core(&[inbox], &headers, payload).await?;
            self.let_the_response_out(origin.as_ref()).await;
        }
        Ok(ack)
    }

    /// Whether no stream stores `subject` any more, as the server says when asked now: a
    /// stored publish that found no responder is told apart from a stream that is not
    /// answering (its node down, a leader election). Without an answer it is not gone.
    async fn is_gone(&self, subject: &str) -> bool {
        stream_is_gone(&*self.transport, subject).await
    }

    /// After a response was handed to the transport: when the transport's own task writes it
    /// (async-nats) and the request was awaited ([`AwaitedRequest`]), yields once, so that task
    /// writes the response before this one goes on. The requester waits for the response; what
    /// follows the handler (its result, the settlement, the metrics, taking the next message)
    /// can wait for the write instead. It costs a poll of the runtime's I/O driver and of the
    /// handling again, and a write of its own: worth it for a request with nothing behind it,
    /// not for one of a backlog (whose responses go out together when the task next waits).
    async fn let_the_response_out(&self, origin: Option<&Origin<'_>>) {
        if self.yields_after_response
            && origin.is_some_and(|origin| origin.delivery.extension::<AwaitedRequest>().is_some())
        {
            tokio::task::yield_now().await;
        }
    }

    /// Core-publishes the same message to each of `subjects`, in order.
    async fn core(
        &self,
        subjects: &[Target],
        headers: &Headers,
        payload: Bytes,
    ) -> Result<(), PublishError> {
        let result = self
            .transport
            .publish_each(subjects, headers, payload)
            .await;
        // The subjects before a failing one went out (a response before its output, say).
        let sent = match &result {
            Ok(()) => subjects.len(),
            Err((index, _)) => *index,
        };
        for _ in 0..sent {
            ruststream::telemetry::published("core");
        }
        result.map_err(|(index, err)| {
            let subject = subjects.get(index).map_or("", |subject| &**subject);
            broker_error(subject, err)
        })
    }

    /// A JetStream publish whatever the list of streams says: the stream's acknowledgement,
    /// or an error naming the stream and what it refused.
    pub(crate) async fn send_stored(
        &self,
        message: OutboundMessage,
    ) -> Result<StoredAck, PublishError> {
        let subject = Arc::clone(&message.subject);
        refuse_invalid(&subject, "publish")?;
        self.relearn_if_due().await;
        let expectations: Vec<String> = message
            .headers
            .iter()
            .filter(|(name, _)| name.starts_with("Nats-Expected-"))
            .map(|(name, value)| format!("{name}: {value}"))
            .collect();
        let stored = self
            .transport
            .publish_confirmed(Arc::clone(&subject), message.headers, message.payload)
            .await;
        if stored.is_ok() {
            ruststream::telemetry::published("stored");
        }
        let err = match stored {
            Ok(ack) => return Ok(ack),
            Err(err) => err,
        };
        if err.kind == TransportErrorKind::NoStream && self.is_gone(&subject).await {
            return Err(
                PublishError::new(PublishErrorKind::NotStored, &*subject).with_source(format!(
                    "no stream stores `{subject}`: create one whose subjects match it"
                )),
            );
        }
        let stream = self
            .stored
            .stream_of(&subject)
            .unwrap_or_else(|| Arc::from("(unknown)"));
        let error = not_stored(&subject, &stream, &err);
        if expectations.is_empty() || err.kind != TransportErrorKind::Refused {
            return Err(error);
        }
        Err(
            PublishError::new(error.kind(), &*subject).with_source(format!(
                "{} (the publish expected {})",
                error.cause().map(ToString::to_string).unwrap_or_default(),
                expectations.join(", ")
            )),
        )
    }

    /// A Core request.
    pub(crate) async fn ask(
        &self,
        message: OutboundMessage,
        timeout: Duration,
    ) -> Result<Bytes, PublishError> {
        let subject = message.subject;
        refuse_invalid(&subject, "send a request")?;
        match self
            .transport
            .request(
                Arc::clone(&subject),
                message.headers,
                message.payload,
                timeout,
            )
            .await
        {
            Ok(response) => Ok(response.payload),
            Err(err) => {
                let kind = match err.kind {
                    TransportErrorKind::NoResponders => PublishErrorKind::NoResponders,
                    TransportErrorKind::TimedOut => PublishErrorKind::Timeout,
                    TransportErrorKind::Invalid => PublishErrorKind::InvalidSubject,
                    _ => PublishErrorKind::Broker,
                };
                Err(PublishError::new(kind, &*subject).with_source(err))
            }
        }
    }
}

impl Publish for NatsPublisher {
    fn publish(&self, message: OutboundMessage) -> BoxFuture<'_, Result<(), PublishError>> {
        Box::pin(async move { self.send(message, None).await.map(drop) })
    }

    fn publish_output<'a>(
        &'a self,
        message: OutboundMessage,
        origin: Origin<'a>,
    ) -> BoxFuture<'a, Result<(), PublishError>> {
        Box::pin(async move { self.send(message, Some(origin)).await.map(drop) })
    }

    fn publish_encoded<'a>(
        &'a self,
        output: EncodedOutput<'a>,
    ) -> BoxFuture<'a, Result<(), PublishError>> {
        let subject = Target::from(output.subject);
        Box::pin(async move {
            self.deliver(
                subject,
                output.headers,
                output.payload,
                Some(output.origin),
                output.inbox,
            )
            .await
            .map(drop)
        })
    }

    fn request(
        &self,
        message: OutboundMessage,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<Bytes, PublishError>> {
        Box::pin(self.ask(message, timeout))
    }

    fn publish_stored(
        &self,
        message: OutboundMessage,
    ) -> BoxFuture<'_, Result<StoredAck, PublishError>> {
        Box::pin(self.send_stored(message))
    }

    fn to_shared(&self) -> Option<Arc<dyn Publish>> {
        Some(Arc::new(self.clone()))
    }

    // Not asked by this publisher's own `publish_encoded` (`deliver` looks the stream up
    // itself); kept on purpose for a wrapper that forwards `publish_output` and `confirms`
    // here and keeps the default `publish_encoded`, whose response order it decides.
    fn confirms(&self, subject: &str) -> bool {
        self.stored.stream_of(subject).is_some()
    }
}

pub use self::client::{NatsClient, StoredPublish};

#[cfg(test)]
mod tests;
