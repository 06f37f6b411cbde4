//! Opening a registration's subscription (Core) or pull consumer (JetStream).

use ruststream::settle::DeliveryModel;
use ruststream::{Endpoint, Error, ErrorKind};

use crate::transport::{ConsumerSpec, Subscription, Transport, TransportErrorKind};

/// Subscribes (Core) or opens the pull consumer (JetStream) of `endpoint`.
pub(super) async fn open(
    transport: &dyn Transport,
    endpoint: &Endpoint,
) -> Result<Subscription, Error> {
    open_from(transport, endpoint, None).await
}

/// [`open`]; a JetStream consumer that has to be created starts at stream sequence `resume`
/// when one is given (where the registration stood), not where the descriptor says.
pub(super) async fn open_from(
    transport: &dyn Transport,
    endpoint: &Endpoint,
    resume: Option<u64>,
) -> Result<Subscription, Error> {
    let info = endpoint.info();
    let name = &info.name;
    match info.descriptor.model {
        DeliveryModel::JetStream => {
            let spec = consumer_spec(endpoint);
            let stream = spec.stream.clone();
            let consumed = match resume {
                Some(start_sequence) => transport.resume(spec, start_sequence).await,
                None => transport.consume(spec).await,
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
