//! What a handler can see and do besides its payload: the delivery's facts, the app state,
//! publishing.

use std::any::Any;
use std::borrow::Cow;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::codec::{Codec, Format, Json};
use crate::delivery::{Delivery, Headers, OutboundMessage};
use crate::error::{PublishError, PublishErrorKind};
use crate::outgoing::Outgoing;
use crate::publish::{CORRELATION_ID_HEADER, EncodedOutput, Origin, Publish};
use crate::reserved::{refuse_reserved_reply, reserved_prefix};

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
    /// How many outputs this handling published (the next one's index).
    outputs: Outputs,
    /// The first output a stream did not confirm, and why.
    /// (Set once: read after every handling, where a lock cost more than the rest of it.)
    unconfirmed: std::sync::OnceLock<String>,
    /// The first output that failed for good ([`PublishErrorKind::is_permanent`]), and why.
    unpublishable: std::sync::OnceLock<String>,
}

/// The count of a handling's outputs: its own, or (for a message of a batch) shared by every
/// context the batch hands out for that message.
enum Outputs {
    Own(AtomicU32),
    Shared(std::sync::Arc<[AtomicU32]>, usize),
}

impl Outputs {
    /// The next output's index.
    fn next(&self) -> u32 {
        let counter = match self {
            Self::Own(counter) => counter,
            Self::Shared(counters, index) => match counters.get(*index) {
                Some(counter) => counter,
                None => return 0,
            },
        };
        counter.fetch_add(1, Ordering::Relaxed)
    }
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
            outputs: Outputs::Own(AtomicU32::new(0)),
            unconfirmed: std::sync::OnceLock::new(),
            unpublishable: std::sync::OnceLock::new(),
        }
    }

    /// A context for message `index` of a batch, counting its outputs in `counters[index]`,
    /// shared by every context of that message.
    pub(crate) fn for_batch(
        delivery: &'a Delivery,
        state: &'a (dyn Any + Send + Sync),
        publisher: &'a dyn Publish,
        registration: &'a str,
        counters: std::sync::Arc<[AtomicU32]>,
        index: usize,
    ) -> Self {
        let mut ctx = Self::new(delivery, state, publisher, registration);
        ctx.outputs = Outputs::Shared(counters, index);
        ctx
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
    pub(crate) fn encoded<T: Serialize + ?Sized>(
        &self,
        subject: &str,
        value: &T,
    ) -> Result<OutboundMessage, PublishError> {
        let (headers, payload) = self.encode_parts(self.format, subject, value)?;
        Ok(OutboundMessage {
            subject: Arc::from(subject),
            headers,
            payload,
        })
    }

    /// `value` in `format`, and headers holding only its `content-type`; an encoding error
    /// names `subject`. Inlined: on the request/reply path as the body of `publish_value` was
    /// before it was shared.
    #[inline(always)]
    fn encode_parts<T: Serialize + ?Sized>(
        &self,
        format: Format,
        subject: &str,
        value: &T,
    ) -> Result<(Headers, Bytes), PublishError> {
        let payload = format
            .encode(value)
            .map_err(|e| PublishError::new(PublishErrorKind::Encode, subject).with_source(e))?;
        let mut headers = Headers::new();
        let (name, content_type) = format.content_type_header();
        headers.insert(name, content_type);
        Ok((headers, payload))
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

    /// Whether this is the last attempt the registration's cap allows (see
    /// [`Delivery::is_last_attempt`]); `false` without a cap.
    pub fn is_last_attempt(&self) -> bool {
        self.delivery.is_last_attempt()
    }

    /// Runs `hook` once this delivery's `+ACK` reached the server: confirmed by the server
    /// with `.confirm_acks()`, else flushed to the connection. Never when the delivery is
    /// retried, dropped or dead-lettered. A panicking hook is logged and contained. On Core it
    /// runs after an `ack()` outcome. See `docs/acknowledgement.md`.
    ///
    /// ```
    /// # use ruststream::prelude::*;
    /// #[subscriber("orders.paid")]
    /// async fn paid(order: &u64, ctx: &mut Context<'_>) -> HandlerOutcome {
    ///     let order = *order;
    ///     ctx.after_ack(async move { tracing::info!(order, "acknowledged") });
    ///     HandlerOutcome::ack()
    /// }
    /// ```
    pub fn after_ack(&self, hook: impl Future<Output = ()> + Send + 'static) {
        self.delivery.push_after_ack(Box::pin(hook));
    }

    /// The name of the registration handling this delivery.
    pub fn registration(&self) -> &str {
        self.registration
    }

    /// The app state, when it is of type `S`.
    pub fn state<S: 'static>(&self) -> Option<&'a S> {
        self.state.downcast_ref()
    }

    /// The broker's publisher, for its crate's own publishing API.
    pub fn publisher(&self) -> &'a dyn Publish {
        self.publisher
    }

    /// Publishes an [`Outgoing`] message to its subject, in the type's
    /// [`codec`](Outgoing::codec) when it names one, else the registration's format (JSON by
    /// default), with its `content-type` header.
    ///
    /// When a stream stores the subject, this resolves once the stream confirmed the message;
    /// a refusal or a timeout is an error of kind
    /// [`PublishErrorKind::NotStored`], and the delivery is then not acknowledged even if the
    /// handler returns `Ok` (it comes back as a `retry()`). See `docs/publishing.md`.
    pub async fn publish<T: Outgoing>(&self, value: &T) -> Result<(), PublishError> {
        let subject = outgoing_subject(value).map_err(|err| self.output_failed(err))?;
        self.publish_value(self.format_of::<T>(), subject, value, None)
            .await
    }

    /// The format `T` is published in: its own [`codec`](Outgoing::codec), else the
    /// registration's.
    pub(crate) fn format_of<T: Outgoing>(&self) -> Format {
        T::codec().unwrap_or(self.format)
    }

    /// Publishes `value` in `format` to `subject` as this handling's next
    /// output, with its `content-type` and the input's correlation id; when `inbox` is given,
    /// the same message also goes there as the response to the request being handled (what
    /// [`Publish::publish_encoded`] says). The value is encoded once, and the output and the
    /// response share its headers and payload.
    pub(crate) async fn publish_value<T: Serialize + ?Sized>(
        &self,
        format: Format,
        subject: Cow<'static, str>,
        value: &T,
        inbox: Option<&Arc<str>>,
    ) -> Result<(), PublishError> {
        let inbox = match inbox {
            Some(reply_to) if let Err(err) = refuse_reserved_reply(reply_to) => {
                tracing::warn!(
                    registration = self.registration,
                    subject = self.subject(),
                    %err,
                    "the request's reply subject is reserved: the output is published, the request is not answered"
                );
                None
            }
            inbox => inbox,
        };
        let (mut headers, payload) = self
            .encode_parts(format, &subject, value)
            .map_err(|err| self.output_failed(err))?;
        self.correlate_headers(&mut headers);
        let origin = self.next_origin();
        let output = EncodedOutput::new(subject, headers, payload, origin).responding_to(inbox);
        let result = self.publisher.publish_encoded(output).await;
        result.map_err(|err| self.output_failed(err))
    }

    /// Publishes an [`Outgoing`] message to its subject with `headers` (added to the
    /// correlation id the runtime carries over), confirmed like [`Context::publish`].
    pub async fn publish_with<T: Outgoing>(
        &self,
        value: &T,
        headers: Headers,
    ) -> Result<(), PublishError> {
        let subject = outgoing_subject(value).map_err(|err| self.output_failed(err))?;
        let format = self.format_of::<T>();
        let (_, payload) = self
            .encode_parts(format, &subject, value)
            .map_err(|err| self.output_failed(err))?;
        let mut headers = headers;
        if crate::codec::content_type_of(&headers).is_none() {
            let (name, value) = format.content_type_header();
            headers.insert(name, value);
        }
        self.publish_raw(OutboundMessage {
            subject: Arc::from(&*subject),
            headers,
            payload,
        })
        .await
    }

    /// Publishes any serializable value to `subject`, in the registration's format (JSON by
    /// default) with its `content-type` header, for one-off destinations.
    ///
    /// The subject is checked before anything is sent. Subjects under the
    /// [`RESERVED_PREFIXES`](crate::RESERVED_PREFIXES) (`$JS.API.`, `$JS.ACK.`, `$KV.`, `$O.`,
    /// `$SYS.`, `_INBOX.`) are refused (kind [`PublishErrorKind::Reserved`]): a subject built
    /// from payload data must not reach the JetStream API, acknowledge another consumer's
    /// message or write a KV key.
    /// Use [`Context::publish_to_reserved`] to publish there on purpose.
    pub async fn publish_to<T: Serialize + ?Sized>(
        &self,
        subject: &str,
        value: &T,
    ) -> Result<(), PublishError> {
        if let Some(prefix) = reserved_prefix(subject) {
            return Err(self.output_failed(PublishError::new(PublishErrorKind::Reserved, subject).with_source(format!(
                "`{subject}` is under the reserved prefix `{prefix}`, which `publish_to` refuses; call `publish_to_reserved` if the subject is meant"
            ))));
        }
        self.publish_to_reserved(subject, value).await
    }

    /// [`Context::publish_to`] without the reserved-prefix check: the call opts in to publish
    /// under one of the [`RESERVED_PREFIXES`](crate::RESERVED_PREFIXES).
    pub async fn publish_to_reserved<T: Serialize + ?Sized>(
        &self,
        subject: &str,
        value: &T,
    ) -> Result<(), PublishError> {
        let message = self
            .encoded(subject, value)
            .map_err(|err| self.output_failed(err))?;
        self.publish_raw(message).await
    }

    /// Publishes a message as it is (with the input's correlation id when it sets none),
    /// confirmed like [`Context::publish`] when a stream stores its subject.
    pub async fn publish_raw(&self, mut message: OutboundMessage) -> Result<(), PublishError> {
        self.correlate(&mut message);
        let origin = self.next_origin();
        let result = self.publisher.publish_output(message, origin).await;
        result.map_err(|err| self.output_failed(err))
    }

    /// The origin of this handling's next output.
    fn next_origin(&self) -> Origin<'a> {
        Origin {
            delivery: self.delivery,
            registration: self.registration,
            output: self.outputs.next(),
        }
    }

    /// Keeps, for the settlement, the first output a stream did not confirm (the input then
    /// comes back) and the first that failed for good (the input then goes to the dead-letter
    /// subject, or ends); returns `err`. Whatever the handler answers after it, the input is
    /// not acknowledged without its outputs.
    pub(crate) fn output_failed(&self, err: PublishError) -> PublishError {
        let slot = if err.kind().is_permanent() {
            &self.unpublishable
        } else if err.kind() == PublishErrorKind::NotStored {
            &self.unconfirmed
        } else {
            return err;
        };
        if slot.get().is_none() {
            // The first one is kept.
            let _ = slot.set(err.to_string());
        }
        err
    }

    /// Sends `value` as a JSON request to `subject` and decodes the response as `R`.
    ///
    /// Errors: [`PublishErrorKind::NoResponders`] at once when nobody listens on the subject,
    /// [`PublishErrorKind::Timeout`] when no response came within `timeout`,
    /// [`PublishErrorKind::Decode`] when the response is not an `R`.
    pub async fn request<T: Serialize + ?Sized, R: DeserializeOwned>(
        &self,
        subject: &str,
        value: &T,
        timeout: Duration,
    ) -> Result<R, PublishError> {
        if let Some(prefix) = reserved_prefix(subject) {
            return Err(
                PublishError::new(PublishErrorKind::Reserved, subject).with_source(format!(
                    "`{subject}` is under the reserved prefix `{prefix}`, which a request refuses"
                )),
            );
        }
        request(self.publisher, subject, value, timeout, |m| {
            self.correlate(m)
        })
        .await
    }

    /// Sends `message` as the response to the request being handled: a plain publish to the
    /// requester's inbox (`message.subject`), with the input's correlation id. Not an output:
    /// no stream stores an inbox.
    ///
    /// A reply subject under a reserved prefix other than `_INBOX.` is refused (kind
    /// [`PublishErrorKind::Reserved`]): the requester chose it, and `$JS.API.STREAM.DELETE.X`
    /// or a `$KV.` key is not an inbox.
    pub async fn respond(&self, mut message: OutboundMessage) -> Result<(), PublishError> {
        refuse_reserved_reply(&message.subject)?;
        self.correlate(&mut message);
        self.publisher.publish(message).await
    }

    /// Sets the input's correlation id on `message`, unless it has one.
    fn correlate(&self, message: &mut OutboundMessage) {
        self.correlate_headers(&mut message.headers);
    }

    /// Sets the input's correlation id in `headers`, unless they have one.
    fn correlate_headers(&self, headers: &mut Headers) {
        if headers.get(CORRELATION_ID_HEADER).is_none()
            && let Some(id) = self.delivery.headers().get(CORRELATION_ID_HEADER)
        {
            headers.insert(CORRELATION_ID_HEADER, id);
        }
    }

    /// The first output a stream did not confirm during this handling, and why.
    pub(crate) fn unconfirmed(&self) -> Option<&str> {
        self.unconfirmed.get().map(String::as_str)
    }

    /// The first output of this handling that failed for good, and why.
    pub(crate) fn unpublishable(&self) -> Option<&str> {
        self.unpublishable.get().map(String::as_str)
    }
}

/// The subject `value` is published to, borrowed for as long as the program runs when it is the
/// type's [`Outgoing::SUBJECT`] (no placeholders to fill), so that a broker can use it without
/// a copy.
pub(crate) fn outgoing_subject<T: Outgoing>(value: &T) -> Result<Cow<'static, str>, PublishError> {
    Ok(match value.subject()? {
        Cow::Borrowed(subject) if subject == T::SUBJECT => Cow::Borrowed(T::SUBJECT),
        subject => {
            crate::reserved::refuse_filled_reserved(T::SUBJECT, &subject)?;
            Cow::Owned(subject.into_owned())
        }
    })
}

/// Sends `value` as a JSON request to `subject` through `publisher`, decodes the response.
pub(crate) async fn request<T: Serialize + ?Sized, R: DeserializeOwned>(
    publisher: &dyn Publish,
    subject: &str,
    value: &T,
    timeout: Duration,
    prepare: impl FnOnce(&mut OutboundMessage),
) -> Result<R, PublishError> {
    let payload = Json
        .encode(value)
        .map_err(|e| PublishError::new(PublishErrorKind::Encode, subject).with_source(e))?;
    let mut message = OutboundMessage::new(subject, payload);
    prepare(&mut message);
    let response = publisher.request(message, timeout).await?;
    // Read directly (not through `Codec::decode`, which wants a `'static` type).
    serde_json::from_slice::<R>(&response).map_err(|e| {
        PublishError::new(PublishErrorKind::Decode, subject).with_source(format!(
            "the response to the request on `{subject}` is not a `{}`: {e}",
            std::any::type_name::<R>()
        ))
    })
}

impl std::fmt::Debug for Context<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("registration", &self.registration)
            .field("delivery", self.delivery)
            .finish_non_exhaustive()
    }
}
