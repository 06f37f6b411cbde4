//! Recovery, live: a consumer that vanished under a running registration is created again from
//! where the registration stood, never replaying what it already settled; a stream that vanished
//! is reported at error level, and the registration comes back once the stream exists again.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use futures::TryStreamExt as _;
use ruststream::HandlerOutcome;
use ruststream_nats::{JetStreamSubject, NatsBroker};
use ruststream_test_server::client::eventually;
use support::nats::*;

/// How soon a registration must be handling messages again.
const RECOVERY: Duration = Duration::from_secs(15);

/// Every consumer of `stream`, as the server reports them.
async fn consumers(js: &jetstream::Context, stream: &str) -> Vec<consumer::Info> {
    let stream = js.get_stream(stream).await.expect("the stream exists");
    stream
        .consumers()
        .try_collect()
        .await
        .expect("the server lists the consumers")
}

/// How many times the handler saw each order id.
fn counts(handler: &Scripted) -> BTreeMap<u64, usize> {
    let mut counts = BTreeMap::new();
    for seen in handler.seen() {
        *counts.entry(seen.id).or_default() += 1;
    }
    counts
}

/// Waits until `handler` saw every id in `ids`.
async fn until_all_seen(handler: &Scripted, ids: &[u64], what: &str) {
    eventually(RECOVERY, what, || async {
        let counts = counts(handler);
        ids.iter().all(|id| counts.contains_key(id)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn consumers_deleted_by_an_operator_are_created_again_where_the_registration_stood() {
    eprintln!("running against {}", NatsServer::version());
    let (_server, _client, js) = jetstream_server().await;
    let ephemeral = Scripted::always(HandlerOutcome::ack());
    let durable = Scripted::always(HandlerOutcome::ack());
    let running = start_on(&_server, |b| {
        b.include(JetStreamSubject::new("orders.ephemeral", STREAM).handler(ephemeral.clone()))
            .name("ephemeral");
        b.include(
            JetStreamSubject::new("orders.durable", STREAM)
                .durable("worker")
                .handler(durable.clone()),
        )
        .name("durable");
    })
    .await;

    for id in 1..=3 {
        publish_stored(&js, "orders.ephemeral", order(id)).await;
        publish_stored(&js, "orders.durable", order(id)).await;
    }
    until_all_seen(
        &ephemeral,
        &[1, 2, 3],
        "the ephemeral registration handles 1..=3",
    )
    .await;
    until_all_seen(
        &durable,
        &[1, 2, 3],
        "the durable registration handles 1..=3",
    )
    .await;
    until_settled(&js, "worker", 6, "the durable settled 1..=3").await;

    // An operator deletes both consumers (`nats consumer rm`).
    let stream = js.get_stream(STREAM).await.expect("the stream exists");
    for info in consumers(&js, STREAM).await {
        stream
            .delete_consumer(&info.name)
            .await
            .expect("the consumer is deleted");
    }

    for id in 4..=6 {
        publish_stored(&js, "orders.ephemeral", order(id)).await;
        publish_stored(&js, "orders.durable", order(id)).await;
    }
    until_all_seen(
        &ephemeral,
        &[4, 5, 6],
        "the ephemeral registration handles 4..=6",
    )
    .await;
    until_all_seen(
        &durable,
        &[4, 5, 6],
        "the durable registration handles 4..=6",
    )
    .await;

    // Created again, from where each stood: nothing it had settled came back.
    for (name, handler) in [("ephemeral", &ephemeral), ("durable", &durable)] {
        let counts = counts(handler);
        assert!(
            counts.values().all(|&n| n == 1),
            "{name} handled a message twice: {counts:?}"
        );
    }
    let after = consumers(&js, STREAM).await;
    assert_eq!(after.len(), 2, "both consumers exist again: {after:#?}");
    assert!(after.iter().any(|c| c.name == "worker"), "{after:#?}");
    running.stop().await.expect("a clean stop");

    // The durable created again is the app's own on its next start: no conflict.
    let again = start_on(&_server, |b| {
        b.include(
            JetStreamSubject::new("orders.durable", STREAM)
                .durable("worker")
                .handler(durable.clone()),
        )
        .name("durable");
    })
    .await;
    publish_stored(&js, "orders.durable", order(7)).await;
    until_all_seen(&durable, &[7], "the restarted app handles 7").await;
    assert_eq!(counts(&durable).get(&1), Some(&1));
    again.stop().await.expect("a clean stop");
}

#[tokio::test]
async fn a_memory_stream_lost_in_a_restart_is_reported_and_read_again_once_it_exists() {
    let logs = Logs::default();
    let _guard = logs.install();
    let mut server = NatsServer::start();
    let (client, js) = connect_jetstream(&server).await;
    let memory = stream::Config {
        name: STREAM.to_owned(),
        subjects: vec!["orders.>".to_owned()],
        storage: stream::StorageType::Memory,
        ..Default::default()
    };
    js.create_stream(memory.clone())
        .await
        .expect("the stream is created");
    drop((client, js));
    let ephemeral = Scripted::always(HandlerOutcome::ack());
    let durable = Scripted::always(HandlerOutcome::ack());
    let running = start(NatsBroker::new(server.url()), |b| {
        b.include(JetStreamSubject::new("orders.ephemeral", STREAM).handler(ephemeral.clone()))
            .name("ephemeral");
        b.include(
            JetStreamSubject::new("orders.durable", STREAM)
                .durable("worker")
                .handler(durable.clone()),
        )
        .name("durable");
    })
    .await
    .expect("the app starts");
    let (_client, js) = connect_jetstream(&server).await;
    for id in 1..=3 {
        publish_stored(&js, "orders.ephemeral", order(id)).await;
        publish_stored(&js, "orders.durable", order(id)).await;
    }
    until_all_seen(
        &ephemeral,
        &[1, 2, 3],
        "the ephemeral registration handles 1..=3",
    )
    .await;
    until_all_seen(
        &durable,
        &[1, 2, 3],
        "the durable registration handles 1..=3",
    )
    .await;

    // The restart loses the memory stream, its messages and its consumers.
    server.kill();
    server.restart();
    let (_client, js) = connect_jetstream(&server).await;

    // Each registration says, at error level, that it is not consuming, and why.
    for name in ["ephemeral", "durable"] {
        eventually(
            RECOVERY,
            &format!("an error log for registration `{name}`"),
            || async {
                logs.lines()
                    .iter()
                    .any(|line| {
                        line.contains("ERROR")
                            && line.contains(&format!("registration=\"{name}\""))
                            && line.contains("does not exist")
                    })
                    .then_some(())
            },
        )
        .await;
    }

    // An operator creates the stream again: its sequences start over, and the registrations
    // read it from the start (not from where they stood in the stream that was lost).
    js.create_stream(memory).await.expect("the stream is back");
    for id in 11..=12 {
        publish_stored(&js, "orders.ephemeral", order(id)).await;
        publish_stored(&js, "orders.durable", order(id)).await;
    }
    until_all_seen(
        &ephemeral,
        &[11, 12],
        "the ephemeral registration handles 11, 12",
    )
    .await;
    until_all_seen(
        &durable,
        &[11, 12],
        "the durable registration handles 11, 12",
    )
    .await;
    for info in consumers(&js, STREAM).await {
        consumer_until(&js, STREAM, &info.name, "nothing left to settle", |i| {
            i.num_ack_pending == 0 && i.num_pending == 0
        })
        .await;
    }
    running.stop().await.expect("a clean stop");
}
