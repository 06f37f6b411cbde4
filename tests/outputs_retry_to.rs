//! Core retry copies: `CoreSubject::retry_to` sends them to a subject of their own instead of
//! back to the subject read (where every other subscriber, and a stream storing it, would see
//! each retry as a new message), and the app warns at startup when a stream stores the subject
//! copies go to.

mod support;

use ruststream_nats::prelude::*;
use ruststream_nats::testing::{InProcessNats, TestApp};
use ruststream_nats::transport::{StreamAdmin as _, StreamSpec};
use serde::Deserialize;
use support::logs::Logs;

#[derive(Debug, Deserialize)]
struct Shipped {
    id: u64,
}

#[subscriber(CoreSubject::new("orders.shipped").retry_to("orders.shipped.retry"))]
async fn notify(order: &Shipped) -> HandlerOutcome {
    let _ = order.id;
    HandlerOutcome::retry()
}

#[subscriber("orders.placed")]
async fn confirm(order: &Shipped) -> HandlerOutcome {
    let _ = order.id;
    HandlerOutcome::retry()
}

fn app() -> impl App<State = ()> {
    RustStream::new(AppInfo::new("shipping", "0.1.0")).with_broker(
        NatsBroker::new("nats://127.0.0.1:1"),
        |b| {
            b.include(notify).max_attempts(nonzero!(2));
            b.include(confirm).max_attempts(nonzero!(2));
        },
    )
}

#[tokio::test(start_paused = true)]
async fn copies_go_to_the_retry_subject_and_a_stored_target_is_warned_about() {
    let logs = Logs::default();
    let _guard = logs.install();

    let nats = InProcessNats::new();
    nats.declare_stream(StreamSpec {
        name: "PLACED".into(),
        subjects: vec!["orders.placed".into()],
    })
    .await
    .expect("declared");
    let t = TestApp::start_on(app(), nats)
        .await
        .expect("the app starts");

    let text = logs.text();
    let warning = text
        .lines()
        .find(|l| l.contains("WARN") && l.contains("retry copies go to `orders.placed`"))
        .unwrap_or_else(|| panic!("a warning about the stored copy target; logs:\n{text}"));
    assert!(warning.contains("stream `PLACED` stores"), "{warning}");
    assert!(warning.contains("registration=confirm"), "{warning}");
    assert!(
        !text.contains("retry copies go to `orders.shipped.retry`"),
        "no stream stores the retry subject:\n{text}"
    );

    t.publish("orders.shipped", &serde_json::json!({"id": 1}))
        .await
        .expect("published");
    t.settle().await;
    assert_eq!(
        t.nats().published("orders.shipped").len(),
        1,
        "the original only"
    );
    let copies = t.nats().published("orders.shipped.retry");
    assert_eq!(copies.len(), 1, "the copy went to the retry subject");
    assert_eq!(&copies[0].payload[..], br#"{"id":1}"#);

    // The default stays: a copy goes back to the subject read.
    t.publish("orders.placed", &serde_json::json!({"id": 2}))
        .await
        .expect("published");
    t.settle().await;
    assert_eq!(
        t.nats().published("orders.placed").len(),
        2,
        "original and copy"
    );
    assert_eq!(
        t.nats().stream_messages("PLACED").len(),
        2,
        "the stream stored both"
    );
    t.shutdown().await.expect("a clean stop");
}
