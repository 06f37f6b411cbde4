//! The one per-delivery hook of operations: a span per delivery following OpenTelemetry's
//! messaging conventions, and the registration's metrics (`ruststream::telemetry`).
//!
//! The span (`process <subject>`, kind consumer) carries `messaging.system = "nats"`,
//! `messaging.destination.name` (the subject), `messaging.operation.type/name = "process"`,
//! `messaging.message.id` (the `Nats-Msg-Id` header, when set), `messaging.consumer.group.name`
//! (the durable consumer or queue group), `messaging.message.body.size`,
//! `messaging.nats.stream`, `messaging.nats.stream_sequence`, `messaging.nats.delivered`
//! (how many times the server delivered it), `ruststream.registration`, and once handled
//! `ruststream.outcome` (what the handler said) and `ruststream.sent` (what went to the
//! server: the acknowledgement, a dead letter, a retry copy). The handler's events, and the
//! settlement's, happen inside it.

use std::future::Future;

use ruststream::registration::Handled;
use ruststream::settle::{Decision, Settle};
use ruststream::telemetry::outcome_label;
use ruststream::{Delivery, Endpoint};
use tokio::time::Instant;
use tracing::Instrument;

use crate::executor::Executor;
use crate::jetstream_info::JetStreamInfo;

/// The span of one delivery, with the fields known before the handler runs.
pub(crate) fn delivery_span(endpoint: &Endpoint, delivery: &Delivery) -> tracing::Span {
    let info = endpoint.info();
    let js = delivery.extension::<JetStreamInfo>();
    let group = js
        .map(|js| js.consumer.as_str())
        .or(info.descriptor.queue_group.as_deref());
    tracing::info_span!(
        "ruststream.delivery",
        otel.name = %format_args!("process {}", delivery.subject()),
        otel.kind = "consumer",
        messaging.system = "nats",
        messaging.destination.name = delivery.subject(),
        messaging.operation.type = "process",
        messaging.operation.name = "process",
        messaging.message.id = delivery.headers().get("Nats-Msg-Id"),
        messaging.consumer.group.name = group,
        messaging.message.body.size = delivery.payload().len(),
        messaging.nats.stream = js.map(|js| js.stream.as_str()),
        messaging.nats.stream_sequence = js.map(|js| js.stream_sequence),
        messaging.nats.delivered = delivery.delivered(),
        ruststream.registration = endpoint.name(),
        ruststream.outcome = tracing::field::Empty,
        ruststream.sent = tracing::field::Empty,
    )
}

/// What was sent to the server for `decision`: `+ACK`, `-NAK`, `+TERM`, `nothing`, with
/// `dead letter` and `retry copy` added.
fn sent(decision: &Decision) -> String {
    let mut sent = match decision.settle {
        Settle::Send(kind) => kind.to_string(),
        Settle::Unsupported(_) | Settle::Nothing => "nothing".to_owned(),
    };
    if decision.dead_letter {
        sent.push_str(", dead letter");
    }
    if decision.copy.is_some() {
        sent.push_str(", retry copy");
    }
    sent
}

/// Runs `dispatch` (the handler and its decision) for `deliveries` inside `span`, counted in
/// the registration's metrics; records the outcomes on the span.
pub(crate) async fn observed(
    span: &tracing::Span,
    executor: &Executor,
    deliveries: usize,
    dispatch: impl Future<Output = Vec<(Handled, Decision)>>,
) -> Vec<(Handled, Decision)> {
    let metrics = &executor.metrics;
    for _ in 0..deliveries {
        metrics.started();
    }
    let began = Instant::now();
    let decided = dispatch.instrument(span.clone()).await;
    let took = began.elapsed();
    for (handled, _) in &decided {
        metrics.finished(handled, took);
    }
    // A unit handed no decision back still leaves the in-flight gauge.
    for _ in decided.len()..deliveries {
        metrics.finished(&Handled::NoOutcome(String::new()), took);
    }
    if let [(handled, decision)] = decided.as_slice() {
        span.record("ruststream.outcome", outcome_label(handled));
        span.record("ruststream.sent", sent(decision).as_str());
    }
    decided
}

/// The span of one batch handler call (`process <subject>` with
/// `messaging.batch.message_count`); its deliveries' settlements happen inside it.
pub(crate) fn batch_span(endpoint: &Endpoint, deliveries: &[&Delivery]) -> tracing::Span {
    let subject = &endpoint.info().descriptor.subject;
    tracing::info_span!(
        "ruststream.batch",
        otel.name = %format_args!("process {subject}"),
        otel.kind = "consumer",
        messaging.system = "nats",
        messaging.destination.name = %subject,
        messaging.operation.type = "process",
        messaging.operation.name = "process",
        messaging.batch.message_count = deliveries.len(),
        ruststream.registration = endpoint.name(),
    )
}
