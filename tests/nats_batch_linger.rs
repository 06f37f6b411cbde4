//! A batch handler with a linger (`JetStreamSubject::max_wait`): light traffic still forms
//! batches. In process under a paused clock (readings published 100 ms apart), and live on a
//! real nats-server (the first reading held in its batch while the next ones are published).

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ruststream::App as _;
use ruststream::Headers;
use ruststream_nats::prelude::*;
use ruststream_nats::testing::{InProcessNats, TestApp};
use ruststream_nats::transport::{StreamAdmin as _, StreamSpec};
use serde::Deserialize;
use support::nats::{NatsServer, PATIENCE, consumer_until, eventually, publish_stored};

#[derive(Deserialize)]
struct Reading {
    #[allow(dead_code)]
    celsius: f64,
}

/// The size of every batch the handler got, in order.
#[derive(Clone, Default)]
struct Batches(Arc<Mutex<Vec<usize>>>);

impl Batches {
    fn sizes(&self) -> Vec<usize> {
        self.0.lock().expect("not poisoned").clone()
    }
}

impl HandleBatch<Reading> for Batches {
    async fn handle_batch(
        &self,
        readings: &[Reading],
        _outs: &(),
        _ctx: &mut BatchContext<'_>,
    ) -> BatchOutcome {
        self.0.lock().expect("not poisoned").push(readings.len());
        vec![HandlerOutcome::ack(); readings.len()].into()
    }
}

fn readings(max_wait: Option<Duration>) -> JetStreamSubject {
    let subject = JetStreamSubject::new("sensors.readings", "SENSORS")
        .durable("store")
        .batch(ruststream::nonzero!(10));
    match max_wait {
        Some(wait) => subject.max_wait(wait),
        None => subject,
    }
}

fn app(
    broker: NatsBroker,
    max_wait: Option<Duration>,
    batches: &Batches,
) -> impl ruststream::App<State = ()> {
    let batches = batches.clone();
    RustStream::new(AppInfo::new("sensors", "0.1.0")).with_broker(broker, move |b| {
        b.include(readings(max_wait).handler(batches)).name("store");
    })
}

const READING: &str = r#"{"celsius":12.5}"#;

/// The app on the in-process NATS, its batches recorded in `batches`.
async fn start_in_process(max_wait: Option<Duration>, batches: &Batches) -> TestApp {
    let nats = InProcessNats::new();
    nats.declare_stream(StreamSpec {
        name: "SENSORS".to_owned(),
        subjects: vec!["sensors.>".to_owned()],
    })
    .await
    .expect("the stream");
    TestApp::start_on(
        app(NatsBroker::new("nats://unused:4222"), max_wait, batches),
        nats,
    )
    .await
    .expect("the app starts")
}

/// Five readings, 100 ms apart, then one more 2 s later; the sizes of the batches formed.
async fn in_process(max_wait: Option<Duration>) -> Vec<usize> {
    let batches = Batches::default();
    let t = start_in_process(max_wait, &batches).await;
    for _ in 0..5 {
        t.publish_raw("sensors.readings", Headers::new(), READING.as_bytes())
            .await
            .expect("published");
        t.advance(Duration::from_millis(100)).await;
    }
    t.advance(Duration::from_secs(2)).await;
    t.publish_raw("sensors.readings", Headers::new(), READING.as_bytes())
        .await
        .expect("published");
    t.advance(Duration::from_secs(2)).await;
    let info = t
        .nats()
        .consumer_info("SENSORS", "store")
        .expect("the consumer");
    assert_eq!(
        (info.delivered, info.ack_pending),
        (6, 0),
        "each settled once"
    );
    t.shutdown().await.expect("a clean shutdown");
    batches.sizes()
}

#[tokio::test(start_paused = true)]
async fn a_linger_gathers_light_traffic_into_batches_in_process() {
    // Without a linger, a batch is what is ready at once: one reading each.
    assert_eq!(in_process(None).await, [1, 1, 1, 1, 1, 1]);
    // With 500 ms, the five readings 100 ms apart form one batch; the late one a batch of its
    // own, handed over when its linger ends.
    assert_eq!(in_process(Some(Duration::from_millis(500))).await, [5, 1]);
    // A full batch does not wait for the linger.
    let batches = Batches::default();
    let t = start_in_process(Some(Duration::from_secs(3600)), &batches).await;
    for _ in 0..10 {
        t.publish_raw("sensors.readings", Headers::new(), READING.as_bytes())
            .await
            .expect("published");
    }
    t.settle().await;
    assert_eq!(batches.sizes(), [10], "handed over full, before the hour");
    t.shutdown().await.expect("a clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_linger_gathers_light_traffic_into_batches_live() {
    support::nats::logs();
    let server = NatsServer::start();
    let (_client, js) = ruststream_test_server::client::connect_jetstream(&server).await;
    ruststream_test_server::client::create_stream(&js, "SENSORS", ["sensors.>"]).await;
    let batches = Batches::default();
    // A linger far longer than the publishing takes, even on a loaded machine.
    let running = app(
        NatsBroker::new(server.url()),
        Some(Duration::from_secs(5)),
        &batches,
    )
    .start(ruststream::Env::new())
    .await
    .expect("the app starts");

    // The first reading reaches the instance (the server counts it delivered) and waits in its
    // batch; four more come while it does.
    publish_stored(&js, "sensors.readings", READING).await;
    consumer_until(
        &js,
        "SENSORS",
        "store",
        "the first reading delivered",
        |i| i.delivered.consumer_sequence == 1,
    )
    .await;
    assert_eq!(batches.sizes(), Vec::<usize>::new(), "held for its batch");
    for _ in 0..4 {
        publish_stored(&js, "sensors.readings", READING).await;
    }
    let sizes = eventually(PATIENCE, "a batch handled", || {
        let sizes = batches.sizes();
        async move { (!sizes.is_empty()).then_some(sizes) }
    })
    .await;
    assert_eq!(sizes, [5], "one batch of the five readings");
    let info = consumer_until(&js, "SENSORS", "store", "every reading acknowledged", |i| {
        i.num_ack_pending == 0 && i.ack_floor.stream_sequence == 5
    })
    .await;
    assert_eq!(info.delivered.consumer_sequence, 5, "each delivered once");
    running.stop().await.expect("a drained stop");
}

/// `describe` names the linger, as text and as JSON, so an operator sees why a batch waited.
#[test]
fn describe_names_the_linger() {
    let batches = Batches::default();
    let with = app(
        NatsBroker::new("nats://unused:4222"),
        Some(Duration::from_millis(500)),
        &batches,
    );
    let table = ruststream::app::cli::describe(&with);
    assert!(
        table.contains("batch (max wait 500ms)"),
        "the linger is in the table:\n{table}"
    );
    let json = ruststream::app::cli::describe_json(&with);
    assert_eq!(json["registrations"][0]["batch_max_wait_ms"], 500, "{json}");
    let without = app(NatsBroker::new("nats://unused:4222"), None, &batches);
    let json = ruststream::app::cli::describe_json(&without);
    assert!(
        json["registrations"][0]["batch_max_wait_ms"].is_null(),
        "{json}"
    );
}
