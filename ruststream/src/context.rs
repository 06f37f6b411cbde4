//! What a handler can see and do besides its payload: the delivery's facts, the app state,
//! publishing.

use std::any::Any;
use std::num::NonZeroU32;

use bytes::Bytes;
use serde::Serialize;

use crate::codec::{CONTENT_TYPE, Codec, Format};
use crate::delivery::{Delivery, Headers, OutboundMessage};
use crate::error::{PublishError, PublishErrorKind};
use crate::extract::Rejection;
use crate::outgoing::Outgoing;
use crate::publish::Publish;

/// One delivery as its handler sees it.
///
/// A handler takes `&mut Context<'_>` as a parameter to read headers and facts, reach the app
/// state, or publish from inside the handler.
pub struct Context<'a> {
    delivery: &'a Delivery,
    state: &'a (dyn Any + Send + Sync),
    publisher: &'a dyn Publish,
    registration: &'a str,
    /// The registration's payload format, which outputs are encoded in.
    format: Format,
    /// The handler's own error, with its sources, when it failed with one.
    failed: std::sync::OnceLock<String>,
}

impl<'a> Context<'a> {
    /// A context over `delivery`, for the runtime and for tests of manual handlers.
    pub fn new(
        delivery: &'a Delivery,
        state: &'a (dyn Any + Send + Sync),
        publisher: &'a dyn Publish,
        registration: &'a str,
    ) -> Self {
        Self {
            delivery,
            state,
            publisher,
            registration,
            format: Format::Json,
            failed: std::sync::OnceLock::new(),
        }
    }

    /// Records that the handler failed with `error` (logged with its source chain) and returns
    /// the outcome to return from `Handle::handle`: the delivery is then settled as the
    /// registration's `on_error` says (`retry()` by default), not as that outcome. What a
    /// `#[subscriber]` returning `Err(e)` of its own error type does.
    pub fn failure(&self, error: &(dyn std::error::Error + 'static)) -> crate::HandlerOutcome {
        let mut chain = error.to_string();
        let mut source = error.source();
        while let Some(cause) = source {
            chain.push_str(": ");
            chain.push_str(&cause.to_string());
            source = cause.source();
        }
        tracing::warn!(
            registration = self.registration,
            subject = self.subject(),
            attempt = self.attempt().get(),
            error = %chain,
            "the handler failed; settled as the registration's on_error says"
        );
        let _ = self.failed.set(chain);
        crate::HandlerOutcome::retry()
    }

    /// The error [`failure`](Self::failure) recorded, with its sources.
    pub fn failed(&self) -> Option<&str> {
        self.failed.get().map(String::as_str)
    }

    /// The same context, publishing in `format` (the registration's, set by the runtime).
    pub fn with_format(mut self, format: Format) -> Self {
        self.format = format;
        self
    }

    /// The payload format of the registration: what the input was decoded from and what
    /// outputs are encoded in.
    pub fn format(&self) -> Format {
        self.format
    }

    /// `value` in the registration's format, as a message to `subject` saying its
    /// `content-type`.
    fn encoded<T: Serialize + ?Sized>(
        &self,
        subject: &str,
        value: &T,
    ) -> Result<OutboundMessage, PublishError> {
        let payload = self
            .format
            .encode(value)
            .map_err(|e| PublishError::new(PublishErrorKind::Encode, subject).with_source(e))?;
        let mut message = OutboundMessage::new(subject, payload);
        message
            .headers
            .insert(CONTENT_TYPE, self.format.content_type());
        Ok(message)
    }

    /// The delivery, as it arrived.
    pub fn delivery(&self) -> &Delivery {
        self.delivery
    }

    /// The subject the message arrived on (for a wildcard, the concrete one).
    pub fn subject(&self) -> &str {
        self.delivery.subject()
    }

    /// The headers, as they arrived.
    pub fn headers(&self) -> &Headers {
        self.delivery.headers()
    }

    /// The payload bytes, as they arrived.
    pub fn payload(&self) -> &Bytes {
        self.delivery.payload()
    }

    /// The server's delivery count: `Some(1)` on a first JetStream delivery, `None` on Core.
    pub fn delivered(&self) -> Option<u64> {
        self.delivery.delivered()
    }

    /// The attempt number the cap counts; the first delivery is 1.
    pub fn attempt(&self) -> NonZeroU32 {
        self.delivery.attempt()
    }

    /// The name of the registration handling this delivery.
    pub fn registration(&self) -> &str {
        self.registration
    }

    /// The app state, when it is of type `S`.
    pub fn state<S: 'static>(&self) -> Option<&'a S> {
        self.state.downcast_ref()
    }

    /// The value of a context key, as `Ctx<K>` gives it.
    pub fn get<K: crate::Key>(&self) -> Result<K::Value, Rejection> {
        K::get(self)
    }

    /// Publishes an [`Outgoing`] message to its subject, in the registration's format (JSON
    /// by default) with its `content-type` header.
    pub async fn publish<T: Outgoing>(&self, value: &T) -> Result<(), PublishError> {
        let message = self.encoded(T::SUBJECT, value)?;
        self.publisher.publish(message).await
    }

    /// Publishes any serializable value to `subject`, in the registration's format (JSON by
    /// default) with its `content-type` header.
    pub async fn publish_to<T: Serialize + ?Sized>(
        &self,
        subject: &str,
        value: &T,
    ) -> Result<(), PublishError> {
        let message = self.encoded(subject, value)?;
        self.publisher.publish(message).await
    }

    /// Publishes a message as it is.
    pub async fn publish_raw(&self, message: OutboundMessage) -> Result<(), PublishError> {
        self.publisher.publish(message).await
    }
}

impl std::fmt::Debug for Context<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("registration", &self.registration)
            .field("delivery", self.delivery)
            .finish_non_exhaustive()
    }
}
