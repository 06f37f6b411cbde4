//! Stopping a registration's reading, and a source that is never idle, on a real server and in
//! process:
//!
//! - the Core reading's stop (`CoreStop`): what the client holds is handed over, then the
//!   stream ends; its handle dropped while a reader waits wakes the reader, and the stream ends;
//! - a concurrency-1 registration fed without a pause, whose handler finishes at once: the stop
//!   is seen only by the version check before each message (`Source::first`), and stops it
//!   (JetStream: what was pulled and not started is released, so the server holds nothing);
//! - a tracing layer that panics making the delivery's span: the delivery is still handled and
//!   settled, and the next ones too.
//!
//! The stops run with a drain timeout of an hour: a source that missed the stop would hold
//! `stop` for that hour, which the hang guard (`PATIENCE`) turns into a failure.

mod support;

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use ruststream::{AppInfo, Env, HandlerOutcome, RustStream, Scope};
use ruststream_nats::testing::TestApp;
use ruststream_nats::transport::CorePubSub as _;
use ruststream_nats::transport::nats::NatsTransport;
use ruststream_nats::{CoreSubject, JetStreamSubject, NatsBroker};
use support::nats::{
    NatsServer, PATIENCE, Recorder, STREAM, Scripted, consumer_info, consumer_until, eventually,
    jetstream_server, live_server, order, start_with,
};
use support::scale::publish_orders;
use tracing_subscriber::layer::{Context as LayerContext, SubscriberExt};

/// Long enough that a stop the source missed holds `stop` far past [`PATIENCE`].
const DRAIN: Duration = Duration::from_secs(3600);
/// How far the feeder keeps ahead of the handler: the source always has a message ready.
const AHEAD: usize = 2_000;
/// Deliveries handled before the stop.
const BEFORE_STOP: usize = 500;

async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, future)
        .await
        .unwrap_or_else(|_| panic!("{what} within {PATIENCE:?}"))
}

// --- CoreStop, on a real server -------------------------------------------------------------

#[tokio::test]
async fn a_core_stop_hands_over_what_the_client_holds_then_ends() {
    println!("running against {}", NatsServer::version());
    let (_server, client) = live_server().await;
    let transport = NatsTransport::new(client.clone());
    let (mut messages, unsubscribe) = transport
        .subscribe("stop.held".into(), None)
        .await
        .expect("subscribed");
    for id in 1..=50 {
        client
            .publish("stop.held", order(id).into())
            .await
            .expect("published");
    }
    // The client holds all 50, none taken, once a message it sends itself comes back after
    // them: the server processes one connection's commands in order and delivers to it in
    // order. (A flush is not enough: async-nats's only says the bytes left the client.)
    echo_round_trip(&client).await;

    unsubscribe.stop().await;
    let mut handed = Vec::new();
    while let Some(next) = within("the stream ends", messages.next()).await {
        let raw = next.expect("a message");
        handed.push(String::from_utf8(raw.payload.to_vec()).expect("utf-8"));
    }
    let expected: Vec<String> = (1..=50).map(order).collect();
    assert_eq!(
        handed, expected,
        "every message held, in order, then the end"
    );
}

/// Returns once a message `client` publishes to an inbox of its own came back: every message
/// the server sent this connection before it was read by the client.
async fn echo_round_trip(client: &async_nats::Client) {
    let inbox = client.new_inbox();
    let mut echo = client.subscribe(inbox.clone()).await.expect("subscribed");
    client
        .publish(inbox, bytes::Bytes::new())
        .await
        .expect("published");
    within("the echo comes back", echo.next())
        .await
        .expect("the echo");
}

#[tokio::test]
async fn dropping_the_core_stop_wakes_a_waiting_reader_and_ends_the_stream() {
    println!("running against {}", NatsServer::version());
    let (_server, client) = live_server().await;
    let transport = NatsTransport::new(client.clone());
    let (mut messages, unsubscribe) = transport
        .subscribe("stop.dropped".into(), None)
        .await
        .expect("subscribed");
    let mut next = messages.next();
    assert!(
        futures::poll!(&mut next).is_pending(),
        "nothing published: the reader waits"
    );
    drop(unsubscribe);
    assert!(
        within("the waiting reader wakes", next).await.is_none(),
        "the stream ends"
    );
    assert!(messages.next().await.is_none(), "and stays ended");
}

// --- A busy concurrency-1 source is stopped -------------------------------------------------

fn one_at_a_time(b: &mut Scope<()>, subject: impl Into<Registration>, handler: &Scripted) {
    match subject.into() {
        Registration::Core(subject) => b.include(subject.handler(handler.clone())),
        Registration::Stored(subject) => b.include(subject.handler(handler.clone())),
    }
    .concurrency(NonZeroUsize::new(1).expect("one"));
}

enum Registration {
    Core(CoreSubject),
    Stored(JetStreamSubject),
}

impl From<CoreSubject> for Registration {
    fn from(subject: CoreSubject) -> Self {
        Self::Core(subject)
    }
}

impl From<JetStreamSubject> for Registration {
    fn from(subject: JetStreamSubject) -> Self {
        Self::Stored(subject)
    }
}

fn busy_stored() -> JetStreamSubject {
    JetStreamSubject::new("orders.busy", STREAM)
        .durable("busy")
        .ack_wait(Duration::from_secs(60))
}

/// Publishes orders to `publish` without a pause, staying [`AHEAD`] of what `handler` saw,
/// until `flowing` turns false.
fn feed<F, Fut>(
    handler: &Scripted,
    flowing: &Arc<AtomicBool>,
    publish: F,
) -> tokio::task::JoinHandle<()>
where
    F: Fn(u64) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let handler = handler.clone();
    let flowing = Arc::clone(flowing);
    tokio::spawn(async move {
        let mut next = 1_u64;
        while flowing.load(Ordering::SeqCst) {
            if (next as usize) < handler.seen().len() + AHEAD {
                publish(next).await;
                next += 1;
            } else {
                tokio::task::yield_now().await;
            }
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_core_source_at_concurrency_one_is_stopped() {
    println!("running against {}", NatsServer::version());
    let (server, client) = live_server().await;
    let handler = Scripted::always(HandlerOutcome::ack());
    let running = start_with(
        NatsBroker::new(server.url()),
        Env::new().with_drain_timeout(DRAIN),
        |b| one_at_a_time(b, CoreSubject::new("stop.busy"), &handler),
    )
    .await
    .expect("the app starts");
    let flowing = Arc::new(AtomicBool::new(true));
    let feeder = feed(&handler, &flowing, move |id| {
        let client = client.clone();
        async move {
            client
                .publish("stop.busy", order(id).into())
                .await
                .expect("published");
        }
    });
    handler.until_seen(BEFORE_STOP).await;
    within("a busy source stops", running.stop())
        .await
        .expect("a drained stop");
    let stopped_at = handler.seen().len();
    flowing.store(false, Ordering::SeqCst);
    feeder.await.expect("the feeder ends");
    assert!(stopped_at >= BEFORE_STOP, "{stopped_at} handled");
    assert_eq!(
        handler.seen().len(),
        stopped_at,
        "nothing handled after the stop"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_jetstream_source_at_concurrency_one_is_stopped_and_releases_what_it_pulled() {
    println!("running against {}", NatsServer::version());
    let (server, client, js) = jetstream_server().await;
    let wire = Recorder::start(&client, [format!("$JS.ACK.{STREAM}.busy.>")]).await;
    // Stored ahead: each pull is answered at once, and the next is on its way before it is
    // used up.
    publish_orders(&js, "orders.busy", 1..=(AHEAD as u64 * 4)).await;
    let handler = Scripted::always(HandlerOutcome::ack());
    let running = start_with(
        NatsBroker::new(server.url()),
        Env::new().with_drain_timeout(DRAIN),
        |b| one_at_a_time(b, busy_stored(), &handler),
    )
    .await
    .expect("the app starts");
    handler.until_seen(BEFORE_STOP).await;
    within("a busy source stops", running.stop())
        .await
        .expect("a drained stop");

    // Every delivery the server sent is settled: handled and acknowledged, or released
    // (`-NAK`). One left unsettled (a source aborted at the deadline, its pulled messages never
    // released) would be neither.
    let handled = handler.seen().len();
    assert!(handled >= BEFORE_STOP, "{handled} handled");
    let delivered = consumer_info(&js, STREAM, "busy")
        .await
        .delivered
        .stream_sequence;
    let acks = eventually(PATIENCE, "every delivery settled", || {
        let acks = wire.acks(STREAM, "busy");
        async move { (acks.len() as u64 >= delivered).then_some(acks) }
    })
    .await;
    let acked = acks.iter().filter(|a| a.as_str() == "+ACK").count();
    let released = acks.iter().filter(|a| a.as_str() == "-NAK").count();
    assert_eq!(acked, handled, "every delivery handled is acknowledged");
    assert_eq!(
        (acked + released) as u64,
        delivered,
        "every delivery acknowledged or released: {acks:?}"
    );
    // The released ones are the server's again at once: the next instance gets them well
    // within the patience of 10 s, a sixth of the ack_wait.
    let next = Scripted::always(HandlerOutcome::ack());
    let running = start_with(NatsBroker::new(server.url()), Env::new(), |b| {
        one_at_a_time(b, busy_stored(), &next);
    })
    .await
    .expect("the next instance starts");
    consumer_until(
        &js,
        STREAM,
        "busy",
        "the released deliveries acknowledged",
        |i| i.ack_floor.stream_sequence >= delivered,
    )
    .await;
    running.stop().await.expect("a drained stop");
    println!("{handled} handled, {released} released, {delivered} delivered");
}

fn in_process(mount: impl FnOnce(&mut Scope<()>)) -> impl ruststream::App {
    RustStream::new(AppInfo::new("nats-stop", "0.1.0"))
        .drain_timeout(DRAIN)
        .with_broker(NatsBroker::new("nats://in-process.invalid:4222"), mount)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_a_busy_core_source_at_concurrency_one_is_stopped() {
    let handler = Scripted::always(HandlerOutcome::ack());
    let t = TestApp::start(in_process(|b| {
        one_at_a_time(b, CoreSubject::new("stop.busy"), &handler);
    }))
    .await
    .expect("the app starts");
    let nats = t.nats().clone();
    let flowing = Arc::new(AtomicBool::new(true));
    let feeder = feed(&handler, &flowing, move |id| {
        let nats = nats.clone();
        async move {
            nats.publish(
                Arc::from("stop.busy"),
                ruststream::Headers::new(),
                order(id).into(),
            )
            .await
            .expect("published");
        }
    });
    handler.until_seen(BEFORE_STOP).await;
    within("a busy source stops", t.shutdown())
        .await
        .expect("a drained stop");
    let stopped_at = handler.seen().len();
    flowing.store(false, Ordering::SeqCst);
    feeder.await.expect("the feeder ends");
    assert_eq!(
        handler.seen().len(),
        stopped_at,
        "nothing handled after the stop"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_a_busy_jetstream_source_at_concurrency_one_is_stopped_and_releases_what_it_pulled()
 {
    let handler = Scripted::always(HandlerOutcome::ack());
    let t = TestApp::start(in_process(|b| one_at_a_time(b, busy_stored(), &handler)))
        .await
        .expect("the app starts");
    for id in 1..=(AHEAD as u64 * 4) {
        t.publish("orders.busy", &serde_json::json!({ "id": id }))
            .await
            .expect("stored");
    }
    handler.until_seen(BEFORE_STOP).await;
    within("a busy source stops", t.shutdown())
        .await
        .expect("a drained stop");
    let handled = handler.seen().len();
    assert!(handled >= BEFORE_STOP, "{handled} handled");
    let delivered = t
        .nats()
        .consumer_info(STREAM, "busy")
        .expect("the consumer exists")
        .delivered_stream;
    // What was pulled and not handled was released: the next instance gets it at once (an
    // unsettled one would wait for the 60 s ack_wait, far past the patience of 10 s).
    let next = Scripted::always(HandlerOutcome::ack());
    let nats = t.nats().clone();
    let t = TestApp::start_on(in_process(|b| one_at_a_time(b, busy_stored(), &next)), nats)
        .await
        .expect("the next instance starts");
    let before: Vec<u64> = handler
        .seen()
        .iter()
        .filter_map(|s| s.stream_sequence)
        .collect();
    eventually(PATIENCE, "every delivery before the stop handled", || {
        let mut sequences: Vec<u64> = next
            .seen()
            .iter()
            .filter_map(|s| s.stream_sequence)
            .filter(|&s| s <= delivered)
            .chain(before.iter().copied())
            .collect();
        sequences.sort_unstable();
        let done = sequences == (1..=delivered).collect::<Vec<_>>();
        async move { done.then_some(()) }
    })
    .await;
    t.shutdown().await.expect("a drained stop");
}

// --- A tracing layer that panics making the delivery's span -----------------------------------

/// The global subscriber's layer: panics in `on_new_span` for every delivery's span of a subject
/// with `traced` in it, and records every event. Global, not per thread: tracing caches each
/// callsite's interest across threads, so a thread's own subscriber can miss spans while other
/// tests run.
#[derive(Default)]
struct PanickingLayer {
    panics: Mutex<Vec<String>>,
    events: Mutex<Vec<String>>,
}

/// A field's value, by name.
struct Field<'a>(&'a str, &'a mut String);

impl tracing::field::Visit for Field<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == self.0 {
            *self.1 = format!("{value:?}");
        }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for &'static PanickingLayer {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _id: &tracing::span::Id,
        _ctx: LayerContext<'_, S>,
    ) {
        if attrs.metadata().name() != "ruststream.delivery" {
            return;
        }
        let mut subject = String::new();
        attrs.record(&mut Field("messaging.destination.name", &mut subject));
        if subject.contains("traced") {
            self.panics.lock().expect("not poisoned").push(subject);
            panic!("a tracing layer panics on the delivery's span");
        }
    }

    fn on_event(&self, event: &tracing::Event<'_>, _ctx: LayerContext<'_, S>) {
        let mut message = String::new();
        event.record(&mut Field("message", &mut message));
        self.events.lock().expect("not poisoned").push(message);
    }
}

/// The layer, installed as the test binary's global subscriber by the first call.
fn panicking_layer() -> &'static PanickingLayer {
    static LAYER: std::sync::OnceLock<&'static PanickingLayer> = std::sync::OnceLock::new();
    LAYER.get_or_init(|| {
        let layer: &'static PanickingLayer = Box::leak(Box::default());
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))
            .expect("no other global subscriber (unset RUST_LOG)");
        layer
    })
}

impl PanickingLayer {
    fn panics_on(&self, subject: &str) -> usize {
        self.panics
            .lock()
            .expect("not poisoned")
            .iter()
            .filter(|s| s.as_str() == subject)
            .count()
    }

    fn logged_the_panic(&self) -> bool {
        self.events
            .lock()
            .expect("not poisoned")
            .iter()
            .any(|e| e.contains("making the delivery's span panicked"))
    }
}

#[tokio::test]
async fn a_core_delivery_whose_span_panics_is_still_handled_and_the_next_ones_too() {
    println!("running against {}", NatsServer::version());
    let layer = panicking_layer();
    let (server, client) = live_server().await;
    let handler = Scripted::always(HandlerOutcome::ack());
    let running = start_with(NatsBroker::new(server.url()), Env::new(), |b| {
        one_at_a_time(b, CoreSubject::new("stop.traced"), &handler);
    })
    .await
    .expect("the app starts");
    for id in 1..=3 {
        client
            .publish("stop.traced", order(id).into())
            .await
            .expect("published");
    }
    client.flush().await.expect("flushed");
    let seen = handler.until_seen(3).await;
    assert_eq!(seen.iter().map(|s| s.id).collect::<Vec<_>>(), [1, 2, 3]);
    running.stop().await.expect("a drained stop");
    assert_eq!(
        layer.panics_on("stop.traced"),
        3,
        "the layer panicked each time"
    );
    assert!(layer.logged_the_panic(), "the panic is logged");
}

#[tokio::test]
async fn a_jetstream_delivery_whose_span_panics_is_still_settled_and_the_next_ones_too() {
    println!("running against {}", NatsServer::version());
    let layer = panicking_layer();
    let (server, _client, js) = jetstream_server().await;
    let handler = Scripted::always(HandlerOutcome::ack());
    let running = start_with(NatsBroker::new(server.url()), Env::new(), |b| {
        one_at_a_time(
            b,
            JetStreamSubject::new("orders.traced", STREAM)
                .durable("traced")
                .ack_wait(Duration::from_secs(60)),
            &handler,
        );
    })
    .await
    .expect("the app starts");
    publish_orders(&js, "orders.traced", 1..=3).await;
    // Acknowledged well within the patience of 10 s, a sixth of the ack_wait: a delivery left
    // unsettled would hold the floor for a minute.
    consumer_until(&js, STREAM, "traced", "the three acknowledged", |i| {
        i.num_ack_pending == 0 && i.ack_floor.stream_sequence >= 3
    })
    .await;
    let seen = handler.seen();
    assert_eq!(seen.iter().map(|s| s.id).collect::<Vec<_>>(), [1, 2, 3]);
    running.stop().await.expect("a drained stop");
    assert_eq!(
        layer.panics_on("orders.traced"),
        3,
        "the layer panicked each time"
    );
    assert!(layer.logged_the_panic(), "the panic is logged");
}
