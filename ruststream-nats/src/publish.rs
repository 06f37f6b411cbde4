//! What a handler publishes (a `reply` value, `ctx.publish(..)`): a Core NATS publish on the
//! app's connection. A subject a stream stores is stored by that stream as usual.

use std::sync::Arc;

use futures::future::BoxFuture;
use ruststream::{OutboundMessage, Publish, PublishError, PublishErrorKind};

use crate::subject::subject_problem;
use crate::transport::{Transport, TransportErrorKind};

/// Publishes a handler's messages through the transport.
#[derive(Clone)]
pub(crate) struct NatsPublisher {
    transport: Arc<dyn Transport>,
}

impl NatsPublisher {
    pub(crate) fn new(transport: Arc<dyn Transport>) -> Self {
        Self { transport }
    }
}

impl Publish for NatsPublisher {
    fn publish(&self, message: OutboundMessage) -> BoxFuture<'_, Result<(), PublishError>> {
        Box::pin(async move {
            let subject = message.subject;
            if let Some(problem) = subject_problem(&subject, false) {
                return Err(
                    PublishError::new(PublishErrorKind::InvalidSubject, &*subject).with_source(
                        format!("`{subject}` is not a subject to publish to: {problem}"),
                    ),
                );
            }
            self.transport
                .publish(Arc::clone(&subject), message.headers, message.payload)
                .await
                .map_err(|err| {
                    let kind = match err.kind {
                        TransportErrorKind::Invalid => PublishErrorKind::InvalidSubject,
                        _ => PublishErrorKind::Broker,
                    };
                    PublishError::new(kind, &*subject).with_source(err)
                })
        })
    }
}
