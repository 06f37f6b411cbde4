//! A span per delivery, live: a real `tracing` subscriber records the spans the runtime opens
//! (OpenTelemetry's messaging attributes, the outcome and what was sent, the handler's events
//! inside), and with the `opentelemetry` feature the W3C `traceparent` chains services: two
//! services chained by a request and its reply share one trace, read from the spans the
//! OpenTelemetry SDK exported.

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use ruststream_nats::prelude::*;
use serde::{Deserialize, Serialize};
use support::nats::*;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context as LayerContext, SubscriberExt as _};
use tracing_subscriber::registry::LookupSpan;

/// One span as the subscriber saw it: its name, its fields, the messages of its events.
#[derive(Debug, Clone, Default)]
struct SeenSpan {
    name: String,
    fields: BTreeMap<String, String>,
    events: Vec<String>,
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(
            field.name().to_owned(),
            format!("{value:?}").trim_matches('"').to_owned(),
        );
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

/// A layer that keeps every span (by id, in creation order) and the events inside each.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<(u64, SeenSpan)>>>);

impl Capture {
    fn spans(&self, name: &str) -> Vec<SeenSpan> {
        self.0
            .lock()
            .expect("not poisoned")
            .iter()
            .filter(|(_, s)| s.name == name)
            .map(|(_, s)| s.clone())
            .collect()
    }

    fn with(&self, id: &Id, f: impl FnOnce(&mut SeenSpan)) {
        let mut spans = self.0.lock().expect("not poisoned");
        if let Some((_, span)) = spans.iter_mut().rev().find(|(i, _)| *i == id.into_u64()) {
            f(span);
        }
    }
}

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> tracing_subscriber::Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _ctx: LayerContext<'_, S>) {
        let mut span = SeenSpan {
            name: attrs.metadata().name().to_owned(),
            ..SeenSpan::default()
        };
        attrs.record(&mut Fields(&mut span.fields));
        self.0
            .lock()
            .expect("not poisoned")
            .push((id.into_u64(), span));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _ctx: LayerContext<'_, S>) {
        self.with(id, |span| values.record(&mut Fields(&mut span.fields)));
    }

    fn on_event(&self, event: &tracing::Event<'_>, ctx: LayerContext<'_, S>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        let message = fields.remove("message").unwrap_or_default();
        // Every span the event is in, innermost first: the delivery span is one of them.
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope {
                self.with(&span.id(), |s| s.events.push(message.clone()));
            }
        }
    }
}

#[tokio::test]
async fn each_delivery_has_a_span_with_the_messaging_attributes_and_the_handlers_events() {
    eprintln!("running against {}", NatsServer::version());
    let capture = Capture::default();
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let _guard = tracing::subscriber::set_default(
        tracing_subscriber::registry()
            .with(capture.clone())
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("ops_traces")))
            .with(tracing_subscriber::filter::LevelFilter::INFO),
    );
    let (server, client, js) = jetstream_server().await;
    let handler = Scripted::new(|seen| {
        tracing::info!(order = seen.id, "handling the order");
        Some(match (seen.id, seen.delivered) {
            (1, Some(1)) => HandlerOutcome::retry(),
            (2, _) => HandlerOutcome::drop(),
            _ => HandlerOutcome::ack(),
        })
    });
    let core = Scripted::always(HandlerOutcome::ack());
    let running = start_on(&server, |b| {
        b.include(created("traced").handler(handler.clone()))
            .name("traced_orders");
        b.include(CoreSubject::new("audit.events").handler(core.clone()))
            .name("traced_audit");
    })
    .await;
    publish_stored_with(
        &js,
        "orders.created",
        &[("Nats-Msg-Id", "order-1")],
        order(1),
    )
    .await;
    publish_stored(&js, "orders.created", order(2)).await;
    until_settled(&js, "traced", 2, "both orders settled").await;
    publish_core(&client, "audit.events", &[], &order(3)).await;
    core.until_seen(1).await;
    running.stop().await.expect("a clean stop");

    let spans = capture.spans("ruststream.delivery");
    let of = |registration: &str| -> Vec<SeenSpan> {
        spans
            .iter()
            .filter(|s| s.fields["ruststream.registration"] == registration)
            .cloned()
            .collect()
    };
    let orders = of("traced_orders");
    assert_eq!(orders.len(), 3, "{orders:#?}");
    for span in &orders {
        let f = &span.fields;
        assert_eq!(f["messaging.destination.name"], "orders.created");
        // For the OpenTelemetry layer (one listens here).
        assert_eq!(f["otel.name"], "process orders.created");
        assert_eq!(f["otel.kind"], "consumer");
        // The attributes every delivery of the registration shares go to the OpenTelemetry
        // span alone: a log formatter never formats them.
        for only_exported in [
            "messaging.system",
            "messaging.operation.type",
            "messaging.consumer.group.name",
            "messaging.nats.stream",
            "messaging.message.body.size",
        ] {
            assert!(!f.contains_key(only_exported), "{f:?}");
        }
    }
    // The exported spans carry every messaging attribute.
    let exported = exporter.get_finished_spans().expect("the exporter's spans");
    let exported: Vec<_> = exported
        .iter()
        .filter(|s| s.name == "process orders.created")
        .collect();
    assert_eq!(exported.len(), 3, "{exported:#?}");
    for span in exported {
        assert_eq!(span.span_kind, opentelemetry::trace::SpanKind::Consumer);
        let attributes: BTreeMap<String, String> = span
            .attributes
            .iter()
            .map(|kv| (kv.key.to_string(), kv.value.to_string()))
            .collect();
        let expected = [
            ("messaging.system", "nats".to_owned()),
            ("messaging.destination.name", "orders.created".to_owned()),
            ("messaging.operation.type", "process".to_owned()),
            ("messaging.operation.name", "process".to_owned()),
            ("messaging.consumer.group.name", "traced".to_owned()),
            ("messaging.nats.stream", STREAM.to_owned()),
            ("messaging.message.body.size", order(1).len().to_string()),
            ("ruststream.registration", "traced_orders".to_owned()),
        ];
        for (key, value) in expected {
            assert_eq!(attributes.get(key), Some(&value), "{key}: {attributes:?}");
        }
        for key in [
            "messaging.nats.stream_sequence",
            "messaging.nats.delivered",
            "ruststream.outcome",
            "ruststream.sent",
        ] {
            assert!(attributes.contains_key(key), "{key}: {attributes:?}");
        }
    }
    let summary: Vec<(String, String, String, String, Option<String>)> = orders
        .iter()
        .map(|s| {
            let f = &s.fields;
            (
                f["messaging.nats.stream_sequence"].clone(),
                f["messaging.nats.delivered"].clone(),
                f["ruststream.outcome"].clone(),
                f["ruststream.sent"].clone(),
                f.get("messaging.message.id").cloned(),
            )
        })
        .collect();
    let row = |seq: &str, delivered: &str, outcome: &str, sent: &str, id: Option<&str>| {
        (
            seq.to_owned(),
            delivered.to_owned(),
            outcome.to_owned(),
            sent.to_owned(),
            id.map(str::to_owned),
        )
    };
    assert!(
        summary.contains(&row("1", "1", "retry", "-NAK", Some("order-1"))),
        "{summary:?}"
    );
    assert!(
        summary.contains(&row("1", "2", "ack", "+ACK", Some("order-1"))),
        "{summary:?}"
    );
    assert!(
        summary.contains(&row("2", "1", "drop", "+TERM", None)),
        "{summary:?}"
    );
    // The handler's own event happened inside its delivery's span.
    for span in &orders {
        assert!(
            span.events.iter().any(|e| e == "handling the order"),
            "{span:#?}"
        );
    }
    let audit = of("traced_audit");
    assert_eq!(audit.len(), 1, "{audit:#?}");
    let f = &audit[0].fields;
    assert_eq!(f["messaging.destination.name"], "audit.events");
    assert_eq!(f["ruststream.outcome"], "ack");
    // Core settles nothing.
    assert_eq!(f["ruststream.sent"], "nothing");
    assert!(!f.contains_key("messaging.nats.stream_sequence"), "{f:?}");
}

#[derive(Debug, Serialize, Deserialize)]
struct Number {
    value: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "chain.doubled")]
struct Doubled {
    value: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "chain.quadrupled")]
struct Quadrupled {
    value: i64,
}

/// The back service.
#[subscriber("chain.double", reply)]
async fn double(n: &Number) -> Result<Doubled, HandlerOutcome> {
    Ok(Doubled { value: n.value * 2 })
}

/// The front service: asks the back one twice.
#[subscriber("chain.quadruple", reply)]
async fn quadruple(n: &Number, ctx: &mut Context<'_>) -> Result<Quadrupled, HandlerOutcome> {
    let ask = async |value| {
        ctx.request::<_, Doubled>("chain.double", &Number { value }, Duration::from_secs(5))
            .await
            .map_err(|_| HandlerOutcome::drop())
    };
    let twice = ask(n.value).await?;
    let four_times = ask(twice.value).await?;
    Ok(Quadrupled {
        value: four_times.value,
    })
}

#[tokio::test]
async fn two_services_chained_by_a_reply_share_one_trace() {
    eprintln!("running against {}", NatsServer::version());
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let _guard = tracing::subscriber::set_default(
        tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("ops_traces")))
            .with(tracing_subscriber::filter::LevelFilter::INFO),
    );
    let (server, client) = live_server().await;
    let back = start_on(&server, |b| {
        b.include(double);
    })
    .await;
    let front = start_on(&server, |b| {
        b.include(quadruple);
    })
    .await;

    // The caller's own trace: its span id is the front's parent.
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller = "00f067aa0ba902b7";
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("traceparent", format!("00-{trace}-{caller}-01").as_str());
    let response = client
        .request_with_headers("chain.quadruple", headers, r#"{"value":5}"#.into())
        .await
        .expect("the front service answers");
    assert_eq!(&response.payload[..], br#"{"value":20}"#);

    let spans = eventually(PATIENCE, "three delivery spans exported", || async {
        let spans: Vec<_> = exporter
            .get_finished_spans()
            .expect("the exporter's spans")
            .into_iter()
            .filter(|s| s.name.starts_with("process chain."))
            .collect();
        (spans.len() >= 3).then_some(spans)
    })
    .await;
    let front_spans: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "process chain.quadruple")
        .collect();
    let back_spans: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "process chain.double")
        .collect();
    assert_eq!((front_spans.len(), back_spans.len()), (1, 2), "{spans:#?}");
    let front_span = front_spans[0];
    // One trace across the caller, the front service and the back service.
    assert_eq!(front_span.span_context.trace_id().to_string(), trace);
    assert_eq!(front_span.parent_span_id.to_string(), caller);
    for back_span in &back_spans {
        assert_eq!(back_span.span_context.trace_id().to_string(), trace);
        assert_eq!(
            back_span.parent_span_id,
            front_span.span_context.span_id(),
            "the back service's span is the front's child"
        );
    }
    let attribute = |span: &opentelemetry_sdk::trace::SpanData, key: &str| {
        span.attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| kv.value.to_string())
    };
    assert_eq!(
        attribute(front_span, "messaging.system").as_deref(),
        Some("nats")
    );
    assert_eq!(
        attribute(front_span, "ruststream.outcome").as_deref(),
        Some("ack")
    );
    // The reply carries the front service's context back to the caller.
    let reply_context = response
        .headers
        .as_ref()
        .and_then(|h| h.get("traceparent"))
        .map(|v| v.as_str().to_owned())
        .expect("the reply carries a traceparent");
    assert_eq!(
        reply_context,
        format!("00-{trace}-{}-01", front_span.span_context.span_id())
    );
    front.stop().await.expect("a clean stop");
    back.stop().await.expect("a clean stop");
}

#[tokio::test]
async fn retry_copies_and_dead_letters_carry_the_context_of_the_delivery_they_come_from() {
    eprintln!("running against {}", NatsServer::version());
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let _guard = tracing::subscriber::set_default(
        tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("ops_traces")))
            .with(tracing_subscriber::filter::LevelFilter::INFO),
    );
    let (server, client) = live_server().await;
    let recorder = Recorder::start(&client, ["notices.sent", "notices.dead"]).await;
    let handler = Scripted::always(HandlerOutcome::retry());
    let running = start_on(&server, |b| {
        b.include(CoreSubject::new("notices.sent").handler(handler.clone()))
            .max_attempts(attempts(2))
            .dead_letter("notices.dead");
    })
    .await;
    let trace = "0af7651916cd43dd8448eb211c80319c";
    let caller = "b7ad6b7169203331";
    publish_core(
        &client,
        "notices.sent",
        &[("traceparent", &format!("00-{trace}-{caller}-01"))],
        &order(7),
    )
    .await;
    // The original, its retry copy, and the dead letter after the second attempt.
    let messages = recorder.until(3).await;
    let spans = eventually(PATIENCE, "both delivery spans exported", || async {
        let spans: Vec<_> = exporter
            .get_finished_spans()
            .expect("the exporter's spans")
            .into_iter()
            .filter(|s| s.name == "process notices.sent")
            .collect();
        (spans.len() >= 2).then_some(spans)
    })
    .await;
    assert_eq!(spans.len(), 2, "{spans:#?}");
    for span in &spans {
        assert_eq!(span.span_context.trace_id().to_string(), trace);
    }
    let traceparent = |m: &async_nats::Message| {
        m.headers
            .as_ref()
            .and_then(|h| h.get("traceparent"))
            .map(|v| v.as_str().to_owned())
            .expect("a traceparent")
    };
    let copy = messages
        .iter()
        .find(|m| {
            m.subject.as_str() == "notices.sent"
                && m.headers
                    .as_ref()
                    .is_some_and(|h| h.get("x-ruststream-retry-count").is_some())
        })
        .expect("the retry copy");
    let dead = messages
        .iter()
        .find(|m| m.subject.as_str() == "notices.dead")
        .expect("the dead letter");
    // The first delivery's span parents the copy; the copy's delivery span parents the dead
    // letter.
    let first = spans
        .iter()
        .find(|s| s.parent_span_id.to_string() == caller)
        .expect("the first delivery's span is the caller's child");
    assert_eq!(
        traceparent(copy),
        format!("00-{trace}-{}-01", first.span_context.span_id())
    );
    let second = spans
        .iter()
        .find(|s| s.parent_span_id == first.span_context.span_id())
        .expect("the copy's delivery span is the first one's child");
    assert_eq!(
        traceparent(dead),
        format!("00-{trace}-{}-01", second.span_context.span_id())
    );
    running.stop().await.expect("a clean stop");
}
