//! Copies and dead letters carry the user's headers, never the server's control headers
//! (`Nats-Msg-Id`, `Nats-Expected-*`, ...), against a real nats-server: two dead letters with the
//! same message id are both stored, and a dead letter of a message that expected its own stream
//! is not refused by the dead-letter stream.

mod support;

use ruststream::HandlerOutcome;
use ruststream_nats::{CoreSubject, JetStreamSubject, NatsBroker, RETRY_COUNT_HEADER};
use ruststream_test_server::client::{stream_messages, wait_until};
use support::nats::*;

#[tokio::test]
async fn dead_letters_of_the_same_message_id_are_all_stored() {
    let (server, _client, js) = jetstream_server().await;
    create_stream(&js, "REFUNDS", ["refunds.>"]).await;
    create_stream(&js, "DEAD", ["dead.>"]).await;
    let handler = Scripted::always(HandlerOutcome::retry());
    let app = start_on(&server, |b| {
        b.include(created("orders_worker").handler(handler.clone()))
            .name("orders_worker")
            .max_attempts(attempts(1))
            .dead_letter("dead.letters");
        b.include(
            JetStreamSubject::new("refunds.created", "REFUNDS")
                .durable("refunds_worker")
                .handler(handler.clone()),
        )
        .name("refunds_worker")
        .max_attempts(attempts(1))
        .dead_letter("dead.letters");
    })
    .await;

    // The same message id in two streams (each stream deduplicates only its own), one of them
    // also insisting on the stream it goes to.
    publish_stored_with(
        &js,
        "orders.created",
        &[
            ("Nats-Msg-Id", "payment-42"),
            ("Nats-Expected-Stream", STREAM),
            ("x-trace", "t-orders"),
        ],
        order(1),
    )
    .await;
    publish_stored_with(
        &js,
        "refunds.created",
        &[("Nats-Msg-Id", "payment-42"), ("x-trace", "t-refunds")],
        order(2),
    )
    .await;

    until_settled(
        &js,
        "orders_worker",
        1,
        "the order dead-lettered and terminated",
    )
    .await;
    let mut dead = Vec::new();
    eventually(PATIENCE, "both dead letters stored", || {
        let js = js.clone();
        async move {
            let stored = stream_messages(&js, "DEAD").await;
            (stored.len() >= 2).then_some(())
        }
    })
    .await;
    dead.extend(stream_messages(&js, "DEAD").await);
    assert_eq!(dead.len(), 2, "both dead letters are stored");
    let mut traces: Vec<String> = dead
        .iter()
        .map(|m| {
            assert!(m.headers.get("Nats-Msg-Id").is_none(), "{:?}", m.headers);
            assert!(
                m.headers.get("Nats-Expected-Stream").is_none(),
                "{:?}",
                m.headers
            );
            m.headers
                .get("x-trace")
                .expect("the user's header is kept")
                .to_string()
        })
        .collect();
    traces.sort();
    assert_eq!(traces, ["t-orders", "t-refunds"]);
    app.stop().await.expect("the app stops");
}

#[tokio::test]
async fn core_copies_keep_the_users_headers_only() {
    let (server, client) = live_server().await;
    let handler = Scripted::first_then_ack(HandlerOutcome::retry());
    let app = start(NatsBroker::new(server.url()), |b| {
        b.include(CoreSubject::new("notices.sent").handler(handler.clone()))
            .max_attempts(attempts(2));
    })
    .await
    .expect("the app starts");
    publish_core(
        &client,
        "notices.sent",
        &[
            ("Nats-Msg-Id", "notice-1"),
            ("Nats-Rollup", "sub"),
            ("x-trace", "t-1"),
        ],
        &order(1),
    )
    .await;
    let seen = handler.until_seen(2).await;
    let copy = &seen[1].headers;
    assert_eq!(copy.get("x-trace"), Some("t-1"));
    assert_eq!(copy.get(RETRY_COUNT_HEADER), Some("1"));
    assert_eq!(copy.get("Nats-Msg-Id"), None, "{copy:?}");
    assert_eq!(copy.get("Nats-Rollup"), None, "{copy:?}");
    wait_until(PATIENCE, "nothing else", || handler.seen().len() == 2).await;
    app.stop().await.expect("the app stops");
}
