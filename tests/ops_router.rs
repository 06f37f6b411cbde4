//! The operations endpoints mounted in a service's own axum server (`ruststream::telemetry::
//! router`, feature `axum`), live: the service's axum app has a route of its own and the router
//! nested under `/ops`, served over real TCP with `axum::serve`; the RustStream app runs on a
//! real nats-server behind a proxy. A real HTTP client (ureq) sees the metrics count the
//! handler's deliveries and readiness follow the app: starting, ready, the link cut and healed,
//! draining.

mod support;

use ruststream::HandlerOutcome;
use ruststream::telemetry::{self, Health};
use ruststream_nats::NatsBroker;
use ruststream_test_server::proxy::Proxy;
use support::nats::*;
use support::ops::{get, samples};

/// A user's axum app: its own `/orders` route, and the operations endpoints under `/ops`,
/// served on a free port until `stop` resolves.
async fn users_server(
    health: Health,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let render = telemetry::install_prometheus().expect("the Prometheus recorder installs");
    let service = axum::Router::new()
        .route(
            "/orders",
            axum::routing::get(|| async { "the service's own orders\n" }),
        )
        .nest("/ops", telemetry::router(health, Some(render)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binds a free port");
    let addr = listener.local_addr().expect("an address");
    let served = tokio::spawn(async move {
        axum::serve(listener, service)
            .with_graceful_shutdown(async move {
                let _ = stop.await;
            })
            .await
            .expect("the user's server runs");
    });
    (addr, served)
}

/// `method` on `http://addr/path`: the status, the `content-type` and the body.
async fn call(
    addr: std::net::SocketAddr,
    method: &'static str,
    path: &str,
) -> (u16, String, String) {
    let url = format!("http://{addr}{path}");
    tokio::task::spawn_blocking(move || {
        let response = match ureq::request(method, &url).call() {
            Ok(response) | Err(ureq::Error::Status(_, response)) => response,
            Err(err) => panic!("{method} {url} failed: {err}"),
        };
        let status = response.status();
        let content_type = response.header("content-type").unwrap_or("").to_owned();
        (
            status,
            content_type,
            response.into_string().expect("a text body"),
        )
    })
    .await
    .expect("the HTTP client's thread")
}

#[tokio::test]
async fn the_router_in_a_users_axum_server_follows_the_app() {
    eprintln!("running against {}", NatsServer::version());
    let (server, client, js) = jetstream_server().await;
    let proxy = Proxy::start(server.port());
    let health = Health::new();
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let (addr, served) = users_server(health.clone(), stopped).await;

    // The user's route and ours share the server; the user's app answers what neither has.
    assert_eq!(
        get(addr, "/orders").await,
        (200, "the service's own orders\n".to_owned())
    );
    assert_eq!(get(addr, "/ops/healthz").await, (200, "ok\n".to_owned()));
    assert_eq!(get(addr, "/ops/nothing").await.0, 404);
    assert_eq!(
        get(addr, "/ops/readyz").await,
        (
            503,
            "not ready: starting: not every registration consumes yet\n".to_owned()
        )
    );
    // The same answers as the standalone listener: content types, methods.
    let (status, content_type, body) = call(addr, "POST", "/ops/readyz").await;
    assert_eq!(
        (status, content_type.as_str(), body.as_str()),
        (405, "text/plain; charset=utf-8", "only GET\n")
    );
    let (status, _, body) = call(addr, "HEAD", "/ops/healthz").await;
    assert_eq!((status, body.as_str()), (200, ""));

    let handler = Scripted::always(HandlerOutcome::ack());
    let env = ruststream::Env::new().with(health.clone());
    let running = start_with(NatsBroker::new(proxy.url()), env, |b| {
        b.include(created("mounted").handler(handler.clone()))
            .name("ops_mounted");
    })
    .await
    .expect("the app starts");
    assert_eq!(get(addr, "/ops/readyz").await, (200, "ready\n".to_owned()));

    // A delivery the server saw settled is counted at the mounted /metrics.
    publish_stored(&js, "orders.created", order(1)).await;
    until_settled(&js, "mounted", 1, "the order acknowledged").await;
    let (status, content_type, text) = call(addr, "GET", "/ops/metrics").await;
    assert_eq!(status, 200);
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
    assert_eq!(
        samples(&text).get(r#"ruststream_deliveries_total{handler="ops_mounted",outcome="ack"}"#),
        Some(&1.0),
        "{text}"
    );
    assert!(text.contains("ruststream_ready 1"), "{text}");

    // The link cut: not ready, still alive; healed: ready again.
    proxy.cut();
    let body = eventually(PATIENCE, "the mounted /readyz answers 503", || async {
        let (status, body) = get(addr, "/ops/readyz").await;
        (status == 503).then_some(body)
    })
    .await;
    assert_eq!(body, "not ready: disconnected from the broker\n");
    assert_eq!(get(addr, "/ops/healthz").await.0, 200);
    proxy.heal();
    eventually(
        PATIENCE,
        "the mounted /readyz answers 200 again",
        || async { (get(addr, "/ops/readyz").await.0 == 200).then_some(()) },
    )
    .await;

    // The app stopped: draining, while the user's server goes on serving its own route.
    running.stop().await.expect("a clean stop");
    assert_eq!(
        get(addr, "/ops/readyz").await,
        (503, "not ready: draining\n".to_owned())
    );
    assert_eq!(get(addr, "/orders").await.0, 200);
    drop(client);
    stop.send(()).expect("the server waits for its stop");
    served.await.expect("the user's server stops gracefully");
}
