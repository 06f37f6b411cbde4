//! `TestApp`: the production app on NATS emulated in the process, under a paused clock.

mod support;

use std::num::NonZeroU32;
use std::time::Duration;

use ruststream::{App, AppInfo, Context, ErrorKind, Handle, HandlerOutcome, Headers, RustStream};
use ruststream_nats::testing::{ConsumerFacts, InProcessNats, TestApp};
use ruststream_nats::{CoreSubject, JetStreamSubject, NatsBroker};
use serde::{Deserialize, Serialize};
use support::fidelity::orders::{DEAD, Done, Order, Step, orders_app};

/// How long a busy bank asks its callers to wait.
const BACKOFF: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Payment {
    id: u64,
    amount_cents: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Captured {
    payment: u64,
    amount_cents: u64,
}

/// Busy on the first delivery, captured on the next.
struct Capture;

impl Handle<Payment> for Capture {
    async fn handle(
        &self,
        payment: &Payment,
        _outs: &(),
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        if ctx.delivered() == Some(1) {
            return Err(HandlerOutcome::retry_after(BACKOFF));
        }
        let captured = Captured {
            payment: payment.id,
            amount_cents: payment.amount_cents,
        };
        ctx.publish_to("payments.captured", &captured)
            .await
            .map_err(|_| HandlerOutcome::retry())
    }
}

/// The dashboard on Core.
struct Refresh;

impl Handle<Captured> for Refresh {
    async fn handle(
        &self,
        _captured: &Captured,
        _outs: &(),
        _ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        Ok(())
    }
}

fn payments() -> impl App {
    RustStream::new(AppInfo::new("payments", "0.1.0")).with_broker(
        NatsBroker::new("nats://unused:4222"),
        |b| {
            b.include(
                JetStreamSubject::new("payments.authorized", "PAYMENTS")
                    .durable("capture")
                    .handler(Capture),
            );
            b.include(CoreSubject::new("payments.captured").handler(Refresh));
        },
    )
}

fn orders() -> impl App {
    orders_app("nats://unused:4222")
}

fn payment() -> Payment {
    Payment {
        id: 7,
        amount_cents: 1250,
    }
}

#[tokio::test(start_paused = true)]
async fn a_thirty_second_backoff_passes_in_well_under_a_second() {
    let wall = std::time::Instant::now();
    let t = TestApp::start(payments()).await.expect("start");
    t.publish("payments.authorized", &payment())
        .await
        .expect("publish");
    t.settle().await;
    assert_eq!(
        t.outcomes("Capture"),
        [HandlerOutcome::retry_after(BACKOFF)]
    );
    assert_eq!(t.delivered("Capture"), [Some(1)]);

    // Held on the server for the whole backoff, and not a moment less.
    t.advance(BACKOFF - Duration::from_millis(1)).await;
    assert_eq!(t.outcomes("Capture").len(), 1);
    t.advance(Duration::from_millis(1)).await;

    assert_eq!(
        t.outcomes("Capture"),
        [HandlerOutcome::retry_after(BACKOFF), HandlerOutcome::ack()]
    );
    assert_eq!(t.delivered("Capture"), [Some(1), Some(2)]);
    assert_eq!(
        t.published::<Captured>("payments.captured"),
        [Captured {
            payment: 7,
            amount_cents: 1250
        }]
    );
    assert_eq!(t.outcomes("Refresh"), [HandlerOutcome::ack()]);
    assert_eq!(t.delivered("Refresh"), [None]);
    assert_eq!(
        t.nats().consumer_info("PAYMENTS", "capture"),
        Some(ConsumerFacts::new(2, 1, 0, 0, 0))
    );
    assert_eq!(
        t.nats().acknowledgements("PAYMENTS", "capture"),
        [r#"-NAK {"delay": 30000000000}"#, "+ACK"]
    );
    t.shutdown().await.expect("shutdown");
    assert!(
        wall.elapsed() < Duration::from_secs(1),
        "took {:?} of wall time",
        wall.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn streams_are_captured_from_the_descriptors() {
    let t = TestApp::start(payments()).await.expect("start");
    assert_eq!(t.nats().stream_names(), ["PAYMENTS"]);
    assert_eq!(
        t.nats().stream_subjects("PAYMENTS"),
        Some(vec!["payments.authorized".to_owned()])
    );
    assert_eq!(t.nats().consumer_names("PAYMENTS"), ["capture"]);
    t.publish("payments.authorized", &payment())
        .await
        .expect("publish");
    t.settle().await;
    let stored = t.nats().stream_messages("PAYMENTS");
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].sequence, 1);
    assert_eq!(&*stored[0].subject, "payments.authorized");
    t.shutdown().await.expect("shutdown");
}

#[tokio::test(start_paused = true)]
async fn settle_returns_while_a_handler_waits_on_the_clock() {
    let t = TestApp::start(orders()).await.expect("start");
    t.publish(
        "orders.placed",
        &Order::new(1, [Step::SleepMs(500), Step::Ack]),
    )
    .await
    .expect("publish");
    t.settle().await;
    assert!(t.outcomes("js").is_empty(), "the handler still sleeps");
    assert_eq!(t.nats().in_flight(), 1);
    t.advance(Duration::from_millis(500)).await;
    assert_eq!(t.outcomes("js"), [HandlerOutcome::ack()]);
    assert_eq!(t.nats().in_flight(), 0);
    t.shutdown().await.expect("shutdown");
}

#[tokio::test(start_paused = true)]
async fn advance_fires_every_timer_in_order() {
    let t = TestApp::start(orders()).await.expect("start");
    // JetStream: held 300 ms, three times, then acknowledged. Core: a copy after 200 ms, twice.
    let held = Step::RetryAfterMs(300);
    t.publish(
        "orders.placed",
        &Order::new(1, [held, held, held, Step::Ack]),
    )
    .await
    .expect("publish");
    let copied = Step::RetryAfterMs(200);
    t.publish("orders.core", &Order::new(2, [copied, copied, Step::Ack]))
        .await
        .expect("publish");
    t.advance(Duration::from_secs(2)).await;
    assert_eq!(t.delivered("js"), [Some(1), Some(2), Some(3), Some(4)]);
    assert_eq!(t.delivered("core"), [None, None, None]);
    let done = t.published::<Done>("orders.done");
    assert_eq!(
        done.iter().map(|d| (d.id, d.attempt)).collect::<Vec<_>>(),
        [(2, 3), (1, 4)],
        "the Core copies (at 400 ms) finished before the held JetStream message (at 900 ms)"
    );
    t.shutdown().await.expect("shutdown");
}

#[tokio::test(start_paused = true)]
async fn undecodable_payloads_are_recorded_and_dead_lettered() {
    let t = TestApp::start(orders()).await.expect("start");
    let headers: Headers = [("x-source", "test")].into_iter().collect();
    t.publish_raw("orders.capped", headers, &b"{not json"[..])
        .await
        .expect("publish");
    t.settle().await;
    let failures = t.decode_failures("js_capped");
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0].subject, "orders.capped");
    assert_eq!(&failures[0].payload[..], b"{not json");
    assert!(t.outcomes("js_capped").is_empty());
    assert!(t.delivered("js_capped").is_empty());
    let dead = t.dead_letters(DEAD);
    assert_eq!(dead.len(), 1);
    assert_eq!(&dead[0].payload[..], b"{not json");
    assert_eq!(dead[0].headers.get("x-source"), Some("test"));
    assert_eq!(
        t.nats().acknowledgements("ORDERS", "capped"),
        ["+TERM"],
        "terminated once dead-lettered"
    );
    assert!(
        t.published::<Order>(DEAD).is_empty(),
        "undecodable: skipped"
    );
    t.shutdown().await.expect("shutdown");
}

#[tokio::test(start_paused = true)]
async fn handled_deliveries_carry_the_decision() {
    let t = TestApp::start(orders()).await.expect("start");
    t.publish("orders.capped", &Order::new(1, [Step::Retry]))
        .await
        .expect("publish");
    t.settle().await;
    let handled = t.handled("js_capped");
    assert_eq!(handled.len(), 2);
    assert!(handled[0].decision.brings_back());
    assert!(!handled[0].decision.is_dead_letter());
    assert!(handled[1].decision.is_dead_letter());
    assert_eq!(
        handled.iter().map(|h| h.attempt).collect::<Vec<_>>(),
        [1, 2]
    );
    t.shutdown().await.expect("shutdown");
}

#[tokio::test(start_paused = true)]
#[should_panic(expected = "no registration named `Captur`; it has: Capture, Refresh")]
async fn a_misspelt_registration_is_named_in_the_panic() {
    let t = TestApp::start(payments()).await.expect("start");
    let _ = t.outcomes("Captur");
}

#[tokio::test(start_paused = true)]
async fn instances_share_one_emulated_server() {
    let nats = InProcessNats::new();
    let one = TestApp::start_on(orders_app("nats://unused:4222"), nats.clone())
        .await
        .expect("start one");
    let two = TestApp::start_on(orders_app("nats://unused:4222"), nats.clone())
        .await
        .expect("start two");
    for id in 0..6 {
        one.publish("orders.placed", &Order::new(id, [Step::Ack]))
            .await
            .expect("publish");
    }
    one.settle().await;
    two.settle().await;
    // A durable consumer is shared: each order handled once, by one instance or the other.
    assert_eq!(one.outcomes("js").len() + two.outcomes("js").len(), 6);
    assert_eq!(
        nats.consumer_info("ORDERS", "placed"),
        Some(ConsumerFacts::new(6, 6, 0, 0, 0))
    );
    // A Core subject without a queue group reaches both.
    one.publish("orders.core_free", &Order::new(9, [Step::Ack]))
        .await
        .expect("publish");
    one.settle().await;
    assert_eq!(one.outcomes("core_free").len(), 1);
    assert_eq!(two.outcomes("core_free").len(), 1);
    one.shutdown().await.expect("shutdown");
    two.shutdown().await.expect("shutdown");
}

#[tokio::test(start_paused = true)]
async fn shutdown_drains_a_handler_in_flight() {
    let t = TestApp::start(orders()).await.expect("start");
    t.publish("orders.placed", &Order::new(1, [Step::SleepMs(2_000)]))
        .await
        .expect("publish");
    t.settle().await;
    assert!(t.outcomes("js").is_empty());
    t.shutdown().await.expect("shutdown");
    assert_eq!(t.outcomes("js"), [HandlerOutcome::ack()]);
    assert_eq!(t.nats().acknowledgements("ORDERS", "placed"), ["+ACK"]);
    let err = t.shutdown().await.expect_err("already shut down");
    assert_eq!(err.kind(), ErrorKind::Shutdown);
}

#[tokio::test(start_paused = true)]
async fn a_test_app_can_move_to_another_task() {
    fn send_and_sync<T: Send + Sync>(_: &T) {}
    let t = TestApp::start(orders()).await.expect("start");
    send_and_sync(&t);
    let handled = tokio::spawn(async move {
        t.publish("orders.core", &Order::new(1, [Step::Ack]))
            .await
            .expect("publish");
        t.settle().await;
        let outcomes = t.outcomes("core");
        t.shutdown().await.expect("shutdown");
        outcomes
    })
    .await
    .expect("the task");
    assert_eq!(handled, [HandlerOutcome::ack()]);
}

#[tokio::test(start_paused = true)]
async fn a_cap_of_one_sends_a_first_failure_to_the_dead_letter_subject() {
    let app = RustStream::new(AppInfo::new("cap", "0.1.0")).with_broker(
        NatsBroker::new("nats://unused:4222"),
        |b| {
            b.include(CoreSubject::new("jobs.run").handler(support::fidelity::orders::Script))
                .max_attempts(NonZeroU32::MIN)
                .dead_letter("jobs.dead");
        },
    );
    let t = TestApp::start(app).await.expect("start");
    t.publish("jobs.run", &Order::new(1, [Step::Retry]))
        .await
        .expect("publish");
    t.settle().await;
    assert_eq!(t.outcomes("Script"), [HandlerOutcome::retry()]);
    assert_eq!(
        t.published::<Order>("jobs.dead"),
        [Order::new(1, [Step::Retry])]
    );
    t.shutdown().await.expect("shutdown");
}

#[tokio::test(start_paused = true)]
async fn settling_gives_up_on_an_endless_retry_loop() {
    let t = TestApp::start(orders()).await.expect("start");
    t.publish("orders.placed", &Order::new(1, [Step::Retry]))
        .await
        .expect("publish");
    assert!(
        !t.try_settle(500).await,
        "a retry() without a cap never settles"
    );
    assert!(t.delivered("js").len() > 10);
}
