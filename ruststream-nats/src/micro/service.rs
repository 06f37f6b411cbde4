//! What the app's micro service says about itself: the `io.nats.micro.v1` ping, info and
//! stats responses, in async-nats's own types, the stats read from each endpoint's
//! [`HandlerTotals`] (the counts the runtime keeps as it handles each delivery).

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use async_nats::service::{Info, PingResponse, Stats, endpoint, error};
use bytes::Bytes;
use ruststream::app::{ServiceIdentity, is_endpoint, service_name};
use ruststream::asyncapi::{channel_id, operation_id};
use ruststream::registration::{Handled, RegistrationInfo};
use ruststream::telemetry::{HandlerTotals, outcome_label};
use ruststream::{Endpoint, HandlerOutcome};

use crate::executor::decode_error_shape;

/// The service: who it is, and its endpoints with their totals.
pub(crate) struct MicroService {
    identity: ServiceIdentity,
    /// This instance's id, unique among the instances of the service.
    id: String,
    started: async_nats::datetime::DateTime,
    endpoints: Vec<ServiceEndpoint>,
    /// Whether a payload that did not decode is described with the decoder's whole message
    /// (which may quote payload values) in `last_error`, as in the logs.
    quote_payload_values: bool,
}

struct ServiceEndpoint {
    registration: String,
    info: endpoint::Info,
    totals: Arc<HandlerTotals>,
}

/// The three requests of the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verb {
    Ping,
    Info,
    Stats,
}

impl Verb {
    pub(crate) const ALL: [Self; 3] = [Self::Ping, Self::Info, Self::Stats];

    fn token(self) -> &'static str {
        match self {
            Self::Ping => "PING",
            Self::Info => "INFO",
            Self::Stats => "STATS",
        }
    }
}

impl MicroService {
    /// The service `identity` of `endpoints`' request handlers; `None` when none answers
    /// requests.
    pub(crate) fn new<'a>(
        identity: &ServiceIdentity,
        endpoints: impl IntoIterator<Item = &'a Endpoint>,
        quote_payload_values: bool,
    ) -> Option<Self> {
        let endpoints: Vec<ServiceEndpoint> = endpoints
            .into_iter()
            .map(Endpoint::info)
            .filter(|r| is_endpoint(r))
            .map(|r| ServiceEndpoint {
                registration: r.name.clone(),
                info: endpoint_info(r),
                totals: Arc::default(),
            })
            .collect();
        (!endpoints.is_empty()).then(|| Self {
            identity: identity.clone(),
            id: instance_id(),
            started: async_nats::datetime::now(),
            endpoints,
            quote_payload_values,
        })
    }

    /// The totals registration `name` feeds, when it is an endpoint.
    pub(crate) fn totals(&self, name: &str) -> Option<Arc<HandlerTotals>> {
        self.endpoints
            .iter()
            .find(|e| e.registration == name)
            .map(|e| Arc::clone(&e.totals))
    }

    /// Every subject the service answers: `$SRV.<VERB>`, `$SRV.<VERB>.<name>` and
    /// `$SRV.<VERB>.<name>.<id>` for each verb.
    pub(crate) fn subjects(&self) -> Vec<(Verb, String)> {
        let (name, id) = (&self.identity.name, &self.id);
        Verb::ALL
            .into_iter()
            .flat_map(|verb| {
                let base = format!("$SRV.{}", verb.token());
                [
                    (verb, base.clone()),
                    (verb, format!("{base}.{name}")),
                    (verb, format!("{base}.{name}.{id}")),
                ]
            })
            .collect()
    }

    /// The response to `verb`, as JSON.
    pub(crate) fn answer(&self, verb: Verb) -> Result<Bytes, serde_json::Error> {
        match verb {
            Verb::Ping => serde_json::to_vec(&self.ping()),
            Verb::Info => serde_json::to_vec(&self.info()),
            Verb::Stats => serde_json::to_vec(&self.stats()),
        }
        .map(Bytes::from)
    }

    fn metadata() -> HashMap<String, String> {
        HashMap::from([
            (
                "framework".to_owned(),
                format!("RustStream {}", env!("CARGO_PKG_VERSION")),
            ),
            ("asyncapi".to_owned(), "3.0.0".to_owned()),
        ])
    }

    fn ping(&self) -> PingResponse {
        PingResponse {
            kind: "io.nats.micro.v1.ping_response".to_owned(),
            name: self.identity.name.clone(),
            id: self.id.clone(),
            version: self.identity.version.clone(),
            metadata: Self::metadata(),
        }
    }

    fn info(&self) -> Info {
        Info {
            kind: "io.nats.micro.v1.info_response".to_owned(),
            name: self.identity.name.clone(),
            id: self.id.clone(),
            description: self.identity.description.clone(),
            version: self.identity.version.clone(),
            metadata: Self::metadata(),
            endpoints: self.endpoints.iter().map(|e| e.info.clone()).collect(),
        }
    }

    fn stats(&self) -> Stats {
        Stats {
            kind: "io.nats.micro.v1.stats_response".to_owned(),
            name: self.identity.name.clone(),
            id: self.id.clone(),
            version: self.identity.version.clone(),
            started: self.started,
            endpoints: self
                .endpoints
                .iter()
                .map(|e| self.endpoint_stats(e))
                .collect(),
        }
    }

    fn endpoint_stats(&self, e: &ServiceEndpoint) -> endpoint::Stats {
        let totals = e.totals.read();
        let average = match u32::try_from(totals.handled) {
            Ok(0) => Duration::ZERO,
            Ok(n) => totals.took / n,
            Err(_) => Duration::from_nanos(
                u64::try_from(totals.took.as_nanos() / u128::from(totals.handled))
                    .unwrap_or(u64::MAX),
            ),
        };
        endpoint::Stats {
            name: e.info.name.clone(),
            subject: e.info.subject.clone(),
            requests: usize::try_from(totals.handled).unwrap_or(usize::MAX),
            errors: usize::try_from(totals.failed).unwrap_or(usize::MAX),
            processing_time: totals.took,
            average_processing_time: average,
            last_error: totals
                .last_failure
                .as_ref()
                .map(|handled| last_error(handled, self.quote_payload_values)),
            data: None,
            queue_group: e.info.queue_group.clone(),
        }
    }
}

/// What `nats micro info` shows of registration `r`: its name as an endpoint name, its
/// subject and queue group, and where the AsyncAPI document (`asyncapi` subcommand) describes
/// it.
fn endpoint_info(r: &RegistrationInfo) -> endpoint::Info {
    let mut metadata = HashMap::from([
        ("registration".to_owned(), r.name.clone()),
        (
            "asyncapi_operation".to_owned(),
            format!("#/operations/{}", operation_id(&r.name)),
        ),
        (
            "asyncapi_channel".to_owned(),
            format!("#/channels/{}", channel_id(&r.descriptor.subject)),
        ),
    ]);
    if let Some(group) = &r.group {
        metadata.insert("group".to_owned(), group.clone());
    }
    endpoint::Info {
        name: service_name(&r.name),
        subject: r.descriptor.subject.clone(),
        queue_group: r.descriptor.queue_group.clone().unwrap_or_default(),
        metadata,
    }
}

/// A handling that was not an answer, as the protocol's `last_error` (`code:text`): 400 for a
/// request that did not decode, 500 for the rest.
fn last_error(handled: &Handled, quote_payload_values: bool) -> error::Error {
    let (code, status) = match handled {
        Handled::Outcome(outcome) => (500, returned(outcome)),
        Handled::Undecodable(message) if quote_payload_values => (400, message.clone()),
        Handled::Undecodable(message) => (400, decode_error_shape(message)),
        Handled::Panicked(panic) => (500, format!("the handler panicked: {panic}")),
        Handled::TimedOut(after) => (
            500,
            format!("the handler ran past its timeout of {after:?} and was cancelled"),
        ),
        Handled::Failed(error) => (500, format!("the handler failed: {error}")),
        Handled::Unpublishable(error) => (500, format!("the answer was not sent: {error}")),
        Handled::PastCap => (
            500,
            "the request arrived past its attempt cap; the handler did not run".to_owned(),
        ),
        other => (
            500,
            format!("the handling ended as {}", outcome_label(other)),
        ),
    };
    error::Error { status, code }
}

/// `the handler returned retry()`, as the handler wrote it.
fn returned(outcome: &HandlerOutcome) -> String {
    let written = match outcome {
        HandlerOutcome::Ack => "ack()".to_owned(),
        HandlerOutcome::Retry => "retry()".to_owned(),
        HandlerOutcome::RetryAfter(delay) => format!("retry_after({delay:?})"),
        HandlerOutcome::Drop => "drop()".to_owned(),
        other => format!("{other:?}"),
    };
    format!("the handler returned {written} instead of an answer")
}

/// An instance id: 32 hex digits from the process's random hash keys, the time, the process
/// id and a counter, so that two instances (or two brokers of one app) never share one.
fn instance_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let seed = (
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed),
    );
    let high = RandomState::new().hash_one(seed);
    let low = RandomState::new().hash_one((high, seed));
    format!("{high:016x}{low:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_errors_say_what_the_handler_did_without_payload_values() {
        let retry = last_error(&Handled::Outcome(HandlerOutcome::retry()), false);
        assert_eq!(retry.code, 500);
        assert_eq!(
            retry.status,
            "the handler returned retry() instead of an answer"
        );
        let undecodable = Handled::Undecodable(
            "the payload does not decode as app::Card: invalid type: string \"4111 1111\", expected u64 at line 1 column 9"
                .to_owned(),
        );
        let shown = last_error(&undecodable, false);
        assert_eq!(shown.code, 400);
        assert!(!shown.status.contains("4111"), "{}", shown.status);
        assert!(last_error(&undecodable, true).status.contains("4111"));
    }

    #[test]
    fn instance_ids_differ() {
        assert_ne!(instance_id(), instance_id());
        assert_eq!(instance_id().len(), 32);
    }
}
