//! The one thing every broker offers the runtime besides deliveries: publishing.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;

use crate::delivery::{Delivery, Headers, OutboundMessage};
use crate::error::{PublishError, PublishErrorKind};

/// The header that carries a correlation id from a handler's input to everything it publishes.
///
/// When a delivery carries it, every message its handler publishes (a `reply` value, a
/// [`Publisher`](crate::Publisher) output, `ctx.publish(..)`, the response to a request) carries
/// the same value, unless the message sets the header itself.
pub const CORRELATION_ID_HEADER: &str = "x-correlation-id";

/// The handling an output comes from: which delivery, which registration, and which of the
/// handler's outputs it is (0 for the first message the handler publishes, 1 for the next...).
///
/// A broker uses it to confirm outputs stored by a stream and to give them an id derived from
/// the input, so that a redelivered input does not store its outputs twice.
#[derive(Debug, Clone, Copy)]
pub struct Origin<'a> {
    /// The delivery being handled.
    pub delivery: &'a Delivery,
    /// The registration handling it.
    pub registration: &'a str,
    /// Which output of this handling the message is, counted from 0.
    pub output: u32,
}

/// A value the runtime encoded and publishes as an output of a handling: a `reply` handler's
/// `Ok` value, or what `ctx.publish(&value)` sends. For a Core request (the delivery carries a
/// reply inbox), the same headers and payload also go to the inbox as the response.
///
/// The parts a broker would otherwise build twice are given once: the subject as the value
/// names it (borrowed when it is known at compile time, so a broker can use it without a
/// copy), one set of headers and one payload for the output and the response.
#[derive(Debug)]
#[non_exhaustive]
pub struct EncodedOutput<'a> {
    /// The output's subject.
    pub subject: Cow<'static, str>,
    /// The headers of the output, and of the response: the `content-type`, the correlation id.
    pub headers: Headers,
    /// The encoded value.
    pub payload: Bytes,
    /// The handling the output comes from.
    pub origin: Origin<'a>,
    /// The reply inbox of the request being handled, which the response goes to.
    pub inbox: Option<&'a Arc<str>>,
}

impl<'a> EncodedOutput<'a> {
    /// An output of handling `origin` to `subject`, with no response.
    pub fn new(
        subject: Cow<'static, str>,
        headers: Headers,
        payload: Bytes,
        origin: Origin<'a>,
    ) -> Self {
        Self {
            subject,
            headers,
            payload,
            origin,
            inbox: None,
        }
    }

    /// The same output, and the response to the request whose reply inbox is `inbox`.
    pub fn responding_to(mut self, inbox: Option<&'a Arc<str>>) -> Self {
        self.inbox = inbox;
        self
    }
}

/// A stream's acknowledgement of a stored publish ([`Publish::publish_stored`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredAck {
    /// The stream that stored the message.
    pub stream: String,
    /// Its sequence in the stream (for a duplicate, the first copy's).
    pub sequence: u64,
    /// Whether the stream had already stored a message with the same id (on NATS, its
    /// `Nats-Msg-Id`) within its duplicate window, and dropped this one.
    pub duplicate: bool,
}

/// Publishes messages on a broker. Implemented by each broker; the runtime and
/// [`Context::publish`](crate::Context::publish) use it.
pub trait Publish: Send + Sync {
    /// Publishes `message`; resolves once the broker has taken it (for a stream subject, once
    /// the stream stored it).
    fn publish(&self, message: OutboundMessage) -> BoxFuture<'_, Result<(), PublishError>>;

    /// Publishes `message` as an output of handling `origin`. A broker that stores outputs
    /// confirms and deduplicates them here; the default publishes as [`Publish::publish`].
    fn publish_output<'a>(
        &'a self,
        message: OutboundMessage,
        origin: Origin<'a>,
    ) -> BoxFuture<'a, Result<(), PublishError>> {
        let _ = origin;
        self.publish(message)
    }

    /// Publishes `output` as [`Publish::publish_output`] would and, when it carries a reply
    /// inbox, the same headers and payload to the inbox as the response: first when the output
    /// is not confirmed (nothing can refuse a Core publish), after the confirmed output
    /// otherwise (a refused output sends no response). The error's
    /// [`subject`](PublishError::subject) says which of the two failed. The default publishes
    /// each as its own message.
    fn publish_encoded<'a>(
        &'a self,
        output: EncodedOutput<'a>,
    ) -> BoxFuture<'a, Result<(), PublishError>> {
        Box::pin(async move {
            let EncodedOutput {
                subject,
                headers,
                payload,
                origin,
                inbox,
            } = output;
            let output = OutboundMessage {
                subject: Arc::from(subject),
                headers,
                payload,
            };
            let Some(inbox) = inbox else {
                return self.publish_output(output, origin).await;
            };
            let response = OutboundMessage {
                subject: Arc::clone(inbox),
                headers: output.headers.clone(),
                payload: output.payload.clone(),
            };
            if self.confirms(&output.subject) {
                self.publish_output(output, origin).await?;
                self.publish(response).await
            } else {
                self.publish(response).await?;
                self.publish_output(output, origin).await
            }
        })
    }

    /// Whether a publish to `subject` waits for a confirmation (a stream stores it, as last
    /// learned). The default [`Publish::publish_encoded`] asks it to order a response: first
    /// when the output is not confirmed (nothing can refuse it), after the confirmed output
    /// otherwise. A publisher that implements `publish_encoded` itself orders the response
    /// there, and still answers here for a wrapper that forwards `publish_output` and
    /// `confirms` to it but keeps the default `publish_encoded`. `false` by default.
    fn confirms(&self, subject: &str) -> bool {
        let _ = subject;
        false
    }

    /// An owned handle on this publisher, for a handler call that runs on a registration's
    /// threads (`.threads(n)`) while the broker keeps the publisher it lent. `None` by
    /// default: such a registration's handler then runs on the app's runtime.
    fn to_shared(&self) -> Option<Arc<dyn Publish>> {
        None
    }

    /// Publishes `message` to the stream that stores its subject, whatever the broker last
    /// learned of its streams, and returns the stream's acknowledgement ([`StoredAck`]); what a
    /// broker crate's own client offers from a handler's [`Context`](crate::Context) or a
    /// [`RunningApp`](crate::RunningApp) (a NATS JetStream publish with expectations, say). The
    /// default cannot: an error of kind [`PublishErrorKind::Unsupported`].
    fn publish_stored(
        &self,
        message: OutboundMessage,
    ) -> BoxFuture<'_, Result<StoredAck, PublishError>> {
        Box::pin(async move {
            Err(
                PublishError::new(PublishErrorKind::Unsupported, &*message.subject)
                    .with_source("this broker does not publish to streams"),
            )
        })
    }

    /// Sends `message` as a request and waits up to `timeout` for one response, whose payload
    /// it returns. The default cannot: an error of kind
    /// [`PublishErrorKind::Unsupported`].
    fn request(
        &self,
        message: OutboundMessage,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<Bytes, PublishError>> {
        let _ = timeout;
        Box::pin(async move {
            Err(
                PublishError::new(PublishErrorKind::Unsupported, &*message.subject)
                    .with_source("this broker does not send requests"),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// Records each publish as `"<how> <subject>"`, confirms stored outputs when `confirms`,
    /// and fails the publish to `failing`.
    struct Recording {
        confirms: bool,
        failing: Option<&'static str>,
        sent: Mutex<Vec<(String, Headers)>>,
    }

    impl Recording {
        fn new(confirms: bool, failing: Option<&'static str>) -> Self {
            Self {
                confirms,
                failing,
                sent: Mutex::new(Vec::new()),
            }
        }

        fn record(&self, how: &str, message: OutboundMessage) -> Result<(), PublishError> {
            if self.failing == Some(&*message.subject) {
                return Err(PublishError::new(
                    PublishErrorKind::NotStored,
                    &*message.subject,
                ));
            }
            self.sent
                .lock()
                .expect("not poisoned")
                .push((format!("{how} {}", message.subject), message.headers));
            Ok(())
        }

        fn subjects(&self) -> Vec<String> {
            let sent = self.sent.lock().expect("not poisoned");
            sent.iter().map(|(subject, _)| subject.clone()).collect()
        }
    }

    impl Publish for Recording {
        fn publish(&self, message: OutboundMessage) -> BoxFuture<'_, Result<(), PublishError>> {
            let result = self.record("publish", message);
            Box::pin(async move { result })
        }

        fn publish_output<'a>(
            &'a self,
            message: OutboundMessage,
            origin: Origin<'a>,
        ) -> BoxFuture<'a, Result<(), PublishError>> {
            let result = self.record(&format!("output#{}", origin.output), message);
            Box::pin(async move { result })
        }

        fn confirms(&self, _subject: &str) -> bool {
            self.confirms
        }
    }

    fn answer<'a>(input: &'a Delivery, inbox: Option<&'a Arc<str>>) -> EncodedOutput<'a> {
        let mut headers = Headers::new();
        headers.insert("content-type", "application/json");
        let origin = Origin {
            delivery: input,
            registration: "answer",
            output: 3,
        };
        EncodedOutput::new(
            Cow::Borrowed("answered"),
            headers,
            Bytes::from_static(b"{}"),
            origin,
        )
        .responding_to(inbox)
    }

    /// A request answered through the default `publish_encoded` of a publisher that confirms
    /// when `confirms` and fails the publish to `failing`: what it sent, and the result.
    fn answered(
        confirms: bool,
        failing: Option<&'static str>,
    ) -> (Recording, Result<(), PublishError>) {
        let input = Delivery::new("asked", Bytes::from_static(b"{}"));
        let inbox: Arc<str> = Arc::from("_INBOX.1");
        let publisher = Recording::new(confirms, failing);
        let result =
            futures::executor::block_on(publisher.publish_encoded(answer(&input, Some(&inbox))));
        (publisher, result)
    }

    #[test]
    fn the_default_sends_the_response_before_an_unconfirmed_output() {
        let (publisher, result) = answered(false, None);
        result.expect("published");
        assert_eq!(
            publisher.subjects(),
            ["publish _INBOX.1", "output#3 answered"]
        );
        let sent = publisher.sent.lock().expect("not poisoned");
        assert_eq!(sent[0].1, sent[1].1, "the same headers on both");
    }

    #[test]
    fn the_default_sends_the_response_after_a_confirmed_output() {
        let (publisher, result) = answered(true, None);
        result.expect("published");
        assert_eq!(
            publisher.subjects(),
            ["output#3 answered", "publish _INBOX.1"]
        );
    }

    #[test]
    fn the_default_sends_no_response_after_a_failing_confirmed_output_and_names_it() {
        let (publisher, result) = answered(true, Some("answered"));
        let err = result.expect_err("the output fails");
        assert_eq!(err.subject(), "answered");
        assert!(
            publisher.subjects().is_empty(),
            "{:?}",
            publisher.subjects()
        );
    }

    #[test]
    fn the_default_names_the_failing_subject_whichever_it_is() {
        // Unconfirmed: the response went first, the output failed after it.
        let (publisher, result) = answered(false, Some("answered"));
        assert_eq!(result.expect_err("the output fails").subject(), "answered");
        assert_eq!(publisher.subjects(), ["publish _INBOX.1"]);
        // Confirmed: the output was stored, the response failed.
        let (publisher, result) = answered(true, Some("_INBOX.1"));
        assert_eq!(
            result.expect_err("the response fails").subject(),
            "_INBOX.1"
        );
        assert_eq!(publisher.subjects(), ["output#3 answered"]);
        // Unconfirmed, the response fails: the output is not sent.
        let (publisher, result) = answered(false, Some("_INBOX.1"));
        assert_eq!(
            result.expect_err("the response fails").subject(),
            "_INBOX.1"
        );
        assert!(publisher.subjects().is_empty());
    }

    #[test]
    fn the_default_without_an_inbox_publishes_the_output_only() {
        let input = Delivery::new("asked", Bytes::from_static(b"{}"));
        for confirms in [false, true] {
            let publisher = Recording::new(confirms, None);
            futures::executor::block_on(publisher.publish_encoded(answer(&input, None)))
                .expect("published");
            assert_eq!(publisher.subjects(), ["output#3 answered"]);
        }
    }

    #[test]
    fn the_default_stored_publish_is_unsupported_and_sends_nothing() {
        let publisher = Recording::new(true, None);
        let message = OutboundMessage::new("ledger.entries", Bytes::from_static(b"{}"));
        let err = futures::executor::block_on(publisher.publish_stored(message))
            .expect_err("no streams here");
        assert_eq!(err.kind(), PublishErrorKind::Unsupported);
        assert_eq!(err.subject(), "ledger.entries");
        assert!(publisher.subjects().is_empty());
    }
}
