//! The recovery behaviours the in-process NATS can express, with a paused clock: the same
//! bodies as the live `recovery_progress` and `recovery_poison` tests, showing the emulation
//! answers as a server does.

mod support;

use std::num::NonZeroUsize;
use std::time::Duration;

use ruststream::{AppInfo, HandlerOutcome, RustStream, Scope};
use ruststream_nats::testing::TestApp;
use ruststream_nats::{JetStreamSubject, NatsBroker};
use support::nats::*;

fn app(mount: impl FnOnce(&mut Scope<()>)) -> impl ruststream::App {
    RustStream::new(AppInfo::new("recovery", "0.1.0"))
        .with_broker(NatsBroker::new("nats://in-process.invalid:4222"), mount)
}

/// The app of `mount` started in process, and order `id` published to `orders.created`.
async fn one_order(id: u64, mount: impl FnOnce(&mut Scope<()>)) -> TestApp {
    let t = TestApp::start(app(mount)).await.expect("the app starts");
    t.publish("orders.created", &serde_json::json!({ "id": id }))
        .await
        .expect("published");
    t
}

fn slow_orders(handler: &Scripted) -> ruststream::WithHandler<JetStreamSubject, Scripted> {
    JetStreamSubject::new("orders.created", STREAM)
        .durable("slow")
        .ack_wait(millis(1_000))
        .handler(handler.clone())
}

#[tokio::test(start_paused = true)]
async fn without_progress_a_handler_slower_than_ack_wait_is_delivered_again() {
    let handler = Scripted::always(HandlerOutcome::ack()).slow(Duration::from_secs(3));
    let t = one_order(1, |b| {
        b.include(slow_orders(&handler))
            .name("slow")
            .concurrency(NonZeroUsize::new(2).expect("2"));
    })
    .await;
    t.advance(Duration::from_secs(5)).await;
    let delivered = handler.delivered();
    assert!(delivered.len() >= 2, "delivered again: {delivered:?}");
    t.shutdown().await.expect("a clean shutdown");
}

#[tokio::test(start_paused = true)]
async fn with_progress_a_handler_slower_than_ack_wait_is_delivered_once() {
    let handler = Scripted::always(HandlerOutcome::ack()).slow(Duration::from_secs(3));
    let t = one_order(1, |b| {
        b.include(slow_orders(&handler))
            .name("slow")
            .concurrency(NonZeroUsize::new(2).expect("2"))
            .progress_until(Duration::from_secs(10));
    })
    .await;
    t.advance(Duration::from_secs(5)).await;
    let delivered = handler.delivered();
    assert_eq!(delivered, [Some(1)]);
    let acks = t.nats().acknowledgements(STREAM, "slow");
    assert_eq!(acks.last().map(String::as_str), Some("+ACK"), "{acks:?}");
    assert!(
        acks.iter().filter(|a| *a == "+WPI").count() >= 5,
        "{acks:?}"
    );
    t.shutdown().await.expect("a clean shutdown");
}

#[tokio::test(start_paused = true)]
async fn a_hung_handler_past_its_timeout_is_a_retry() {
    let handler = Scripted::always(HandlerOutcome::ack()).slow_when(|seen| {
        if seen.delivered == Some(1) {
            Duration::from_secs(600)
        } else {
            Duration::ZERO
        }
    });
    let t = one_order(1, |b| {
        b.include(
            JetStreamSubject::new("orders.created", STREAM)
                .durable("hangs")
                .handler(handler.clone()),
        )
        .name("hangs")
        .handler_timeout(Duration::from_millis(500));
    })
    .await;
    t.advance(Duration::from_secs(2)).await;
    let delivered = handler.delivered();
    assert_eq!(delivered, [Some(1), Some(2)]);
    assert_eq!(t.nats().acknowledgements(STREAM, "hangs"), ["-NAK", "+ACK"]);
    t.shutdown().await.expect("a clean shutdown");
}

#[tokio::test(start_paused = true)]
async fn a_delivery_past_the_cap_is_dead_lettered_without_running_the_handler() {
    let handler = Scripted::always(HandlerOutcome::retry()).slow(Duration::from_secs(4));
    let t = one_order(7, |b| mount_capped(b, &handler)).await;
    t.advance(Duration::from_secs(10)).await;
    let delivered = handler.delivered();
    assert_eq!(delivered, [Some(1), Some(2)]);
    assert_eq!(t.dead_letters("orders.dead").len(), 1);
    let acks = t.nats().acknowledgements(STREAM, "hung");
    assert!(acks.contains(&"+TERM".to_owned()), "{acks:?}");
    t.shutdown().await.expect("a clean shutdown");
}
