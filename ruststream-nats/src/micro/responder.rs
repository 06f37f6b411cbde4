//! The subscriptions that answer the service protocol. async-nats's own `service` would
//! subscribe each endpoint itself and answer through its own respond path, bypassing the
//! registrations' settlement, so only its response types are used (`service.rs`), answered
//! from subscriptions of our own.

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::{BoxStream, select_all};
use ruststream::app::ServiceIdentity;
use ruststream::telemetry::HandlerTotals;
use ruststream::{Endpoint, Env, Error, ErrorKind, Headers};
use tokio::sync::watch;
use tokio::time::Instant;

use super::service::{MicroService, Verb};
use crate::transport::{CorePubSub, RawMessage, Transport, TransportError, Unsubscribe};

/// The running service: its subscriptions, and what it answers with.
pub(crate) struct Responder {
    service: MicroService,
    transport: Arc<dyn CorePubSub>,
    requests: BoxStream<'static, (Verb, Result<RawMessage, TransportError>)>,
    unsubscribes: Vec<Box<dyn Unsubscribe>>,
}

/// The service of the request handlers among `endpoints`, when the app advertises them (its
/// [`ServiceIdentity`] is in `env`) and has any.
pub(crate) fn service<'a>(
    env: &Env,
    endpoints: impl IntoIterator<Item = &'a Endpoint>,
    quote_payload_values: bool,
) -> Option<MicroService> {
    MicroService::new(
        env.get::<ServiceIdentity>()?,
        endpoints,
        quote_payload_values,
    )
}

/// Subscribes the service protocol's subjects for `service`. Flushed: once it returns, the
/// server routes the protocol's requests here.
pub(crate) async fn open(
    service: MicroService,
    transport: &Arc<dyn Transport>,
) -> Result<Responder, Error> {
    let mut streams = Vec::new();
    let mut unsubscribes: Vec<Box<dyn Unsubscribe>> = Vec::new();
    for (verb, subject) in service.subjects() {
        match transport.subscribe(subject.clone(), None).await {
            Ok((messages, unsubscribe)) => {
                streams.push(messages.map(move |message| (verb, message)).boxed());
                unsubscribes.push(unsubscribe);
            }
            Err(err) => {
                for unsubscribe in unsubscribes {
                    unsubscribe.stop().await;
                }
                return Err(Error::new(
                    ErrorKind::Broker,
                    format!(
                        "cannot subscribe to `{subject}` for the micro service of the request handlers (turn it off with `.micro_service(false)`)"
                    ),
                )
                .with_source(err));
            }
        }
    }
    if let Err(err) = transport.flush().await {
        tracing::warn!(error = %err, "flushing the micro service's subscriptions failed");
    }
    Ok(Responder {
        service,
        transport: transport.clone(),
        requests: select_all(streams).boxed(),
        unsubscribes,
    })
}

impl Responder {
    /// The totals registration `name` feeds, when it is an endpoint.
    pub(crate) fn totals(&self, name: &str) -> Option<Arc<HandlerTotals>> {
        self.service.totals(name)
    }

    /// Answers every request until the broker stops, then unsubscribes.
    pub(crate) async fn run(self, mut stop: watch::Receiver<Option<Instant>>) {
        let Self {
            service,
            transport,
            mut requests,
            unsubscribes,
        } = self;
        let mut ended = false;
        while !ended {
            tokio::select! {
                biased;
                () = stopped(&mut stop) => break,
                next = requests.next() => match next {
                    Some((verb, Ok(request))) => answer(&service, &*transport, verb, request).await,
                    Some((_, Err(err))) => {
                        tracing::warn!(error = %err, "a micro service subscription failed");
                    }
                    // The connection closed for good: nothing more to answer.
                    None => ended = true,
                },
            }
        }
        if ended {
            stopped(&mut stop).await;
        }
        for unsubscribe in unsubscribes {
            unsubscribe.stop().await;
        }
    }
}

/// Resolves once the broker stops (its signal holds the drain deadline, or is gone).
async fn stopped(stop: &mut watch::Receiver<Option<Instant>>) {
    // The guard `wait_for` returns is dropped here: it is not `Send`.
    let _ = stop.wait_for(Option::is_some).await.map(drop);
}

/// Sends `service`'s response to `verb` to the request's reply subject.
async fn answer(
    service: &MicroService,
    transport: &dyn CorePubSub,
    verb: Verb,
    request: RawMessage,
) {
    let Some(reply) = request.reply else {
        return;
    };
    // The requester chose the reply subject: one under a reserved prefix (a `$JS.API.` call)
    // is not answered, as a request handler's is not.
    if let Some(prefix) = ruststream::reserved_prefix(&reply)
        && prefix != "_INBOX."
    {
        tracing::warn!(reply = %reply, "a micro service request's reply subject is reserved; not answered");
        return;
    }
    let response = match service.answer(verb) {
        Ok(response) => response,
        Err(err) => {
            tracing::error!(error = %err, "the micro service's response does not encode");
            return;
        }
    };
    if let Err(err) = transport
        .publish(reply.to_shared(), Headers::new(), response)
        .await
    {
        tracing::debug!(error = %err, subject = %request.subject, "the micro service's response was not sent");
    }
}
