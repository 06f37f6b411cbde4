//! Traces exported over OTLP by the generated `main`, live: the unchanged `examples/payments.rs`
//! runs as an operator runs it, with `OTEL_EXPORTER_OTLP_ENDPOINT` pointing at a collector this
//! test runs (an OTLP/HTTP server on a free port that decodes the protobuf requests), on a real
//! nats-server. A payment published with a `traceparent` comes back as the delivery's span under
//! that parent, named for the service, and the dashboard's delivery of the reply as its child.
//! An endpoint that is not a URL is a warning, and the service serves all the same.
//!
//! Each case runs this test binary again as the app's program (the test `as_the_app`).

use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use ruststream_test_server::NatsServer;
use ruststream_test_server::client::{
    connect_jetstream, consumer_until, create_stream, publish_stored_with,
};
use support::program::{Lines, eventually, terminate};

mod support;

// `examples/payments.rs`, unchanged, as the program this test runs.
example_program!(payments, "payments.rs");

/// What the collector received: each export request, with its content type.
type Received = Arc<Mutex<Vec<(String, ExportTraceServiceRequest)>>>;

/// An OTLP/HTTP collector on a free port of `runtime`: `POST /v1/traces` with a protobuf body,
/// decoded and kept; anything it cannot decode is a 400.
fn collector(runtime: &tokio::runtime::Runtime) -> (std::net::SocketAddr, Received) {
    use axum::http::{HeaderMap, StatusCode, header};
    let received = Received::default();
    let kept = Arc::clone(&received);
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |headers: HeaderMap, body: axum::body::Bytes| {
            let kept = Arc::clone(&kept);
            async move {
                let Ok(request) = ExportTraceServiceRequest::decode(body) else {
                    return (StatusCode::BAD_REQUEST, Vec::new());
                };
                let content_type = headers
                    .get(header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned();
                kept.lock()
                    .expect("not poisoned")
                    .push((content_type, request));
                // An empty `ExportTraceServiceResponse`: everything accepted.
                (StatusCode::OK, Vec::new())
            }
        }),
    );
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("binds a free port");
    let addr = listener.local_addr().expect("an address");
    runtime.spawn(async move { axum::serve(listener, app).await });
    (addr, received)
}

/// A string attribute's value.
fn string(attributes: &[KeyValue], key: &str) -> Option<String> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| match kv.value.as_ref() {
            Some(AnyValue {
                value: Some(any_value::Value::StringValue(s)),
            }) => Some(s.clone()),
            _ => None,
        })
}

/// Every span received so far, with the `service.name` of its resource.
fn spans(received: &Received) -> Vec<(Option<String>, Span)> {
    let received = received.lock().expect("not poisoned");
    let mut out = Vec::new();
    for (_, request) in received.iter() {
        for resource_spans in &request.resource_spans {
            let service = resource_spans
                .resource
                .as_ref()
                .and_then(|r| string(&r.attributes, "service.name"));
            for scope in &resource_spans.scope_spans {
                for span in &scope.spans {
                    out.push((service.clone(), span.clone()));
                }
            }
        }
    }
    out
}

/// The server, its PAYMENTS stream, and a runtime for the test's own clients.
fn payments_server() -> (
    NatsServer,
    tokio::runtime::Runtime,
    async_nats::jetstream::Context,
) {
    let server = NatsServer::start();
    eprintln!("running against {}", NatsServer::version());
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let js = runtime.block_on(async {
        let (_client, js) = connect_jetstream(&server).await;
        create_stream(&js, "PAYMENTS", ["payments.authorized"]).await;
        js
    });
    (server, runtime, js)
}

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

#[test]
fn the_generated_main_exports_the_deliveries_to_the_collector() {
    let (server, runtime, js) = payments_server();
    let (collector, received) = collector(&runtime);
    let (mut child, mut lines) = Lines::spawn(
        payments(["run", "--url", &server.url()])
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{collector}"))
            .env("OTEL_SERVICE_NAME", "payments-traced")
            // Batches sent every 100 ms, not every 5 s.
            .env("OTEL_BSP_SCHEDULE_DELAY", "100"),
    );
    lines.wait_for("where traces go", |l| {
        l.contains(&format!(
            "exporting traces over OTLP/HTTP to http://{collector}/v1/traces"
        ))
    });
    lines.wait_for("the app started", |l| l.contains(" started"));

    runtime.block_on(async {
        publish_stored_with(
            &js,
            "payments.authorized",
            &[("traceparent", &format!("00-{TRACE}-{PARENT}-01"))],
            r#"{"id": 1, "card": "visa", "amount_cents": 100}"#,
        )
        .await;
        // What the server saw: the payment acknowledged.
        consumer_until(
            &js,
            "PAYMENTS",
            "capture",
            "the payment acknowledged",
            |i| i.num_ack_pending == 0 && i.ack_floor.stream_sequence == 1,
        )
        .await;
    });
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let (capture, refresh) = eventually("both deliveries' spans at the collector", || {
        let spans = spans(&received);
        let named = |name: &str| {
            spans
                .iter()
                .find(|(_, s)| s.name == name && hex(&s.trace_id) == TRACE)
                .cloned()
        };
        Some((
            named("process payments.authorized")?,
            named("process payments.captured")?,
        ))
    });
    let (service, capture) = capture;
    assert_eq!(service.as_deref(), Some("payments-traced"));
    assert_eq!(
        hex(&capture.parent_span_id),
        PARENT,
        "under the publisher's span"
    );
    assert_eq!(
        string(&capture.attributes, "messaging.system").as_deref(),
        Some("nats")
    );
    assert_eq!(
        string(&capture.attributes, "ruststream.registration").as_deref(),
        Some("capture")
    );
    // The reply carried the capture's context: the dashboard's delivery is its child.
    let (_, refresh) = refresh;
    assert_eq!(hex(&refresh.parent_span_id), hex(&capture.span_id));
    let content_types: Vec<String> = received
        .lock()
        .expect("not poisoned")
        .iter()
        .map(|(t, _)| t.clone())
        .collect();
    assert!(
        content_types.iter().all(|t| t == "application/x-protobuf"),
        "{content_types:?}"
    );

    terminate(&child);
    let status = child.wait().expect("the child exits");
    assert!(status.success(), "{}", lines.seen.join("\n"));
    drop(server);
}

#[test]
fn an_endpoint_that_is_not_a_url_is_a_warning_and_the_service_serves() {
    let (server, runtime, js) = payments_server();
    let (mut child, mut lines) = Lines::spawn(
        payments(["run", "--url", &server.url()])
            .env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "collector:4318"),
    );
    let warning = lines.wait_for("the warning", |l| l.contains("OTLP"));
    assert!(
        warning.contains("WARN")
            && warning.contains(
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is `collector:4318`, which the OTLP exporter cannot use: not an http:// or https:// URL; no trace is exported"
            ),
        "{warning}"
    );
    runtime.block_on(publish_stored_with(
        &js,
        "payments.authorized",
        &[],
        r#"{"id": 2, "card": "visa", "amount_cents": 5}"#,
    ));
    lines.wait_for("the dashboard refreshed", |l| {
        l.contains("dashboard refreshed")
    });
    terminate(&child);
    let status = child.wait().expect("the child exits");
    assert!(status.success(), "{}", lines.seen.join("\n"));
    assert_eq!(
        lines.seen.iter().filter(|l| l.contains("OTLP")).count(),
        1,
        "warned once: {}",
        lines.seen.join("\n")
    );
}
