//! Slow and hung handlers, live: opt-in automatic progress (`+WPI` every `ack_wait / 2` while the
//! handler runs, up to a declared deadline) keeps a slow handler's message from being delivered
//! again; a handler timeout turns a hung handler into `retry()`. Both show in `describe`.

mod support;

use std::num::NonZeroUsize;
use std::time::Duration;

use ruststream::{AppInfo, HandlerOutcome, RustStream};
use ruststream_nats::{JetStreamSubject, NatsBroker};
use support::nats::*;

#[tokio::test]
async fn a_handler_slower_than_ack_wait_with_progress_is_delivered_once() {
    eprintln!("running against {}", NatsServer::version());
    let (server, client, js) = jetstream_server().await;
    let acks = Recorder::start(&client, ["$JS.ACK.ORDERS.slow.>"]).await;
    let handler = Scripted::always(HandlerOutcome::ack()).slow(Duration::from_secs(3));
    let running = start_on(&server, |b| {
        b.include(
            JetStreamSubject::new("orders.created", STREAM)
                .durable("slow")
                .ack_wait(millis(1_000))
                .handler(handler.clone()),
        )
        .concurrency(NonZeroUsize::new(2).expect("2"))
        .progress_until(Duration::from_secs(10));
    })
    .await;
    let seq = publish_stored(&js, "orders.created", order(1)).await;
    until_settled(&js, "slow", seq, "acknowledged").await;

    let delivered = handler.delivered();
    assert_eq!(delivered, [Some(1)], "delivered once");
    let acks = acks.acks(STREAM, "slow");
    assert_eq!(acks.iter().filter(|a| *a == "+ACK").count(), 1, "{acks:?}");
    assert!(
        acks.iter().filter(|a| *a == "+WPI").count() >= 4,
        "a progress signal every 500 ms for 3 s: {acks:?}"
    );
    let info = consumer_info(&js, STREAM, "slow").await;
    assert_eq!(info.delivered.consumer_sequence, 1, "{info:#?}");
    running.stop().await.expect("a clean stop");
}

#[tokio::test]
async fn a_hung_handler_past_its_timeout_is_a_retry() {
    let (server, client, js) = jetstream_server().await;
    let acks = Recorder::start(&client, ["$JS.ACK.ORDERS.hangs.>"]).await;
    // The first delivery hangs (far past ack_wait); the second is quick.
    let handler = Scripted::always(HandlerOutcome::ack()).slow_when(|seen| {
        if seen.delivered == Some(1) {
            Duration::from_secs(600)
        } else {
            Duration::ZERO
        }
    });
    let running = start_on(&server, |b| {
        b.include(
            JetStreamSubject::new("orders.created", STREAM)
                .durable("hangs")
                .handler(handler.clone()),
        )
        .handler_timeout(Duration::from_millis(500));
    })
    .await;
    let seq = publish_stored(&js, "orders.created", order(1)).await;
    // Well before the 30 s ack_wait: the timeout sent -NAK, and the redelivery was acknowledged.
    until_settled(&js, "hangs", seq, "acknowledged on the second delivery").await;
    let delivered = handler.delivered();
    assert_eq!(delivered, [Some(1), Some(2)]);
    assert_eq!(acks.acks(STREAM, "hangs"), ["-NAK", "+ACK"]);
    running.stop().await.expect("a clean stop");
}

#[test]
fn describe_shows_the_timeout_the_progress_and_confirmed_acks() {
    let app = RustStream::new(AppInfo::new("slow", "0.1.0")).with_broker(
        NatsBroker::new("nats://127.0.0.1:4222"),
        |b| {
            b.include(
                JetStreamSubject::new("orders.created", STREAM)
                    .durable("slow")
                    .ack_wait(millis(1_000))
                    .handler(Scripted::always(HandlerOutcome::ack())),
            )
            .progress_until(Duration::from_secs(10))
            .handler_timeout(Duration::from_secs(12))
            .confirm_acks();
        },
    );
    let table = ruststream::app::cli::describe(&app);
    assert!(
        table.contains("1s, progress up to 10s, timeout 12s, confirmed acks"),
        "{table}"
    );
}
