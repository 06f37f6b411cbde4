//! Middleware (issue 15): app, broker and registration layers in order around the handler; a
//! layer that reads the delivery and short-circuits, one that changes the outcome, one that
//! publishes; the built-ins (backoff with jitter for `retry()`, a concurrency limit shared by a
//! broker's registrations, a rate limit); batch handlers. In process under a paused clock, and
//! on a real nats-server, asserting the acknowledgements the server saw.

mod support;

use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use ruststream::middleware::{Backoff, ConcurrencyLimit, Middleware, Next, NextBatch, RateLimit};
use ruststream::registration::Handled;
use ruststream::{
    AppInfo, Delivery, HandlerOutcome, OutboundMessage, RustStream, nonzero, subscriber,
};
use ruststream_nats::{JetStreamSubject, NatsBroker};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Order {
    id: u64,
}

/// What the layers and handlers saw, in order.
#[derive(Default)]
struct Log {
    lines: Mutex<Vec<String>>,
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
    starts: Mutex<Vec<Instant>>,
    batches: Mutex<Vec<usize>>,
}

impl Log {
    fn push(&self, line: impl Into<String>) {
        self.lines.lock().unwrap().push(line.into());
    }
    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }
}

static LOG: std::sync::LazyLock<Log> = std::sync::LazyLock::new(Log::default);

/// Records entering and leaving, to show the order.
struct Tag(&'static str);

impl Middleware for Tag {
    fn handle<'a>(&'a self, _d: &'a Delivery, next: Next<'a>) -> BoxFuture<'a, Handled> {
        Box::pin(async move {
            LOG.push(format!("{}>", self.0));
            let handled = next.run().await;
            LOG.push(format!("<{}", self.0));
            handled
        })
    }
}

/// Reads a header and answers `drop()` without running the handler.
struct Skip;

impl Middleware for Skip {
    fn handle<'a>(&'a self, d: &'a Delivery, next: Next<'a>) -> BoxFuture<'a, Handled> {
        Box::pin(async move {
            if d.headers().get("x-skip").is_some() {
                return Handled::Outcome(HandlerOutcome::drop());
            }
            next.run().await
        })
    }
}

/// Publishes what the handler made of each delivery to `audit.handled`.
struct Audit;

impl Middleware for Audit {
    fn handle<'a>(&'a self, d: &'a Delivery, next: Next<'a>) -> BoxFuture<'a, Handled> {
        Box::pin(async move {
            let publisher = next.publisher();
            let registration = next.registration();
            let handled = next.run().await;
            let line = format!("{registration} {} {handled:?}", d.subject());
            let sent = publisher
                .publish(OutboundMessage::new(
                    "audit.handled",
                    line.into_bytes().into(),
                ))
                .await;
            if sent.is_err() {
                return Handled::Outcome(HandlerOutcome::retry());
            }
            handled
        })
    }
}

/// Counts batch sizes.
struct Sizes;

impl Middleware for Sizes {
    fn handle<'a>(&'a self, _d: &'a Delivery, next: Next<'a>) -> BoxFuture<'a, Handled> {
        next.run()
    }

    fn handle_batch<'a>(
        &'a self,
        deliveries: &'a [&'a Delivery],
        next: NextBatch<'a>,
    ) -> BoxFuture<'a, Vec<Handled>> {
        LOG.batches.lock().unwrap().push(deliveries.len());
        next.run()
    }
}

#[subscriber(JetStreamSubject::new("orders.layered", "ORDERS").durable("layered"))]
async fn layered(_order: &Order) {
    LOG.push("handler");
}

#[subscriber(JetStreamSubject::new("orders.flaky", "ORDERS").durable("flaky"))]
async fn flaky(_order: &Order) -> HandlerOutcome {
    HandlerOutcome::retry()
}

async fn busy() {
    let now = LOG.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    LOG.most_in_flight.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(20)).await;
    LOG.in_flight.fetch_sub(1, Ordering::SeqCst);
}

#[subscriber(JetStreamSubject::new("orders.slow_a", "ORDERS").durable("slow_a"))]
async fn slow_a(_order: &Order) {
    busy().await;
}

#[subscriber(JetStreamSubject::new("orders.slow_b", "ORDERS").durable("slow_b"))]
async fn slow_b(_order: &Order) {
    busy().await;
}

#[subscriber(JetStreamSubject::new("orders.paced", "ORDERS").durable("paced"))]
async fn paced(_order: &Order) {
    LOG.starts.lock().unwrap().push(Instant::now());
}

#[subscriber(JetStreamSubject::new("orders.bulk", "ORDERS").durable("bulk").batch(nonzero!(10)))]
async fn bulk(orders: &[Order]) -> HandlerOutcome {
    LOG.push(format!("bulk {}", orders.len()));
    HandlerOutcome::ack()
}

/// `layered`: app, broker and own layers; `flaky`: backoff; `slow_a` and `slow_b`: one
/// concurrency limit of 1 shared (a clone shares its slots) under `.concurrency(4)` each;
/// `paced`: 20 a second; `bulk`: a batch handler with a layer.
fn app(broker: NatsBroker) -> impl ruststream::App<State = ()> {
    let one_at_a_time = ConcurrencyLimit::new(NonZeroUsize::MIN);
    RustStream::new(AppInfo::new("layers", "0.1.0"))
        .layer(Tag("app1"))
        .with_broker(broker, |b| {
            b.layer(Tag("broker"));
            b.include(layered)
                .layer(Tag("own"))
                .layer(Skip)
                .layer(Audit);
            b.include(flaky).layer(Backoff::exponential(
                Duration::from_secs(30),
                Duration::from_secs(600),
            ));
            b.include(slow_a)
                .concurrency(NonZeroUsize::new(4).unwrap())
                .layer(one_at_a_time.clone());
            b.include(slow_b)
                .concurrency(NonZeroUsize::new(4).unwrap())
                .layer(one_at_a_time);
            b.include(paced)
                .layer(RateLimit::per_second(NonZeroU32::new(20).unwrap()));
            b.include(bulk).layer(Sizes);
        })
        .layer(Tag("app2"))
}

fn json(id: u64) -> Vec<u8> {
    serde_json::to_vec(&Order { id }).unwrap()
}

/// What a scenario needs from the world.
trait World {
    async fn publish(&self, subject: &str, headers: &[(&str, &str)], payload: Vec<u8>);
    /// Waits until consumer `durable` got `n` acknowledgements; returns them.
    async fn acks(&self, durable: &str, n: usize) -> Vec<String>;
    /// Every payload published on `subject` so far.
    async fn published(&self, subject: &str) -> Vec<String>;
}

async fn scenarios<W: World>(w: &W) {
    // Order: app layers (in the order added, before or after with_broker), broker, own.
    w.publish("orders.layered", &[], json(1)).await;
    assert_eq!(w.acks("layered", 1).await, ["+ACK"]);
    let lines: Vec<String> = LOG
        .lines()
        .into_iter()
        .filter(|l| !l.starts_with("bulk"))
        .collect();
    assert_eq!(
        lines,
        [
            "app1>", "app2>", "broker>", "own>", "handler", "<own", "<broker", "<app2", "<app1"
        ]
    );
    // Audit published what came of it, after the handler.
    assert_eq!(
        w.published("audit.handled").await,
        ["layered orders.layered Outcome(Ack)"]
    );

    // Short-circuit: the handler does not run, the server sees +TERM, Audit (inside Skip)
    // does not run either.
    w.publish("orders.layered", &[("x-skip", "1")], json(2))
        .await;
    assert_eq!(w.acks("layered", 2).await, ["+ACK", "+TERM"]);
    assert_eq!(
        LOG.lines().iter().filter(|l| *l == "handler").count(),
        1,
        "the handler ran once"
    );
    assert_eq!(w.published("audit.handled").await.len(), 1);

    // Backoff: retry() on attempt 1 becomes a -NAK with a delay in [15s, 30s].
    w.publish("orders.flaky", &[], json(3)).await;
    let acks = w.acks("flaky", 1).await;
    let delay: u64 = acks[0]
        .strip_prefix("-NAK {\"delay\": ")
        .and_then(|r| r.strip_suffix('}'))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a delayed -NAK: {acks:?}"));
    assert!(
        (15_000_000_000..=30_000_000_000).contains(&delay),
        "the delay is in the upper half of 30s: {delay}"
    );

    // A shared concurrency limit of 1: never two handlers at once over both registrations.
    for i in 0..4 {
        w.publish("orders.slow_a", &[], json(10 + i)).await;
        w.publish("orders.slow_b", &[], json(20 + i)).await;
    }
    assert_eq!(w.acks("slow_a", 4).await, ["+ACK"; 4]);
    assert_eq!(w.acks("slow_b", 4).await, ["+ACK"; 4]);
    assert_eq!(LOG.most_in_flight.load(Ordering::SeqCst), 1);

    // A rate limit of 20 a second: starts at least 50 ms apart from the first.
    for i in 0..4 {
        w.publish("orders.paced", &[], json(30 + i)).await;
    }
    assert_eq!(w.acks("paced", 4).await, ["+ACK"; 4]);
    let starts = LOG.starts.lock().unwrap().clone();
    assert_eq!(starts.len(), 4);
    for (i, start) in starts.iter().enumerate().skip(1) {
        let since_first = *start - starts[0];
        assert!(
            since_first >= Duration::from_millis(50 * i as u64 - 5),
            "start {i} came {since_first:?} after the first"
        );
    }

    // A batch handler goes through handle_batch.
    for i in 0..3 {
        w.publish("orders.bulk", &[], json(40 + i)).await;
    }
    assert_eq!(w.acks("bulk", 3).await, ["+ACK"; 3]);
    let sizes: usize = LOG.batches.lock().unwrap().iter().sum();
    assert_eq!(sizes, 3, "every message of every batch passed the layer");
}

#[test]
fn describe_shows_the_layers_in_order() {
    let text = ruststream::app::cli::describe(&app(NatsBroker::new("nats://localhost:4222")));
    assert!(
        text.contains("layered: middleware: Tag > Tag > Tag > Tag > Skip > Audit"),
        "{text}"
    );
    assert!(
        text.contains("flaky: middleware: Tag > Tag > Tag > backoff 30s..600s with jitter"),
        "{text}"
    );
    assert!(text.contains("concurrency limit 1"), "{text}");
    assert!(text.contains("rate limit 1 per 50ms"), "{text}");
}

// One app per test binary run: the log is shared, so in process and live are two binaries'
// worth of state; each test clears it first and they do not run at once (a lock).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn clear() {
    LOG.lines.lock().unwrap().clear();
    LOG.starts.lock().unwrap().clear();
    LOG.batches.lock().unwrap().clear();
    LOG.most_in_flight.store(0, Ordering::SeqCst);
    LOG.in_flight.store(0, Ordering::SeqCst);
}

mod in_process {
    use super::*;
    use ruststream::Headers;
    use ruststream_nats::testing::TestApp;

    struct InProcess(TestApp);

    impl World for InProcess {
        async fn publish(&self, subject: &str, headers: &[(&str, &str)], payload: Vec<u8>) {
            let mut h = Headers::new();
            for (name, value) in headers {
                h.append(*name, *value);
            }
            self.0
                .publish_raw(subject, h, payload)
                .await
                .expect("published");
        }

        async fn acks(&self, durable: &str, n: usize) -> Vec<String> {
            // Handlers that sleep (the paused clock moves only when told): 10 ms at a time,
            // until the acknowledgements are there or a minute passed.
            self.0.settle().await;
            for _ in 0..6000 {
                if self.0.nats().acknowledgements("ORDERS", durable).len() >= n {
                    break;
                }
                self.0.advance(Duration::from_millis(10)).await;
            }
            let acks = self.0.nats().acknowledgements("ORDERS", durable);
            assert_eq!(acks.len(), n, "{durable}: {acks:?}");
            acks
        }

        async fn published(&self, subject: &str) -> Vec<String> {
            self.0.settle().await;
            self.0
                .nats()
                .published(subject)
                .iter()
                .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
                .collect()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn layers_in_order_and_the_built_ins() {
        let _serial = SERIAL.lock().await;
        clear();
        let t = TestApp::start(app(NatsBroker::new("nats://unused:4222")))
            .await
            .expect("the app starts");
        let w = InProcess(t);
        scenarios(&w).await;
        w.0.shutdown().await.expect("a clean shutdown");
    }
}

mod live {
    use super::support::nats::{PATIENCE, jetstream_server};
    use super::*;
    use ruststream::App as _;
    use ruststream_test_server::client::{Recorder as Wire, eventually};

    struct Live {
        js: async_nats::jetstream::Context,
        wire: Wire,
    }

    impl World for Live {
        async fn publish(&self, subject: &str, headers: &[(&str, &str)], payload: Vec<u8>) {
            let mut h = async_nats::HeaderMap::new();
            for (name, value) in headers {
                h.insert(*name, *value);
            }
            self.js
                .publish_with_headers(subject.to_owned(), h, payload.into())
                .await
                .expect("published")
                .await
                .expect("stored");
        }

        async fn acks(&self, durable: &str, n: usize) -> Vec<String> {
            let what = format!("{n} acknowledgements from {durable}");
            let acks = eventually(PATIENCE, &what, || async {
                let acks = self.wire.acks("ORDERS", durable);
                (acks.len() >= n).then_some(acks)
            })
            .await;
            assert_eq!(acks.len(), n, "{durable}: {acks:?}");
            acks
        }

        async fn published(&self, subject: &str) -> Vec<String> {
            self.wire
                .matching(subject)
                .iter()
                .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
                .collect()
        }
    }

    #[tokio::test]
    async fn layers_in_order_and_the_built_ins_on_the_wire() {
        let _serial = SERIAL.lock().await;
        clear();
        let (server, client, js) = jetstream_server().await;
        let wire = Wire::start(&client, ["$JS.ACK.>", "audit.>"]).await;
        let running = app(NatsBroker::new(server.url()))
            .start(ruststream::Env::new())
            .await
            .expect("the app starts");
        scenarios(&Live { js, wire }).await;
        running.stop().await.expect("a clean stop");
    }
}
