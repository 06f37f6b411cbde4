//! [`NatsClient`]: publishing and requests on a running app's connection from anywhere (a
//! handler, `main`, a startup hook, a test), and [`StoredPublish`], a JetStream publish set up
//! option by option.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ruststream::{OutboundMessage, Publish, PublishError, PublishErrorKind};

use super::MSG_ID_HEADER;
use crate::transport::StoredAck;

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
    /// The broker's publisher: a [`NatsPublisher`] unless the app runs another broker, whose
    /// publisher then refuses what it cannot do (a stored publish, a request).
    publisher: Arc<dyn Publish>,
}

impl std::fmt::Debug for NatsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsClient").finish_non_exhaustive()
    }
}

impl NatsClient {
    /// A client of its own over `publisher` (what the testing harness hands out).
    #[cfg(feature = "testing")]
    pub(crate) fn new(publisher: super::NatsPublisher) -> Self {
        Self {
            publisher: Arc::new(publisher),
        }
    }

    /// The client of a running app's (first) broker that publishes; `None` when it has none.
    pub fn of(running: &ruststream::RunningApp) -> Option<Self> {
        let publisher = running.publisher()?;
        Some(Self { publisher })
    }

    /// The client of the broker handling `ctx`'s delivery; `None` when its publisher cannot be
    /// shared beyond the handling.
    pub fn from_context(ctx: &ruststream::Context<'_>) -> Option<Self> {
        let publisher = ctx.publisher().to_shared()?;
        Some(Self { publisher })
    }

    /// Publishes an [`Outgoing`](ruststream::Outgoing) value to its subject, confirmed by its
    /// stream when one stores the subject: in the type's codec (with its `content-type`) when
    /// `#[outgoing(codec = ..)]` names one, else JSON.
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
        let mut message = OutboundMessage::new(&*subject, payload);
        // A type with a codec of its own says which: a reader cannot guess it.
        if let Some(format) = T::codec() {
            message.headers.insert(
                ruststream::codec::CONTENT_TYPE,
                ruststream::codec::Codec::content_type(&format),
            );
        }
        self.publisher.publish(message).await
    }

    /// Publishes `value` as JSON to `subject`, confirmed by its stream when one stores it.
    /// Subjects under a reserved prefix ([`ruststream::RESERVED_PREFIXES`]) are refused, as by
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
            .publish(OutboundMessage::new(subject, payload))
            .await
    }

    /// A JetStream publish of `value` (JSON) to `subject`, to set up and [`send`](StoredPublish::send).
    pub fn stored<T: serde::Serialize + ?Sized>(&self, subject: &str, value: &T) -> StoredPublish {
        StoredPublish {
            publisher: Arc::clone(&self.publisher),
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
            .request(OutboundMessage::new(subject, payload), timeout)
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
    publisher: Arc<dyn Publish>,
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
        self.publisher.publish_stored(self.message?).await
    }
}
