use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState,
};
use ruststream::{Delivery, Headers};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::registry::LookupSpan as _;

use super::TRACEPARENT;

/// Whether an OpenTelemetry layer listens to `span` (its data is in the span).
pub(super) fn exported(span: &tracing::Span) -> bool {
    span.with_subscriber(|(id, dispatch)| {
        dispatch
            .downcast_ref::<tracing_subscriber::Registry>()
            .and_then(|registry| registry.span(id))
            .is_some_and(|span| {
                span.extensions()
                    .get::<tracing_opentelemetry::OtelData>()
                    .is_some()
            })
    })
    .unwrap_or(false)
}

/// Gives the OpenTelemetry span of `span` (when an OpenTelemetry layer listens) its name
/// (`process <subject>`), its kind, and the messaging attributes every subscriber but that
/// one has no use for. Attributes set this way reach the OpenTelemetry layer alone: a log
/// formatter never sees them.
pub(super) fn describe(
    span: &tracing::Span,
    subject: &str,
    group: Option<&str>,
    stream: Option<&str>,
    body_size: Option<usize>,
) {
    span.record(
        "otel.name",
        tracing::field::display(format_args!("process {subject}")),
    );
    span.record("otel.kind", "consumer");
    span.set_attribute("messaging.system", "nats");
    span.set_attribute("messaging.operation.type", "process");
    span.set_attribute("messaging.operation.name", "process");
    if let Some(group) = group {
        span.set_attribute("messaging.consumer.group.name", group.to_owned());
    }
    if let Some(stream) = stream {
        span.set_attribute("messaging.nats.stream", stream.to_owned());
    }
    if let Some(size) = body_size.and_then(|size| i64::try_from(size).ok()) {
        span.set_attribute("messaging.message.body.size", size);
    }
}

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
