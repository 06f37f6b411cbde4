//! A handler call that panics is not lost from a test's view: `t.panics(..)` (and the
//! `Recorder` a live test passes in) list it with its message and what the runtime did with the
//! delivery, while `t.outcomes(..)` keeps to what handlers returned. The same body runs in
//! process and on a real server, where the consumer's counters say the same.

use std::sync::Arc;

use ruststream::settle::{AckKind, Settle};
use ruststream::{App, Env, Observer};
use ruststream_nats::prelude::*;
use ruststream_nats::testing::{HandlerPanic, Recorder, TestApp};
use ruststream_test_server::NatsServer;
use ruststream_test_server::client::{
    PATIENCE, connect_jetstream, consumer_until, create_stream, eventually, publish_core,
    publish_stored,
};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
struct Order {
    id: u64,
}

/// Panics on the first delivery of order 13; acknowledges everything else.
#[subscriber(JetStreamSubject::new("orders.created", "ORDERS").durable("book"))]
async fn book(order: &Order, Ctx(attempt): Ctx<Attempt>) -> HandlerOutcome {
    if order.id == 13 && attempt == 1 {
        panic!("order 13 is cursed");
    }
    HandlerOutcome::ack()
}

/// Panics on every Core message; nothing brings it back (no cap on Core: let go).
#[subscriber("alerts.raised")]
async fn alert(order: &Order) -> HandlerOutcome {
    panic!("alert {} has no receiver", order.id);
}

fn app(url: &str) -> impl App<State = ()> {
    RustStream::new(AppInfo::new("panics", "0.1.0")).with_broker(NatsBroker::new(url), |b| {
        b.include(book);
        b.include(alert);
    })
}

/// What every run must show, in process and live.
fn assert_recorded(recorder: &Recorder) {
    // `outcomes` lists what the handler returned: the second delivery's ack only.
    assert_eq!(recorder.outcomes("book"), [HandlerOutcome::ack()]);
    let panics = recorder.panics("book");
    assert_eq!(panics.len(), 1, "{panics:?}");
    let HandlerPanic {
        subject,
        delivered,
        attempt,
        payload,
        message,
        decision,
        ..
    } = &panics[0];
    assert_eq!(subject, "orders.created");
    assert_eq!((*delivered, *attempt), (Some(1), 1));
    assert_eq!(&payload[..], br#"{"id":13}"#);
    assert_eq!(message, "order 13 is cursed");
    // `on_panic` is `retry()` by default: the server is told to deliver it again.
    assert_eq!(decision.settle, Settle::Send(AckKind::Nak));
    assert!(decision.brings_back());
    // Both deliveries, panicking or not, ran the handler.
    assert_eq!(recorder.delivered("book"), [Some(1), Some(2)]);

    assert!(recorder.outcomes("alert").is_empty());
    let alerts: Vec<String> = recorder
        .panics("alert")
        .into_iter()
        .map(|p| p.message)
        .collect();
    assert_eq!(alerts, ["alert 7 has no receiver"]);
}

#[tokio::test(start_paused = true)]
async fn in_process_a_panicking_call_is_listed_by_panics() {
    let t = TestApp::start(app("nats://localhost:4222"))
        .await
        .expect("starts");
    t.publish("orders.created", &serde_json::json!({"id": 13}))
        .await
        .expect("published");
    t.publish("alerts.raised", &serde_json::json!({"id": 7}))
        .await
        .expect("published");
    t.settle().await;
    assert_recorded(t.recorder());
    // TestApp asks the same of the recorder, after checking the name.
    assert_eq!(t.panics("book"), t.recorder().panics("book"));
    assert_eq!(t.outcomes("book"), [HandlerOutcome::ack()]);
    let info = t.nats().consumer_info("ORDERS", "book").expect("consumer");
    assert_eq!((info.delivered, info.ack_pending), (2, 0));
    t.shutdown().await.expect("stops");
}

#[tokio::test(start_paused = true)]
#[should_panic(expected = "no registration named `boook`")]
async fn panics_of_an_unknown_registration_names_the_ones_there_are() {
    let t = TestApp::start(app("nats://localhost:4222"))
        .await
        .expect("starts");
    let _ = t.panics("boook");
}

#[tokio::test]
async fn live_a_panicking_call_is_listed_by_the_recorder() {
    let server = NatsServer::start();
    let (client, js) = connect_jetstream(&server).await;
    create_stream(&js, "ORDERS", ["orders.>"]).await;
    let recorder = Arc::new(Recorder::new());
    let running = app(&server.url())
        .start(Env::new().with_observer(Arc::clone(&recorder) as Arc<dyn Observer>))
        .await
        .expect("the app starts");
    publish_stored(&js, "orders.created", r#"{"id":13}"#).await;
    consumer_until(&js, "ORDERS", "book", "delivered twice and settled", |i| {
        i.delivered.stream_sequence == 1
            && i.num_ack_pending == 0
            && i.ack_floor.stream_sequence == 1
    })
    .await;
    // The Core subscription is in place once the app started.
    publish_core(&client, "alerts.raised", &[], r#"{"id":7}"#).await;
    eventually(
        PATIENCE,
        "both calls of `book` and the alert recorded",
        || async {
            (recorder.handled("book").len() == 2 && !recorder.handled("alert").is_empty())
                .then_some(())
        },
    )
    .await;
    let info = consumer_until(&js, "ORDERS", "book", "settled", |i| i.num_ack_pending == 0).await;
    assert_eq!(info.delivered.consumer_sequence, 2, "delivered twice");
    assert_eq!(
        info.num_redelivered, 0,
        "nothing waits to be delivered again"
    );
    running.stop().await.expect("stops");
    assert_recorded(&recorder);
}
