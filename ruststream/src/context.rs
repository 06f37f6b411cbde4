//! What a handler can see and do besides its payload: the delivery's facts, the app state,
//! publishing.

use std::any::Any;
use std::num::NonZeroU32;

use bytes::Bytes;
use serde::Serialize;

use crate::codec::{Codec, Json};
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
        }
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

    /// Publishes an [`Outgoing`] message to its subject.
    pub async fn publish<T: Outgoing>(&self, value: &T) -> Result<(), PublishError> {
        let payload = value
            .encode()
            .map_err(|e| PublishError::new(PublishErrorKind::Encode, T::SUBJECT).with_source(e))?;
        self.publisher
            .publish(OutboundMessage::new(T::SUBJECT, payload))
            .await
    }

    /// Publishes any serializable value, as JSON, to `subject`.
    pub async fn publish_to<T: Serialize + ?Sized>(
        &self,
        subject: &str,
        value: &T,
    ) -> Result<(), PublishError> {
        let payload = Json
            .encode(value)
            .map_err(|e| PublishError::new(PublishErrorKind::Encode, subject).with_source(e))?;
        self.publisher
            .publish(OutboundMessage::new(subject, payload))
            .await
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
