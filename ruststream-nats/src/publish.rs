//! What a handler publishes (a `reply` value, a `Publisher<T>` output, `ctx.publish(..)`).
//!
//! A subject no stream stores is a Core publish on the app's connection. A subject a stream
//! stores is a JetStream publish that waits for the stream's acknowledgement: a refusal (limits
//! with `discard: new`, a failed expectation) or a timeout is an error of kind
//! [`PublishErrorKind::NotStored`], which makes the input a `retry()`. Which subjects are
//! stored is learned from the server's stream list at startup and again every
//! [`RELEARN_AFTER`], never asked per message.
//!
//! A stored output of a JetStream input carries a `Nats-Msg-Id` derived from the input (its
//! stream and sequence, the registration, and which output of the handling it is): a
//! redelivered input publishes the same ids, and the stream's duplicate window drops the second
//! copies.

use std::any::Any;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use ruststream::{Origin, OutboundMessage, Publish, PublishError, PublishErrorKind};
use tokio::time::Instant;

use crate::JetStreamInfo;
use crate::subject::{matches, subject_problem};
use crate::transport::{StoredAck, StreamSpec, Transport, TransportError, TransportErrorKind};

/// The header JetStream deduplicates on.
pub const MSG_ID_HEADER: &str = "Nats-Msg-Id";

/// How old the list of streams may get before a publish asks for it again (in the background).
pub const RELEARN_AFTER: Duration = Duration::from_secs(30);

/// The message id of output `origin.output` of handling a JetStream delivery:
/// `<stream>:<sequence>:<registration>:<output>`; `None` for a Core delivery, which has no
/// identity to derive one from.
pub fn output_message_id(origin: &Origin<'_>) -> Option<String> {
    let info = origin.delivery.extension::<JetStreamInfo>()?;
    Some(format!(
        "{}:{}:{}:{}",
        info.stream, info.stream_sequence, origin.registration, origin.output
    ))
}

/// Which subjects the streams store, as last learned.
#[derive(Debug, Default)]
pub(crate) struct StoredSubjects {
    /// Each stream's name and the subjects it stores.
    streams: RwLock<Vec<(Arc<str>, Vec<String>)>>,
    learned: Mutex<Option<Instant>>,
}

impl StoredSubjects {
    /// The stream storing `subject`, if any.
    pub(crate) fn stream_of(&self, subject: &str) -> Option<Arc<str>> {
        let streams = self.streams.read().ok()?;
        streams
            .iter()
            .find(|(_, subjects)| subjects.iter().any(|p| matches(p, subject)))
            .map(|(name, _)| Arc::clone(name))
    }

    fn set(&self, streams: Vec<StreamSpec>) {
        if let Ok(mut current) = self.streams.write() {
            *current = streams
                .into_iter()
                .map(|s| (Arc::from(s.name), s.subjects))
                .collect();
        }
    }

    /// Whether the list is older than [`RELEARN_AFTER`] (`Some(true)`) or was never learned
    /// (`Some(false)`); if so, marks it learned now (one caller relearns).
    fn due(&self) -> Option<bool> {
        let Ok(mut learned) = self.learned.lock() else {
            return None;
        };
        let now = Instant::now();
        match learned.replace(now) {
            Some(at) if now.duration_since(at) < RELEARN_AFTER => {
                *learned = Some(at);
                None
            }
            Some(_) => Some(true),
            None => Some(false),
        }
    }

    fn forget(&self) {
        if let Ok(mut learned) = self.learned.lock() {
            *learned = None;
        }
    }
}

/// Publishes a handler's messages through the transport.
#[derive(Clone)]
pub(crate) struct NatsPublisher {
    transport: Arc<dyn Transport>,
    stored: Arc<StoredSubjects>,
}

impl NatsPublisher {
    pub(crate) fn new(transport: Arc<dyn Transport>) -> Self {
        Self {
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

    /// Learns the streams when never learned; relearns them in the background when the list
    /// is old.
    async fn relearn_if_due(&self) {
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
        mut message: OutboundMessage,
        origin: Option<Origin<'_>>,
    ) -> Result<Option<StoredAck>, PublishError> {
        let subject = Arc::clone(&message.subject);
        if let Some(problem) = subject_problem(&subject, false) {
            return Err(
                PublishError::new(PublishErrorKind::InvalidSubject, &*subject).with_source(
                    format!("`{subject}` is not a subject to publish to: {problem}"),
                ),
            );
        }
        self.relearn_if_due().await;
        if let Some(stream) = self.stored.stream_of(&subject) {
            if message.headers.get(MSG_ID_HEADER).is_none()
                && let Some(id) = origin.as_ref().and_then(output_message_id)
            {
                message.headers.insert(MSG_ID_HEADER, id);
            }
            match self
                .transport
                .publish_confirmed(
                    Arc::clone(&subject),
                    message.headers.clone(),
                    message.payload.clone(),
                )
                .await
            {
                Ok(ack) => {
                    ruststream::telemetry::published("stored");
                    if ack.duplicate {
                        tracing::debug!(
                            subject = %subject,
                            stream = %ack.stream,
                            sequence = ack.sequence,
                            msg_id = message.headers.get(MSG_ID_HEADER).unwrap_or_default(),
                            "the stream already held this output (a redelivered input published it again); the copy was dropped"
                        );
                    }
                    return Ok(Some(ack));
                }
                // The stream is gone since the list was learned: a Core publish, as for any
                // subject no stream stores.
                Err(err) if err.kind == TransportErrorKind::NoStream => {
                    tracing::warn!(
                        subject = %subject,
                        %stream,
                        "stream `{stream}` no longer stores the subject; published on Core NATS, unconfirmed"
                    );
                    self.stored.forget();
                }
                Err(err) => return Err(not_stored(&subject, &stream, &err)),
            }
        }
        self.transport
            .publish(Arc::clone(&subject), message.headers, message.payload)
            .await
            .map_err(|err| broker_error(&subject, err))?;
        ruststream::telemetry::published("core");
        Ok(None)
    }

    /// A JetStream publish whatever the list of streams says: the stream's acknowledgement,
    /// or an error naming the stream and what it refused.
    pub(crate) async fn send_stored(
        &self,
        message: OutboundMessage,
    ) -> Result<StoredAck, PublishError> {
        let subject = Arc::clone(&message.subject);
        if let Some(problem) = subject_problem(&subject, false) {
            return Err(
                PublishError::new(PublishErrorKind::InvalidSubject, &*subject).with_source(
                    format!("`{subject}` is not a subject to publish to: {problem}"),
                ),
            );
        }
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
        stored.map_err(|err| {
            if err.kind == TransportErrorKind::NoStream {
                return PublishError::new(PublishErrorKind::NotStored, &*subject).with_source(
                    format!("no stream stores `{subject}`: create one whose subjects match it"),
                );
            }
            let stream = self
                .stored
                .stream_of(&subject)
                .unwrap_or_else(|| Arc::from("(unknown)"));
            let error = not_stored(&subject, &stream, &err);
            if expectations.is_empty() || err.kind != TransportErrorKind::Refused {
                return error;
            }
            PublishError::new(PublishErrorKind::NotStored, &*subject).with_source(format!(
                "{} (the publish expected {})",
                std::error::Error::source(&error)
                    .map(ToString::to_string)
                    .unwrap_or_default(),
                expectations.join(", ")
            ))
        })
    }

    /// A Core request.
    pub(crate) async fn ask(
        &self,
        message: OutboundMessage,
        timeout: Duration,
    ) -> Result<Bytes, PublishError> {
        let subject = message.subject;
        if let Some(problem) = subject_problem(&subject, false) {
            return Err(
                PublishError::new(PublishErrorKind::InvalidSubject, &*subject).with_source(
                    format!("`{subject}` is not a subject to send a request to: {problem}"),
                ),
            );
        }
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

async fn learn(transport: &dyn Transport, stored: &StoredSubjects) {
    match transport.streams().await {
        Ok(streams) => stored.set(streams),
        Err(err) => tracing::debug!(
            %err,
            "cannot list the streams; outputs are Core publishes until the list is known"
        ),
    }
}

/// A stream that did not confirm an output.
fn not_stored(subject: &str, stream: &str, err: &TransportError) -> PublishError {
    let why = match err.kind {
        TransportErrorKind::TimedOut => {
            format!("stream `{stream}` did not confirm the message in time")
        }
        _ => format!("stream `{stream}` refused the message: {err}"),
    };
    PublishError::new(PublishErrorKind::NotStored, subject).with_source(why)
}

fn broker_error(subject: &str, err: TransportError) -> PublishError {
    let kind = match err.kind {
        TransportErrorKind::Invalid => PublishErrorKind::InvalidSubject,
        _ => PublishErrorKind::Broker,
    };
    PublishError::new(kind, subject).with_source(err)
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

    fn request(
        &self,
        message: OutboundMessage,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<Bytes, PublishError>> {
        Box::pin(self.ask(message, timeout))
    }

    fn as_any(&self) -> Option<&(dyn Any + Send + Sync)> {
        Some(self)
    }

    fn confirms(&self, subject: &str) -> bool {
        self.stored.stream_of(subject).is_some()
    }
}

/// Publishing and requests on a running app's NATS connection, inside a handler or outside one
/// (from `main`, a startup hook, a test).
///
/// - [`publish`](Self::publish) / [`publish_to`](Self::publish_to): a Core publish, or a
///   JetStream publish confirmed by its stream when a stream stores the subject (as a
///   handler's outputs are);
/// - [`stored`](Self::stored): a JetStream publish that returns the stream's acknowledgement,
///   with a message id, `Nats-Expected-*` checks and headers;
/// - [`request`](Self::request): a Core request with a typed response.
///
/// Get one with [`NatsClient::of`] from a [`RunningApp`](ruststream::RunningApp), with
/// [`NatsClient::from_context`] in a handler, or from `TestApp::client()`.
#[derive(Clone)]
pub struct NatsClient {
    publisher: NatsPublisher,
}

impl std::fmt::Debug for NatsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsClient").finish_non_exhaustive()
    }
}

impl NatsClient {
    pub(crate) fn new(publisher: NatsPublisher) -> Self {
        Self { publisher }
    }

    /// The client of a running app's (first) NATS broker; `None` when it has none.
    pub fn of(running: &ruststream::RunningApp) -> Option<Self> {
        let publisher = running.publisher()?;
        let nats = publisher.as_any()?.downcast_ref::<NatsPublisher>()?;
        Some(Self::new(nats.clone()))
    }

    /// The client of the broker handling `ctx`'s delivery; `None` when it is not NATS.
    pub fn from_context(ctx: &ruststream::Context<'_>) -> Option<Self> {
        let nats = ctx.publisher().as_any()?.downcast_ref::<NatsPublisher>()?;
        Some(Self::new(nats.clone()))
    }

    /// Publishes an [`Outgoing`](ruststream::Outgoing) value to its subject, confirmed by its
    /// stream when one stores the subject.
    ///
    /// # Errors
    ///
    /// `Encode`, `InvalidSubject`, `NotStored` (the stream refused it or did not answer),
    /// `Broker`.
    pub async fn publish<T: ruststream::Outgoing>(&self, value: &T) -> Result<(), PublishError> {
        let subject = value.subject()?;
        let payload = value
            .encode()
            .map_err(|e| PublishError::new(PublishErrorKind::Encode, &*subject).with_source(e))?;
        self.publisher
            .send(OutboundMessage::new(&*subject, payload), None)
            .await
            .map(drop)
    }

    /// Publishes `value` as JSON to `subject`, confirmed by its stream when one stores it.
    /// Subjects under `$JS.API.`, `$SYS.` and `_INBOX.` are refused, as by
    /// [`Context::publish_to`](ruststream::Context::publish_to).
    ///
    /// # Errors
    ///
    /// As [`publish`](Self::publish), and `Reserved`.
    pub async fn publish_to<T: serde::Serialize + ?Sized>(
        &self,
        subject: &str,
        value: &T,
    ) -> Result<(), PublishError> {
        refuse_reserved(subject)?;
        let payload = encode(subject, value)?;
        self.publisher
            .send(OutboundMessage::new(subject, payload), None)
            .await
            .map(drop)
    }

    /// A JetStream publish of `value` (JSON) to `subject`, to set up and [`send`](StoredPublish::send).
    pub fn stored<T: serde::Serialize + ?Sized>(&self, subject: &str, value: &T) -> StoredPublish {
        StoredPublish {
            publisher: self.publisher.clone(),
            message: encode(subject, value).map(|payload| OutboundMessage::new(subject, payload)),
        }
    }

    /// Sends `value` (JSON) as a Core request to `subject` and decodes the response as `R`.
    ///
    /// # Errors
    ///
    /// `NoResponders` at once when nobody listens on `subject`, `Timeout` when no response
    /// came within `timeout`, `Decode` when the response is not an `R`, `Reserved` for a
    /// reserved subject.
    pub async fn request<T: serde::Serialize + ?Sized, R: serde::de::DeserializeOwned>(
        &self,
        subject: &str,
        value: &T,
        timeout: Duration,
    ) -> Result<R, PublishError> {
        refuse_reserved(subject)?;
        let payload = encode(subject, value)?;
        let response = self
            .publisher
            .ask(OutboundMessage::new(subject, payload), timeout)
            .await?;
        serde_json::from_slice(&response).map_err(|e| {
            PublishError::new(PublishErrorKind::Decode, subject).with_source(format!(
                "the response to the request on `{subject}` is not a `{}`: {e}",
                std::any::type_name::<R>()
            ))
        })
    }
}

fn encode<T: serde::Serialize + ?Sized>(subject: &str, value: &T) -> Result<Bytes, PublishError> {
    serde_json::to_vec(value)
        .map(Bytes::from)
        .map_err(|e| PublishError::new(PublishErrorKind::Encode, subject).with_source(e))
}

fn refuse_reserved(subject: &str) -> Result<(), PublishError> {
    match ruststream::reserved_prefix(subject) {
        Some(prefix) => Err(
            PublishError::new(PublishErrorKind::Reserved, subject).with_source(format!(
                "`{subject}` is under the reserved prefix `{prefix}`, which is refused here"
            )),
        ),
        None => Ok(()),
    }
}

/// A JetStream publish being set up: [`NatsClient::stored`], then the options, then
/// [`send`](Self::send).
#[must_use = "nothing is published until `send().await`"]
pub struct StoredPublish {
    publisher: NatsPublisher,
    message: Result<OutboundMessage, PublishError>,
}

impl std::fmt::Debug for StoredPublish {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredPublish")
            .field("message", &self.message.as_ref().ok())
            .finish_non_exhaustive()
    }
}

impl StoredPublish {
    fn header(mut self, name: &str, value: String) -> Self {
        if let Ok(message) = &mut self.message {
            message.headers.insert(name, value);
        }
        self
    }

    /// The message id the stream deduplicates on (`Nats-Msg-Id`): a second message with the
    /// same id within the stream's duplicate window is acknowledged as a duplicate and not
    /// stored.
    pub fn message_id(self, id: impl Into<String>) -> Self {
        self.header(MSG_ID_HEADER, id.into())
    }

    /// Refused unless the subject is stored by stream `stream` (`Nats-Expected-Stream`).
    pub fn expected_stream(self, stream: impl Into<String>) -> Self {
        self.header("Nats-Expected-Stream", stream.into())
    }

    /// Refused unless the stream's last sequence is `sequence` (`Nats-Expected-Last-Sequence`).
    pub fn expected_last_sequence(self, sequence: u64) -> Self {
        self.header("Nats-Expected-Last-Sequence", sequence.to_string())
    }

    /// Refused unless the last message on this subject has sequence `sequence` (0: none)
    /// (`Nats-Expected-Last-Subject-Sequence`).
    pub fn expected_last_subject_sequence(self, sequence: u64) -> Self {
        self.header("Nats-Expected-Last-Subject-Sequence", sequence.to_string())
    }

    /// Refused unless the stream's last message has id `id` (`Nats-Expected-Last-Msg-Id`).
    pub fn expected_last_message_id(self, id: impl Into<String>) -> Self {
        self.header("Nats-Expected-Last-Msg-Id", id.into())
    }

    /// Adds header `name: value`.
    pub fn with_header(mut self, name: impl Into<Arc<str>>, value: impl Into<Arc<str>>) -> Self {
        if let Ok(message) = &mut self.message {
            message.headers.append(name, value);
        }
        self
    }

    /// Publishes and waits for the stream's acknowledgement.
    ///
    /// # Errors
    ///
    /// `Encode` when the value did not encode, `InvalidSubject`, `NotStored` when no stream
    /// stores the subject, or the stream refused the message (naming the stream, its reason,
    /// and the expectations the publish set) or did not answer in time.
    pub async fn send(self) -> Result<StoredAck, PublishError> {
        self.publisher.send_stored(self.message?).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use ruststream::{Delivery, Headers};

    use super::*;
    use crate::transport::{ConsumerSpec, Subscription};

    /// A wire whose stream `OUT` stores `out.>` and answers stored publishes with `answer`.
    struct Wire {
        answer: fn() -> Result<StoredAck, TransportError>,
        sent: Mutex<Vec<(String, Headers)>>,
    }

    impl Transport for Wire {
        fn publish(
            &self,
            subject: Arc<str>,
            headers: Headers,
            _payload: Bytes,
        ) -> BoxFuture<'_, Result<(), TransportError>> {
            self.sent
                .lock()
                .expect("not poisoned")
                .push((format!("core {subject}"), headers));
            Box::pin(async { Ok(()) })
        }

        fn publish_stored(
            &self,
            _subject: Arc<str>,
            _headers: Headers,
            _payload: Bytes,
        ) -> BoxFuture<'_, Result<u64, TransportError>> {
            Box::pin(async { Err(TransportError::new(TransportErrorKind::Other, "unused")) })
        }

        fn publish_confirmed(
            &self,
            subject: Arc<str>,
            headers: Headers,
            _payload: Bytes,
        ) -> BoxFuture<'_, Result<StoredAck, TransportError>> {
            self.sent
                .lock()
                .expect("not poisoned")
                .push((format!("stored {subject}"), headers));
            let answer = (self.answer)();
            Box::pin(async move { answer })
        }

        fn streams(&self) -> BoxFuture<'_, Result<Vec<StreamSpec>, TransportError>> {
            Box::pin(async {
                Ok(vec![StreamSpec {
                    name: "OUT".into(),
                    subjects: vec!["out.>".into()],
                }])
            })
        }

        fn flush(&self) -> BoxFuture<'_, Result<(), TransportError>> {
            Box::pin(async { Ok(()) })
        }

        fn subscribe(
            &self,
            _subject: String,
            _queue_group: Option<String>,
        ) -> BoxFuture<'_, Result<Subscription, TransportError>> {
            Box::pin(async { Err(TransportError::new(TransportErrorKind::Other, "unused")) })
        }

        fn stream_exists(&self, _name: &str) -> BoxFuture<'_, Result<bool, TransportError>> {
            Box::pin(async { Ok(true) })
        }

        fn declare_stream(&self, _spec: StreamSpec) -> BoxFuture<'_, Result<(), TransportError>> {
            Box::pin(async { Ok(()) })
        }

        fn consume(
            &self,
            _spec: ConsumerSpec,
        ) -> BoxFuture<'_, Result<Subscription, TransportError>> {
            Box::pin(async { Err(TransportError::new(TransportErrorKind::Other, "unused")) })
        }
    }

    fn publisher(answer: fn() -> Result<StoredAck, TransportError>) -> (Arc<Wire>, NatsPublisher) {
        let wire = Arc::new(Wire {
            answer,
            sent: Mutex::new(Vec::new()),
        });
        let publisher = NatsPublisher::new(Arc::clone(&wire) as Arc<dyn Transport>);
        (wire, publisher)
    }

    fn jetstream_input() -> Delivery {
        let mut delivery = Delivery::new("orders.placed", Bytes::from_static(b"{}"));
        let info = JetStreamInfo::parse("$JS.ACK.ORDERS.worker.2.17.21.1700000000000000000.0")
            .expect("an acknowledgement subject");
        delivery.extensions_mut().insert(info);
        delivery
    }

    fn message(subject: &str) -> OutboundMessage {
        OutboundMessage::new(subject, Bytes::from_static(b"{}"))
    }

    #[tokio::test]
    async fn a_stored_output_carries_the_id_derived_from_its_input() {
        let (wire, publisher) = publisher(|| {
            Ok(StoredAck {
                stream: "OUT".into(),
                sequence: 1,
                duplicate: false,
            })
        });
        let input = jetstream_input();
        let origin = Origin {
            delivery: &input,
            registration: "audit",
            output: 1,
        };
        publisher
            .publish_output(message("out.audited"), origin)
            .await
            .expect("stored");
        publisher
            .publish_output(message("elsewhere"), origin)
            .await
            .expect("published");
        let sent = wire.sent.lock().expect("not poisoned").clone();
        assert_eq!(sent[0].0, "stored out.audited");
        assert_eq!(sent[0].1.get(MSG_ID_HEADER), Some("ORDERS:17:audit:1"));
        assert_eq!(sent[1].0, "core elsewhere");
        assert_eq!(
            sent[1].1.get(MSG_ID_HEADER),
            None,
            "Core outputs carry no id"
        );
    }

    #[tokio::test]
    async fn a_stream_that_does_not_answer_in_time_is_not_stored_naming_the_stream() {
        let (_wire, publisher) = publisher(|| {
            Err(TransportError::new(
                TransportErrorKind::TimedOut,
                "timed out",
            ))
        });
        let err = publisher
            .publish(message("out.audited"))
            .await
            .expect_err("not confirmed");
        assert_eq!(err.kind(), PublishErrorKind::NotStored);
        assert!(
            err.to_string()
                .contains("stream `OUT` did not confirm the message in time"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_refusal_is_not_stored_with_the_reason() {
        let (_wire, publisher) = publisher(|| {
            Err(TransportError::new(
                TransportErrorKind::Refused,
                "maximum messages exceeded",
            ))
        });
        let err = publisher
            .publish(message("out.audited"))
            .await
            .expect_err("refused");
        assert_eq!(err.kind(), PublishErrorKind::NotStored);
        assert!(
            err.to_string()
                .contains("stream `OUT` refused the message: maximum messages exceeded"),
            "{err}"
        );
    }

    #[test]
    fn a_core_input_has_no_output_id() {
        let input = Delivery::new("orders.placed", Bytes::from_static(b"{}"));
        let origin = Origin {
            delivery: &input,
            registration: "audit",
            output: 0,
        };
        assert_eq!(output_message_id(&origin), None);
    }
}
