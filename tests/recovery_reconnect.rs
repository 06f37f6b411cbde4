//! Reconnect under load, live (the "reconnect" case of Watermill's universal pub/sub tests): a
//! publisher keeps storing messages while the app's link is cut twice and stalled once; every
//! message is handled at least once and nothing is left pending.

mod support;

use std::collections::BTreeSet;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ruststream::HandlerOutcome;
use ruststream_nats::{JetStreamSubject, NatsBroker};
use ruststream_test_server::client::{eventually, wait_until};
use ruststream_test_server::proxy::Proxy;
use support::nats::*;

const MESSAGES: u64 = 3_000;

#[tokio::test]
async fn a_registration_under_load_survives_cuts_and_a_stall() {
    eprintln!("running against {}", NatsServer::version());
    let (server, _client, js) = jetstream_server().await;
    let proxy = Proxy::start(server.port());
    let handler = Scripted::always(HandlerOutcome::ack());
    let running = start(NatsBroker::new(proxy.url()), |b| {
        b.include(
            JetStreamSubject::new("orders.created", STREAM)
                .durable("steady")
                .ack_wait(millis(2_000))
                .handler(handler.clone()),
        )
        .concurrency(NonZeroUsize::new(4).expect("4"));
    })
    .await
    .expect("the app starts");

    // The publisher stores messages at a steady pace from its own connection, throughout.
    let published = Arc::new(AtomicU64::new(0));
    let publisher = {
        let js = js.clone();
        let published = Arc::clone(&published);
        tokio::spawn(async move {
            for id in 1..=MESSAGES {
                publish_stored(&js, "orders.created", order(id)).await;
                published.store(id, Ordering::SeqCst);
                if id % 100 == 0 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        })
    };
    let handled_at_least = |n: usize| {
        let handler = handler.clone();
        move || handler.seen().len() >= n
    };

    wait_until(PATIENCE, "handling under way", handled_at_least(300)).await;
    let connections = proxy.connections();
    proxy.cut();
    quiet_for(Duration::from_secs(1)).await;
    proxy.heal();
    wait_until(PATIENCE, "the app reconnects", || {
        proxy.connections() > connections
    })
    .await;
    let seen = handler.seen().len();
    wait_until(
        PATIENCE,
        "handling after the first cut",
        handled_at_least(seen + 300),
    )
    .await;

    proxy.stall();
    quiet_for(Duration::from_secs(2)).await;
    proxy.heal();
    let seen = handler.seen().len();
    wait_until(
        PATIENCE,
        "handling after the stall",
        handled_at_least(seen + 300),
    )
    .await;

    let connections = proxy.connections();
    proxy.cut();
    quiet_for(Duration::from_secs(1)).await;
    proxy.heal();
    wait_until(PATIENCE, "the app reconnects again", || {
        proxy.connections() > connections
    })
    .await;

    publisher.await.expect("the publisher stored everything");
    let ids = eventually(PATIENCE * 3, "every message handled", || async {
        let ids: BTreeSet<u64> = handler.seen().iter().map(|s| s.id).collect();
        (ids.len() == usize::try_from(MESSAGES).expect("small")).then_some(ids)
    })
    .await;
    assert_eq!(ids.first(), Some(&1));
    assert_eq!(ids.last(), Some(&MESSAGES));
    consumer_until(&js, STREAM, "steady", "nothing pending", |i| {
        i.num_pending == 0 && i.num_ack_pending == 0
    })
    .await;
    let again = handler.seen().len() - ids.len();
    eprintln!(
        "{MESSAGES} messages, {} deliveries handled ({again} again: messages in transit through the stall past ack_wait, settlements lost with the cut connections)",
        handler.seen().len()
    );
    running.stop().await.expect("a clean stop");
    assert_eq!(published.load(Ordering::SeqCst), MESSAGES);
}
