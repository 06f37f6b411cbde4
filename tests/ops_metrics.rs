//! Metrics and health, live: the app runs on a real nats-server, `ruststream::telemetry::serve`
//! serves `/metrics`, `/healthz` and `/readyz`, and a real HTTP client (ureq) scrapes them.
//! The counts after a known sequence of outcomes are exact; readiness turns false while the link
//! is cut and while the app drains.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use ruststream::telemetry::{self, Health};
use ruststream::{Context, Handle, HandlerOutcome};
use ruststream_nats::{CoreSubject, JetStreamSubject, NatsBroker};
use ruststream_test_server::client::{stream_messages, wait_until};
use ruststream_test_server::proxy::Proxy;
use support::nats::*;
use support::ops::{get, operations, samples};
use tokio::sync::Semaphore;

#[tokio::test]
async fn the_metrics_count_exactly_what_the_handlers_said() {
    eprintln!("running against {}", NatsServer::version());
    let (server, client, js) = jetstream_server().await;
    let (health, ops) = operations().await;
    let addr = ops.local_addr();
    // JetStream: orders 1-3 acked, 4 dropped, 5 retried once then acked, 6 retried until the
    // cap of 2 and dead-lettered.
    let jetstream = Scripted::new(|seen| {
        Some(match seen.id {
            4 => HandlerOutcome::drop(),
            5 if seen.delivered == Some(1) => HandlerOutcome::retry(),
            6 => HandlerOutcome::retry(),
            _ => HandlerOutcome::ack(),
        })
    });
    // Core: order 10 acked, 11 retried once (a retry copy) then acked.
    let core = Scripted::new(|seen| {
        Some(if seen.id == 11 && seen.attempt == 1 {
            HandlerOutcome::retry()
        } else {
            HandlerOutcome::ack()
        })
    });
    let env = ruststream::Env::new().with(health.clone());
    let running = start_with(NatsBroker::new(server.url()), env, |b| {
        b.include(
            JetStreamSubject::new("orders.created", STREAM)
                .durable("metered")
                .handler(jetstream.clone()),
        )
        .name("ops_js")
        .max_attempts(attempts(2))
        .dead_letter("orders.dead");
        b.include(CoreSubject::new("audit.events").handler(core.clone()))
            .name("ops_core")
            .max_attempts(attempts(3));
    })
    .await
    .expect("the app starts");
    assert_eq!(get(addr, "/healthz").await, (200, "ok\n".to_owned()));
    assert_eq!(get(addr, "/readyz").await, (200, "ready\n".to_owned()));

    for id in 1..=6 {
        publish_stored(&js, "orders.created", order(id)).await;
    }
    publish_core(&client, "audit.events", &[], &order(10)).await;
    publish_core(&client, "audit.events", &[], &order(11)).await;
    // What the server saw: everything up to sequence 6 settled; the dead letter stored.
    // (8 deliveries: orders 5 and 6 came twice.)
    consumer_until(&js, STREAM, "metered", "every delivery settled", |i| {
        i.num_ack_pending == 0
            && i.delivered.consumer_sequence == 8
            && i.ack_floor.consumer_sequence == 8
    })
    .await;
    let dead = eventually(PATIENCE, "the dead letter is stored", || async {
        let dead: Vec<_> = stream_messages(&js, STREAM)
            .await
            .into_iter()
            .filter(|m| m.subject.as_str() == "orders.dead")
            .collect();
        (!dead.is_empty()).then_some(dead)
    })
    .await;
    assert_eq!(dead.len(), 1);
    core.until_seen(3).await;
    // Settled means recorded: the metrics are counted before the acknowledgement is sent.
    let text = eventually(PATIENCE, "the Core ack is counted", || async {
        let (status, text) = get(addr, "/metrics").await;
        assert_eq!(status, 200);
        let acked = samples(&text)
            .get(r#"ruststream_deliveries_total{handler="ops_core",outcome="ack"}"#)
            .copied();
        (acked == Some(2.0)).then_some(text)
    })
    .await;
    let s = samples(&text);
    let at = |key: &str| {
        s.get(key)
            .copied()
            .unwrap_or_else(|| panic!("no `{key}` in\n{text}"))
    };
    let deliveries = |handler: &str, outcome: &str| {
        at(&format!(
            r#"ruststream_deliveries_total{{handler="{handler}",outcome="{outcome}"}}"#
        ))
    };
    assert_eq!(deliveries("ops_js", "ack"), 4.0);
    assert_eq!(deliveries("ops_js", "drop"), 1.0);
    assert_eq!(deliveries("ops_js", "retry"), 3.0);
    assert_eq!(deliveries("ops_js", "panicked"), 0.0);
    assert_eq!(deliveries("ops_core", "ack"), 2.0);
    assert_eq!(deliveries("ops_core", "retry"), 1.0);
    assert_eq!(
        at(r#"ruststream_handler_duration_seconds_count{handler="ops_js"}"#),
        8.0
    );
    assert_eq!(
        at(r#"ruststream_handler_duration_seconds_count{handler="ops_core"}"#),
        3.0
    );
    assert_eq!(at(r#"ruststream_in_flight{handler="ops_js"}"#), 0.0);
    assert_eq!(
        at(r#"ruststream_dead_letters_total{handler="ops_js"}"#),
        1.0
    );
    assert_eq!(
        at(r#"ruststream_dead_letters_total{handler="ops_core"}"#),
        0.0
    );
    assert_eq!(
        at(r#"ruststream_retry_copies_total{handler="ops_core"}"#),
        1.0
    );
    assert_eq!(
        at(r#"ruststream_retry_copies_total{handler="ops_js"}"#),
        0.0
    );
    assert_eq!(
        at(&format!(
            r#"ruststream_connected{{broker="{}"}}"#,
            server.url()
        )),
        1.0
    );
    // Publishes from outside a handler: one no stream stores (Core), one a stream confirms.
    let published = |kind: &str| {
        let kind = format!(r#"ruststream_published_total{{subject_kind="{kind}"}}"#);
        async move {
            samples(&get(addr, "/metrics").await.1)
                .get(&kind)
                .copied()
                .unwrap_or(0.0)
        }
    };
    let (core_before, stored_before) = (published("core").await, published("stored").await);
    let nats = ruststream_nats::NatsClient::of(&running).expect("a NATS app");
    nats.publish_to("audit.other", &order(20))
        .await
        .expect("published");
    nats.publish_to("orders.audit", &order(21))
        .await
        .expect("stored");
    assert_eq!(published("core").await, core_before + 1.0);
    assert_eq!(published("stored").await, stored_before + 1.0);
    assert!(
        text.contains("# TYPE ruststream_handler_duration_seconds histogram"),
        "a histogram, not a summary:\n{text}"
    );
    running.stop().await.expect("a clean stop");
    assert_eq!(get(addr, "/healthz").await.0, 200);
    assert_eq!(
        get(addr, "/readyz").await,
        (503, "not ready: draining\n".to_owned())
    );
}

#[tokio::test]
async fn the_connected_gauge_names_the_url_the_app_connected_to_without_credentials() {
    eprintln!("running against {}", NatsServer::version());
    let (server, client) = live_server().await;
    let (health, ops) = operations().await;
    let addr = ops.local_addr();
    // The code names a port nothing listens on; `NATS_URL` (as `run` reads it) names the server,
    // with credentials the server (which asks for none) ignores.
    let given = server
        .url()
        .replacen("nats://", "nats://alice:s3cret-9f@", 1);
    let env = ruststream::Env::new()
        .with(health.clone())
        .with(ruststream::broker::BrokerUrl {
            url: given,
            from: "NATS_URL",
        });
    let handler = Scripted::always(HandlerOutcome::retry());
    let running = start_with(NatsBroker::new("nats://127.0.0.1:1"), env, |b| {
        b.include(CoreSubject::new("gauge.orders").handler(handler.clone()))
            .name("ops_gauge")
            .max_attempts(attempts(2));
    })
    .await
    .expect("the app starts on the URL from NATS_URL");
    publish_core(&client, "gauge.orders", &[], &order(1)).await;
    eventually(PATIENCE, "the handler ran", || {
        let seen = handler.seen().len();
        async move { (seen > 0).then_some(()) }
    })
    .await;
    let body = get(addr, "/metrics").await.1;
    let connected: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("ruststream_connected{"))
        .collect();
    assert!(!body.contains("s3cret-9f"), "{body}");
    assert!(
        !body.contains("127.0.0.1:1\""),
        "the code's URL: {connected:?}"
    );
    assert_eq!(
        samples(&body).get(&format!(
            r#"ruststream_connected{{broker="{}"}}"#,
            server.url()
        )),
        Some(&1.0),
        "{connected:?}"
    );
    running.stop().await.expect("the app stops");
}

#[tokio::test]
async fn readiness_is_false_while_the_link_is_cut() {
    eprintln!("running against {}", NatsServer::version());
    let (server, _client, _js) = jetstream_server().await;
    let proxy = Proxy::start(server.port());
    let (health, ops) = operations().await;
    let addr = ops.local_addr();
    assert_eq!(
        get(addr, "/readyz").await,
        (
            503,
            "not ready: starting: not every registration consumes yet\n".to_owned()
        )
    );
    let handler = Scripted::always(HandlerOutcome::ack());
    let env = ruststream::Env::new().with(health.clone());
    let running = start_with(NatsBroker::new(proxy.url()), env, |b| {
        b.include(created("cut").handler(handler.clone()))
            .name("ops_cut");
    })
    .await
    .expect("the app starts");
    assert_eq!(get(addr, "/readyz").await.0, 200);

    proxy.cut();
    let body = eventually(PATIENCE, "/readyz answers 503", || async {
        let (status, body) = get(addr, "/readyz").await;
        (status == 503).then_some(body)
    })
    .await;
    assert_eq!(body, "not ready: disconnected from the broker\n");
    // Alive all along: only readiness follows the link.
    assert_eq!(get(addr, "/healthz").await.0, 200);
    proxy.heal();
    eventually(PATIENCE, "/readyz answers 200 again", || async {
        (get(addr, "/readyz").await.0 == 200).then_some(())
    })
    .await;
    running.stop().await.expect("a clean stop");
}

/// A handler that records how many deliveries it took, and answers each once a permit is
/// added.
#[derive(Clone)]
struct Gate {
    taken: Arc<AtomicUsize>,
    permits: Arc<Semaphore>,
}

impl Default for Gate {
    fn default() -> Self {
        Self {
            taken: Arc::default(),
            permits: Arc::new(Semaphore::new(0)),
        }
    }
}

impl Handle<Order> for Gate {
    async fn handle(
        &self,
        _order: &Order,
        _outs: &(),
        _ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        self.taken.fetch_add(1, Ordering::SeqCst);
        let permit = self.permits.acquire().await.expect("never closed");
        permit.forget();
        Ok(())
    }
}

#[tokio::test]
async fn readiness_is_false_while_the_app_drains() {
    eprintln!("running against {}", NatsServer::version());
    let (server, _client, js) = jetstream_server().await;
    let (health, ops) = operations().await;
    let addr = ops.local_addr();
    let gate = Gate::default();
    let env = ruststream::Env::new().with(health.clone());
    let running = start_with(NatsBroker::new(server.url()), env, |b| {
        b.include(
            JetStreamSubject::new("orders.created", STREAM)
                .durable("draining")
                .handler(gate.clone()),
        )
        .name("ops_drain");
    })
    .await
    .expect("the app starts");
    assert_eq!(get(addr, "/readyz").await.0, 200);
    publish_stored(&js, "orders.created", order(1)).await;
    wait_until(PATIENCE, "the handler takes the order", || {
        gate.taken.load(Ordering::SeqCst) == 1
    })
    .await;
    let in_flight = samples(&get(addr, "/metrics").await.1)
        .get(r#"ruststream_in_flight{handler="ops_drain"}"#)
        .copied();
    assert_eq!(in_flight, Some(1.0));

    let stopping = tokio::spawn(running.stop());
    let body = eventually(PATIENCE, "/readyz answers 503", || async {
        let (status, body) = get(addr, "/readyz").await;
        (status == 503).then_some(body)
    })
    .await;
    assert_eq!(body, "not ready: draining\n");
    assert!(!stopping.is_finished(), "the drain waits for the handler");
    assert_eq!(get(addr, "/healthz").await.0, 200);
    gate.permits.add_permits(1);
    stopping
        .await
        .expect("the stop task")
        .expect("a clean stop");
    // The handler finished inside the drain and its acknowledgement reached the server.
    until_settled(&js, "draining", 1, "the acknowledgement sent in the drain").await;
    assert_eq!(get(addr, "/readyz").await.0, 503);
}

/// Idle connections (a port scan, a stuck client) take at most `max_connections` places: each
/// new connection closes the oldest, so they never pile up and a new probe is answered.
#[tokio::test]
async fn idle_connections_neither_pile_up_nor_keep_the_probe_out() {
    use std::io::Read as _;
    const MAX: usize = 8;
    const IDLE: usize = 40;
    let server = telemetry::serve_with(
        "127.0.0.1:0".parse().expect("an address"),
        Health::new(),
        None,
        // Long enough that no idle connection is closed for taking too long.
        telemetry::ServerLimits::default()
            .max_connections(MAX)
            .timeout(std::time::Duration::from_secs(3600)),
    )
    .await
    .expect("the operations server binds");
    let addr = server.local_addr();
    // Connected by the kernel's backlog; they never send a byte.
    let idle: Vec<std::net::TcpStream> = (0..IDLE)
        .map(|_| {
            let stream = std::net::TcpStream::connect(addr).expect("an idle client connects");
            stream.set_nonblocking(true).expect("non-blocking");
            stream
        })
        .collect();

    let (status, body) = get(addr, "/healthz").await;
    assert_eq!(
        (status, body.as_str()),
        (200, "ok\n"),
        "a new probe is answered"
    );

    // Closed by the server: end of stream (or a reset), not "nothing to read yet".
    let closed = |mut stream: &std::net::TcpStream| {
        let mut byte = [0u8; 1];
        match stream.read(&mut byte) {
            Ok(0) => true,
            Ok(_) => false,
            Err(err) => err.kind() != std::io::ErrorKind::WouldBlock,
        }
    };
    // Accepted before the probe, all but at most MAX - 1 of them made room.
    let n = eventually(
        PATIENCE,
        "the oldest idle connections are closed",
        || async {
            let n = idle.iter().filter(|s| closed(s)).count();
            (n > IDLE - MAX).then_some(n)
        },
    )
    .await;
    assert!(
        idle.iter().rev().take(MAX - 1).any(|s| !closed(s)),
        "the newest idle connections stay open ({n} of {IDLE} closed)"
    );
    let (status, _) = get(addr, "/healthz").await;
    assert_eq!(status, 200, "and probes go on being answered");
}

/// A client that connects and never finishes its request (or never reads the answer) is closed
/// once the server's timeout passes.
#[tokio::test]
async fn a_stuck_client_is_closed_after_the_timeout() {
    use std::io::{Read as _, Write as _};
    let server = telemetry::serve_with(
        "127.0.0.1:0".parse().expect("an address"),
        Health::new(),
        None,
        telemetry::ServerLimits::default().timeout(std::time::Duration::from_millis(200)),
    )
    .await
    .expect("the operations server binds");
    let mut stuck = std::net::TcpStream::connect(server.local_addr()).expect("connects");
    stuck
        .write_all(b"GET /healthz HTTP/1.1\r\n")
        .expect("half a request");
    stuck.set_nonblocking(true).expect("non-blocking");
    eventually(PATIENCE, "the stuck client is closed", || {
        let mut byte = [0u8; 1];
        let closed = match (&stuck).read(&mut byte) {
            Ok(0) => Some(()),
            Err(err) if err.kind() != std::io::ErrorKind::WouldBlock => Some(()),
            _ => None,
        };
        async move { closed }
    })
    .await;
}

/// The operations server of a new `Health` without metrics, on a free port.
async fn bare_server() -> telemetry::Server {
    telemetry::serve(
        "127.0.0.1:0".parse().expect("an address"),
        Health::new(),
        None,
    )
    .await
    .expect("the operations server binds")
}

/// Sends `request` as it is on a new connection and reads the answer until the server closes.
async fn raw(addr: std::net::SocketAddr, request: Vec<u8>) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connects");
    stream.write_all(&request).await.expect("the request sent");
    let mut answer = Vec::new();
    tokio::time::timeout(PATIENCE, stream.read_to_end(&mut answer))
        .await
        .expect("the server answers and closes")
        .expect("the answer read");
    String::from_utf8(answer).expect("a text answer")
}

/// What is not a probe's GET gets hyper's clear answer: 405 naming the methods, 400 for a
/// malformed request, 431 for a request head past 8 KiB; a HEAD gets the head alone. Every
/// answer closes its connection.
#[tokio::test]
async fn bad_requests_get_clear_answers() {
    let server = bare_server().await;
    let addr = server.local_addr();
    let post = raw(
        addr,
        b"POST /healthz HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}".to_vec(),
    )
    .await;
    assert!(
        post.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"),
        "{post}"
    );
    assert!(post.contains("\r\nallow: GET, HEAD\r\n"), "{post}");
    assert!(post.contains("\r\nconnection: close\r\n"), "{post}");
    assert!(post.ends_with("\r\n\r\nonly GET\n"), "{post}");

    let malformed = raw(
        addr,
        b"GET /healthz HTTP/1.1\r\nno colon here\r\n\r\n".to_vec(),
    )
    .await;
    assert!(
        malformed.starts_with("HTTP/1.1 400 Bad Request\r\n"),
        "{malformed}"
    );
    let garbage = raw(
        addr,
        b"\x16\x03\x01\x00\xa5 not http at all\r\n\r\n".to_vec(),
    )
    .await;
    assert!(
        garbage.starts_with("HTTP/1.1 400 Bad Request\r\n"),
        "{garbage}"
    );

    let mut oversized = b"GET /healthz HTTP/1.1\r\nx-padding: ".to_vec();
    oversized.extend(std::iter::repeat_n(b'a', 16 * 1024));
    oversized.extend_from_slice(b"\r\n\r\n");
    let oversized = raw(addr, oversized).await;
    assert!(
        oversized.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"),
        "{oversized}"
    );

    let head = raw(addr, b"HEAD /readyz HTTP/1.1\r\nhost: x\r\n\r\n".to_vec()).await;
    assert!(
        head.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
        "{head}"
    );
    assert!(
        head.contains("\r\ncontent-type: text/plain; charset=utf-8\r\n"),
        "{head}"
    );
    assert!(head.ends_with("\r\n\r\n"), "a head and no body: {head}");

    let unknown = raw(
        addr,
        b"GET /metrics/../x HTTP/1.1\r\nhost: x\r\n\r\n".to_vec(),
    )
    .await;
    assert!(
        unknown.starts_with("HTTP/1.1 404 Not Found\r\n"),
        "{unknown}"
    );
    // Keep-alive asked for: still one request per connection.
    let kept = raw(addr, b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: keep-alive\r\n\r\nGET /healthz HTTP/1.1\r\nhost: x\r\n\r\n".to_vec()).await;
    assert_eq!(kept.matches("HTTP/1.1 200 OK").count(), 1, "{kept}");
    assert!(kept.ends_with("\r\n\r\nok\n"), "{kept}");
}

/// A shutdown stops taking connections but answers the request being read, then returns.
#[tokio::test]
async fn a_shutdown_answers_the_request_in_flight_then_closes() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let server = bare_server().await;
    let addr = server.local_addr();
    let mut in_flight = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connects");
    in_flight
        .write_all(b"GET /healthz HTTP/1.1\r\n")
        .await
        .expect("half a request");
    // The first half read by the server before it is told to stop.
    let (status, _) = get(addr, "/healthz").await;
    assert_eq!(status, 200);
    let shutdown = tokio::spawn(server.shutdown());
    eventually(PATIENCE, "no new connection is taken", || async {
        tokio::net::TcpStream::connect(addr)
            .await
            .is_err()
            .then_some(())
    })
    .await;
    assert!(
        !shutdown.is_finished(),
        "the shutdown waits for the request in flight"
    );
    in_flight
        .write_all(b"host: x\r\n\r\n")
        .await
        .expect("the rest of the request");
    let mut answer = String::new();
    in_flight
        .read_to_string(&mut answer)
        .await
        .expect("the answer");
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert!(answer.ends_with("\r\n\r\nok\n"), "{answer}");
    tokio::time::timeout(PATIENCE, shutdown)
        .await
        .expect("the shutdown returns once the connection closed")
        .expect("the shutdown task");
}
