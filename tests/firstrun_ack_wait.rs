//! `ack_wait` takes a `Duration`, as every other duration does, or a `NonZeroDuration` (the
//! seeds' form): both reach the server as the consumer's `ack_wait`. A zero `Duration` is not
//! a panic and not a silent default: the app refuses to start, naming the registration.

use std::time::Duration;

use async_nats::jetstream::consumer::PullConsumer;
use ruststream::{ErrorKind, NonZeroDuration, nonzero};
use ruststream_nats::prelude::*;
use ruststream_nats::testing::TestApp;
use ruststream_test_server::NatsServer;
use ruststream_test_server::client::{connect_jetstream, create_stream};
use serde::Deserialize;

#[derive(Deserialize)]
struct Order {
    id: u64,
}

// The attribute takes the `Duration` as written anywhere else.
#[subscriber(
    JetStreamSubject::new("orders.created", "ORDERS")
        .durable("book")
        .ack_wait(Duration::from_millis(2_500))
)]
async fn book(order: &Order) -> HandlerOutcome {
    let _ = order.id;
    HandlerOutcome::ack()
}

// The seeds' form.
#[subscriber(
    JetStreamSubject::new("orders.shipped", "ORDERS")
        .durable("ship")
        .ack_wait(NonZeroDuration::from_secs(nonzero!(7)))
)]
async fn ship(order: &Order) -> HandlerOutcome {
    let _ = order.id;
    HandlerOutcome::ack()
}

fn app(url: &str) -> impl App<State = ()> {
    RustStream::new(AppInfo::new("waits", "0.1.0")).with_broker(NatsBroker::new(url), |b| {
        b.include(book);
        b.include(ship);
    })
}

fn zero_app(wait: Duration) -> impl App<State = ()> {
    RustStream::new(AppInfo::new("zero", "0.1.0")).with_broker(
        NatsBroker::new("nats://localhost:4222"),
        move |b| {
            b.include(ship);
            b.include(
                JetStreamSubject::new("orders.created", "ORDERS")
                    .durable("book")
                    .ack_wait(wait)
                    .handler(Book),
            )
            .name("book_at_once");
        },
    )
}

struct Book;

impl Handle<Order> for Book {
    async fn handle(
        &self,
        _order: &Order,
        _outs: &(),
        _ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        Ok(())
    }
}

#[test]
fn a_duration_and_a_non_zero_duration_say_the_same() {
    let plain = JetStreamSubject::new("orders.created", "ORDERS").ack_wait(Duration::from_secs(60));
    let checked = JetStreamSubject::new("orders.created", "ORDERS")
        .ack_wait(NonZeroDuration::from_secs(nonzero!(60)));
    assert_eq!(plain, checked);
    assert_eq!(plain.ack_wait_duration(), Duration::from_secs(60));
    // Unset: the default.
    assert_eq!(
        JetStreamSubject::new("orders.created", "ORDERS").ack_wait_duration(),
        ruststream_nats::descriptor::DEFAULT_ACK_WAIT
    );
}

#[tokio::test]
async fn the_server_is_given_the_wait_written_either_way() {
    let server = NatsServer::start();
    let (_client, js) = connect_jetstream(&server).await;
    create_stream(&js, "ORDERS", ["orders.>"]).await;
    let running = app(&server.url())
        .start(ruststream::Env::new())
        .await
        .expect("the app starts");
    let stream = js.get_stream("ORDERS").await.expect("the stream");
    for (durable, wait) in [
        ("book", Duration::from_millis(2_500)),
        ("ship", Duration::from_secs(7)),
    ] {
        let mut consumer: PullConsumer = stream.get_consumer(durable).await.expect("the consumer");
        let info = consumer.info().await.expect("consumer info");
        assert_eq!(info.config.ack_wait, wait, "{durable}");
    }
    running.stop().await.expect("stops");
}

/// Outlives its delivery's ack_wait on the first delivery, acknowledges the next.
struct SlowOnce;

impl Handle<Order> for SlowOnce {
    async fn handle(
        &self,
        _order: &Order,
        _outs: &(),
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        if ctx.delivered() == Some(1) {
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn in_process_the_server_delivers_again_after_the_duration() {
    let app = RustStream::new(AppInfo::new("slow", "0.1.0")).with_broker(
        NatsBroker::new("nats://localhost:4222"),
        |b| {
            b.include(
                JetStreamSubject::new("orders.created", "ORDERS")
                    .durable("slow")
                    .ack_wait(Duration::from_millis(2_500))
                    .handler(SlowOnce),
            )
            .name("slow");
        },
    );
    let t = TestApp::start(app).await.expect("starts");
    t.publish("orders.created", &serde_json::json!({"id": 1}))
        .await
        .expect("published");
    t.advance(Duration::from_millis(2_400)).await;
    assert_eq!(
        t.nats()
            .consumer_info("ORDERS", "slow")
            .expect("consumer")
            .delivered,
        1
    );
    t.advance(Duration::from_millis(200)).await;
    assert_eq!(
        t.nats()
            .consumer_info("ORDERS", "slow")
            .expect("consumer")
            .delivered,
        2,
        "delivered again once 2.5 s passed"
    );
    // One handler slot: the second delivery runs once the first call is done.
    t.advance(Duration::from_secs(10)).await;
    assert_eq!(t.delivered("slow"), [Some(1), Some(2)]);
    assert_eq!(
        t.nats()
            .consumer_info("ORDERS", "slow")
            .expect("consumer")
            .ack_pending,
        0
    );
    t.shutdown().await.expect("stops");
}

#[tokio::test(start_paused = true)]
async fn a_zero_wait_refuses_to_start_naming_the_registration() {
    let err = TestApp::start(zero_app(Duration::ZERO))
        .await
        .expect_err("a zero ack_wait is refused");
    assert_eq!(err.kind(), ErrorKind::Config);
    let message = err.to_string();
    assert!(
        message.contains("registration `book_at_once` has an ack_wait of zero"),
        "{message}"
    );
    assert!(message.contains("Duration::from_secs(60)"), "{message}");
    // A wait above zero, however short, starts.
    let t = TestApp::start(zero_app(Duration::from_nanos(1)))
        .await
        .expect("starts");
    t.shutdown().await.expect("stops");
}

#[tokio::test]
async fn check_refuses_a_zero_wait_before_connecting() {
    // `check` runs the offline checks first: no server is needed to hear about it.
    let err = zero_app(Duration::ZERO)
        .check(ruststream::Env::new())
        .await
        .expect_err("refused");
    assert!(
        err.to_string()
            .contains("`book_at_once` has an ack_wait of zero"),
        "{err}"
    );
}
