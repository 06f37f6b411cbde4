//! The public live harness: one test body run by `TestApp` in process (paused clock) and against
//! a real nats-server the harness starts (`testing::NatsServer`, running clock), asserting the
//! same outcomes, delivered counts, publishes, dead letters, acknowledgements and consumer
//! facts; live, the server's own view is then asked again through a raw async-nats client.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::FutureExt as _;
use ruststream::ErrorKind;
use ruststream_nats::prelude::*;
use ruststream_nats::testing::{NatsServer, TestApp};
use ruststream_test_server::client;
use serde::{Deserialize, Serialize};

/// The warehouse's backoff: short, since a live test waits it in real time.
const DELAY: Duration = Duration::from_millis(200);

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Order {
    id: u64,
}

#[derive(Debug, PartialEq, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "orders.reserved")]
struct Reserved {
    order: u64,
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Payment {
    id: u64,
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Note {
    id: u64,
}

/// Busy on the first delivery, then reserves and answers.
#[subscriber(JetStreamSubject::new("orders.created", "ORDERS").durable("reserve"), reply)]
async fn reserve(
    order: &Order,
    Ctx(delivered): Ctx<Delivered>,
) -> Result<Reserved, HandlerOutcome> {
    if delivered == Some(1) {
        return Err(HandlerOutcome::retry_after(DELAY));
    }
    Ok(Reserved { order: order.id })
}

/// The bank is down: every delivery asks again, until the cap sends it to the dead letters.
#[subscriber(JetStreamSubject::new("payments.due", "PAYMENTS").durable("charge"))]
async fn charge(_payment: &Payment) -> HandlerOutcome {
    HandlerOutcome::retry()
}

/// A Core handler that fails its first attempt: the runtime's copy brings it back.
#[subscriber("notes.send")]
async fn notify(_note: &Note, Ctx(attempt): Ctx<Attempt>) -> HandlerOutcome {
    if attempt == 1 {
        return HandlerOutcome::retry();
    }
    HandlerOutcome::ack()
}

fn app() -> impl App<State = ()> {
    RustStream::new(AppInfo::new("orders", "0.1.0")).with_broker(
        NatsBroker::new("nats://localhost:4222"),
        |b| {
            b.include(reserve);
            b.include(charge)
                .max_attempts(nonzero!(3))
                .dead_letter("payments.dead");
            b.include(notify).max_attempts(nonzero!(2));
        },
    )
}

/// The one test body: the same publishes, waits and assertions in process and live.
async fn scenario(t: &TestApp) {
    t.publish("orders.created", &Order { id: 1 })
        .await
        .expect("published");
    t.publish("payments.due", &Payment { id: 2 })
        .await
        .expect("published");
    t.publish("notes.send", &Note { id: 3 })
        .await
        .expect("published");
    t.settle().await;

    // Retry after a delay: held by the server, nothing published yet.
    assert_eq!(t.outcomes("reserve"), [HandlerOutcome::retry_after(DELAY)]);
    assert!(t.published::<Reserved>("orders.reserved").is_empty());
    // Retry to the cap, then the dead letter, as it arrived.
    assert_eq!(t.outcomes("charge"), vec![HandlerOutcome::retry(); 3]);
    assert_eq!(t.delivered("charge"), [Some(1), Some(2), Some(3)]);
    let dead = t.dead_letters("payments.dead");
    assert_eq!(dead.len(), 1, "one dead letter");
    assert_eq!(
        serde_json::from_slice::<Payment>(&dead[0].payload).expect("a payment"),
        Payment { id: 2 }
    );
    assert_eq!(
        t.acknowledgements("PAYMENTS", "charge"),
        ["-NAK", "-NAK", "+TERM"]
    );
    // Core: the copy came back at once and was taken.
    assert_eq!(
        t.outcomes("notify"),
        [HandlerOutcome::retry(), HandlerOutcome::ack()]
    );
    assert_eq!(t.delivered("notify"), [None, None]);

    // The delay passes (live: in real time); the order comes back and is answered.
    t.advance(DELAY).await;
    assert_eq!(
        t.outcomes("reserve"),
        [HandlerOutcome::retry_after(DELAY), HandlerOutcome::ack()]
    );
    assert_eq!(t.delivered("reserve"), [Some(1), Some(2)]);
    assert_eq!(
        t.published::<Reserved>("orders.reserved"),
        [Reserved { order: 1 }]
    );
    assert_eq!(
        t.acknowledgements("ORDERS", "reserve"),
        [
            ruststream_test_server::client::nak_with(DELAY),
            "+ACK".to_owned()
        ]
    );

    // What the server holds, asked the same way of either.
    let reserve = t
        .consumer_info("ORDERS", "reserve")
        .await
        .expect("the consumer");
    assert_eq!(
        (reserve.delivered, reserve.ack_pending, reserve.pending),
        (2, 0, 0)
    );
    let charge = t
        .consumer_info("PAYMENTS", "charge")
        .await
        .expect("the consumer");
    assert_eq!((charge.delivered, charge.ack_pending), (3, 0));
    let stored = t.stream_messages("ORDERS").await;
    let subjects: Vec<&str> = stored.iter().map(|m| &*m.subject).collect();
    assert_eq!(subjects, ["orders.created"]);
}

#[tokio::test(start_paused = true)]
async fn the_scenario_in_process() {
    let t = TestApp::start(app()).await.expect("the app starts");
    assert!(!t.is_live());
    scenario(&t).await;
    t.shutdown().await.expect("a clean shutdown");
}

#[tokio::test]
async fn the_scenario_on_a_real_server() {
    eprintln!("running against {}", NatsServer::version());
    let server = NatsServer::start();
    let (raw, js) = client::connect_jetstream(&server).await;
    // PAYMENTS exists before the test and stores its dead letters too; ORDERS does not.
    client::create_stream(&js, "PAYMENTS", ["payments.>"]).await;
    let dead = client::Recorder::start(&raw, ["payments.dead"]).await;

    let t = TestApp::start_live(app(), &server.url())
        .await
        .expect("the app starts on the server");
    assert!(t.is_live());
    assert_eq!(t.streams_created_for_the_test(), ["ORDERS"]);
    scenario(&t).await;

    // The server's own view, through a client of the test's own.
    let reserve = client::consumer_info(&js, "ORDERS", "reserve").await;
    assert_eq!(reserve.delivered.consumer_sequence, 2);
    assert_eq!(reserve.num_ack_pending, 0);
    assert_eq!(reserve.num_redelivered, 0);
    let charge = client::consumer_info(&js, "PAYMENTS", "charge").await;
    assert_eq!(charge.delivered.consumer_sequence, 3);
    assert_eq!(charge.num_ack_pending, 0);
    let payments = client::stream_messages(&js, "PAYMENTS").await;
    let subjects: Vec<&str> = payments.iter().map(|m| m.subject.as_str()).collect();
    assert_eq!(subjects, ["payments.due", "payments.dead"]);
    assert_eq!(payments[1].payload, payments[0].payload, "as it arrived");
    let dead = dead.until(1).await;
    assert_eq!(dead[0].payload, payments[0].payload);

    t.shutdown().await.expect("a clean shutdown");
    // The stream made for the test is gone; the one that was there stays.
    assert!(js.get_stream("ORDERS").await.is_err(), "ORDERS deleted");
    assert!(js.get_stream("PAYMENTS").await.is_ok(), "PAYMENTS kept");
}

static OPEN: AtomicBool = AtomicBool::new(false);

/// Holds every delivery until the test opens the gate.
#[subscriber("work.slow")]
async fn slow(_note: &Note) -> HandlerOutcome {
    while !OPEN.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    HandlerOutcome::ack()
}

fn slow_app() -> impl App<State = ()> {
    RustStream::new(AppInfo::new("slow", "0.1.0")).with_broker(
        NatsBroker::new("nats://localhost:4222"),
        |b| {
            b.include(slow);
        },
    )
}

#[tokio::test]
async fn a_live_settle_that_cannot_finish_says_what_is_pending() {
    let server = NatsServer::start();
    let t = TestApp::start_live(slow_app(), &server.url())
        .await
        .expect("the app starts")
        .with_patience(Duration::from_millis(300));
    t.publish("work.slow", &Note { id: 1 })
        .await
        .expect("published");
    assert!(!t.try_settle(10).await, "the handler still runs");
    let panicked = std::panic::AssertUnwindSafe(t.settle())
        .catch_unwind()
        .await
        .expect_err("settle gives up");
    let message = panicked
        .downcast_ref::<String>()
        .expect("a formatted message");
    assert!(
        message.contains("registration `slow` handled 0 of the 1 message(s) on `work.slow`"),
        "{message}"
    );
    OPEN.store(true, Ordering::SeqCst);
    t.settle().await;
    assert_eq!(t.outcomes("slow"), [HandlerOutcome::ack()]);
    t.shutdown().await.expect("a clean shutdown");
}

#[tokio::test]
async fn no_server_at_the_url_is_a_connect_error_that_says_what_to_do() {
    // A port nothing listens on: one the harness had, then stopped.
    let url = {
        let server = NatsServer::start();
        server.url()
    };
    let err = TestApp::start_live(app(), &url)
        .await
        .expect_err("nothing listens");
    assert_eq!(err.kind(), ErrorKind::Connect);
    let text = err.to_string();
    assert!(
        text.contains(&url) && text.contains("NatsServer::start()"),
        "{text}"
    );
}
