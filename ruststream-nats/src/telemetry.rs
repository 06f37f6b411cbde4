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
use ruststream::telemetry::{HandlerMetrics, outcome_label};
use ruststream::{Delivery, Endpoint};
use std::time::Instant;
use tracing::Instrument;

use crate::jetstream_info::JetStreamInfo;

/// The span of one delivery, with the fields known before the handler runs.
pub(crate) fn delivery_span(endpoint: &Endpoint, delivery: &Delivery) -> tracing::Span {
    let info = endpoint.info();
    let js = delivery.extension::<JetStreamInfo>();
    let group = js
        .map(|js| js.consumer.as_str())
        .or(info.descriptor.queue_group.as_deref());
    let span = tracing::info_span!(
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
    );
    adopt_parent(&span, delivery);
    span
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

/// What a dispatch hands back: one delivery's handling and decision, or a batch's.
pub(crate) trait Decided {
    fn each(&self) -> &[(Handled, Decision)];
}

impl Decided for (Handled, Decision) {
    fn each(&self) -> &[(Handled, Decision)] {
        std::slice::from_ref(self)
    }
}

impl Decided for Vec<(Handled, Decision)> {
    fn each(&self) -> &[(Handled, Decision)] {
        self
    }
}

/// Runs `dispatch` (the handler and its decision) for `deliveries` inside `span`, counted in
/// the registration's metrics; records the outcomes on the span (only when a subscriber
/// listens to it: nothing is formatted otherwise).
pub(crate) async fn observed<T: Decided>(
    span: &tracing::Span,
    metrics: &HandlerMetrics,
    deliveries: usize,
    dispatch: impl Future<Output = T>,
) -> T {
    for _ in 0..deliveries {
        metrics.started();
    }
    // The system clock, not tokio's: the handler's real duration, and cheaper where tokio's
    // clock can be paused (its `test-util`), which looks the runtime's clock up on every read.
    let began = Instant::now();
    let decided = dispatch.instrument(span.clone()).await;
    let took = began.elapsed();
    let each = decided.each();
    for (handled, _) in each {
        metrics.finished(handled, took);
    }
    // A unit handed no decision back still leaves the in-flight gauge.
    for _ in each.len()..deliveries {
        metrics.finished(&Handled::NoOutcome(String::new()), took);
    }
    if let [(handled, decision)] = each
        && !span.is_disabled()
    {
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

/// The W3C trace context header.
#[cfg(feature = "opentelemetry")]
const TRACEPARENT: &str = "traceparent";

/// `headers` with the current span's W3C `traceparent` (feature `opentelemetry`): what every
/// message the runtime sends goes through (replies, publishes, requests, dead letters, retry
/// copies). Unchanged when no OpenTelemetry span is current, or without the feature.
pub(crate) fn with_context(headers: ruststream::Headers) -> ruststream::Headers {
    #[cfg(feature = "opentelemetry")]
    {
        otel::inject(headers)
    }
    #[cfg(not(feature = "opentelemetry"))]
    {
        headers
    }
}

/// Makes the `traceparent` of `delivery`, when it has a valid one, the parent of `span`
/// (feature `opentelemetry`; nothing without it).
pub(crate) fn adopt_parent(span: &tracing::Span, delivery: &Delivery) {
    #[cfg(feature = "opentelemetry")]
    otel::adopt_parent(span, delivery);
    #[cfg(not(feature = "opentelemetry"))]
    let _ = (span, delivery);
}

#[cfg(feature = "opentelemetry")]
mod otel {
    use opentelemetry::trace::{
        SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState,
    };
    use ruststream::{Delivery, Headers};
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;

    use super::TRACEPARENT;

    /// `version-traceid-spanid-flags`, version `00` (a later version's first four fields read
    /// the same, as the W3C recommendation asks).
    pub(super) fn parse(traceparent: &str) -> Option<SpanContext> {
        let mut parts = traceparent.trim().split('-');
        let version = parts.next()?;
        let (trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?);
        if version.len() != 2 || version == "ff" || trace.len() != 32 || span.len() != 16 {
            return None;
        }
        if version == "00" && parts.next().is_some() {
            return None;
        }
        let flags = u8::from_str_radix(flags, 16).ok()?;
        let context = SpanContext::new(
            TraceId::from_hex(trace).ok()?,
            SpanId::from_hex(span).ok()?,
            TraceFlags::new(flags) & TraceFlags::SAMPLED,
            true,
            TraceState::default(),
        );
        context.is_valid().then_some(context)
    }

    pub(super) fn format(context: &SpanContext) -> String {
        format!(
            "00-{}-{}-{:02x}",
            context.trace_id(),
            context.span_id(),
            context.trace_flags().to_u8()
        )
    }

    pub(super) fn adopt_parent(span: &tracing::Span, delivery: &Delivery) {
        if let Some(parent) = delivery.headers().get(TRACEPARENT).and_then(parse) {
            let cx = opentelemetry::Context::new().with_remote_span_context(parent);
            // Refused only when no OpenTelemetry layer is installed: nothing to parent then.
            let _ = span.set_parent(cx);
        }
    }

    pub(super) fn inject(mut headers: Headers) -> Headers {
        let cx = tracing::Span::current().context();
        let span = cx.span();
        let context = span.span_context();
        if context.is_valid() {
            headers.insert(TRACEPARENT, format(context));
        }
        headers
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn traceparent_reads_and_writes_as_the_w3c_says() {
            let header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
            let context = parse(header).expect("valid");
            assert!(context.is_remote());
            assert!(context.is_sampled());
            assert_eq!(format(&context), header);
            // Later versions may add fields; version 00 may not.
            assert!(parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x").is_some());
            assert!(parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x").is_none());
            // All-zero ids, a bad length, version ff: invalid.
            assert!(parse("00-00000000000000000000000000000000-00f067aa0ba902b7-01").is_none());
            assert!(parse("00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01").is_none());
            assert!(parse("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").is_none());
            assert!(parse("garbage").is_none());
        }
    }
}
