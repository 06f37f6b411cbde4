//! Opening a registration's subscription (Core) or pull consumer (JetStream).

use ruststream::settle::DeliveryModel;
use ruststream::{Endpoint, Error, ErrorKind};

use crate::source::{Progress, Resume};
use crate::transport::{ConsumerSpec, StreamPlace, Subscription, Transport, TransportErrorKind};

/// Which stream `stream` is now; `None` when the transport cannot tell or the look failed
/// (opening the consumer says what is wrong).
async fn stream_place(transport: &dyn Transport, stream: &str) -> Option<StreamPlace> {
    match transport.stream_place(stream.to_owned()).await {
        Ok(place) => place,
        Err(err) => {
            tracing::debug!(stream, %err, "cannot tell which stream this is");
            None
        }
    }
}

/// Subscribes (Core) or opens the pull consumer (JetStream) of `endpoint`, first or again after
/// it ended. A JetStream consumer that has to be created starts where `progress` says the
/// registration stands in the stream it finds ([`Progress::resume_in`]): at the lowest sequence
/// it owes, or where the descriptor says when nothing was taken yet or the stream was created
/// again. The look at the stream and the consumer's creation are two requests: a stream created
/// again between them, already holding as many messages, is not told apart.
pub(super) async fn open(
    transport: &dyn Transport,
    endpoint: &Endpoint,
    progress: &Progress,
) -> Result<Subscription, Error> {
    let info = endpoint.info();
    let name = &info.name;
    match info.descriptor.model {
        DeliveryModel::JetStream => {
            let spec = consumer_spec(endpoint);
            let stream = spec.stream.clone();
            let place = stream_place(transport, &stream).await;
            let consumed = match progress.resume_in(name, place.as_ref()) {
                Resume::At(start_sequence) => transport.resume(spec, start_sequence).await,
                Resume::Descriptor => transport.consume(spec).await,
            };
            consumed.map_err(|err| {
                let kind = match err.kind {
                    TransportErrorKind::ConsumerConflict => ErrorKind::Broker,
                    TransportErrorKind::Invalid => ErrorKind::Config,
                    _ => ErrorKind::Broker,
                };
                Error::new(
                    kind,
                    format!("registration `{name}` cannot read stream `{stream}`"),
                )
                .with_source(err)
            })
        }
        DeliveryModel::Core => {
            let subject = info.descriptor.subject.clone();
            transport
                .subscribe(subject.clone(), info.descriptor.queue_group.clone())
                .await
                .map_err(|err| {
                    Error::new(
                        ErrorKind::Broker,
                        format!("registration `{name}` cannot subscribe to `{subject}`"),
                    )
                    .with_source(err)
                })
        }
    }
}

/// The consumer a JetStream endpoint reads through, from its descriptor's facts.
///
/// `batch` is a batch handler's batch size; for a handler of single messages, no more than it
/// handles at once (`concurrency`). The async-nats transport starts its lookahead there and
/// sizes it to the handlers' measured pace (`transport/nats/pull.rs`); the in-process NATS holds
/// that many in the client.
pub(super) fn consumer_spec(endpoint: &Endpoint) -> ConsumerSpec {
    let mut spec = crate::descriptor::consumer_spec(&endpoint.info().descriptor);
    if !endpoint.is_batch() {
        spec.batch = spec.batch.min(endpoint.policy().concurrency.get()).max(1);
    }
    spec
}

/// How many ready messages a batch handler takes at once.
pub(super) fn batch_size(endpoint: &Endpoint) -> usize {
    endpoint
        .info()
        .descriptor
        .batch
        .unwrap_or(crate::descriptor::DEFAULT_BATCH)
        .get()
}
