//! What the runtime says or refuses before code that would lose or loop messages runs, and what
//! it keeps quiet about: in process, on `TestApp`.

mod support;

use std::num::NonZeroU32;

use ruststream::{App, AppInfo, Broker, Context, Handle, HandlerOutcome, RustStream};
use ruststream_nats::testing::TestApp;
use ruststream_nats::{CoreSubject, CoreWildcard, JetStreamSubject, NatsBroker};
use serde::{Deserialize, Serialize};
use support::logs::Logs;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Order {
    id: u64,
}

/// Answers `outcome`, always.
struct Always(HandlerOutcome);

impl Handle<Order> for Always {
    async fn handle(
        &self,
        _order: &Order,
        _outs: &(),
        _ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        match &self.0 {
            HandlerOutcome::Ack => Ok(()),
            other => Err(other.clone()),
        }
    }
}

fn app(mount: impl FnOnce(&mut ruststream::Scope<()>)) -> impl App<State = ()> {
    RustStream::new(AppInfo::new("footguns", "0.1.0"))
        .with_broker(NatsBroker::new("nats://localhost:4222"), mount)
}

/// The tests of this file run one at a time, each under its own capturing subscriber: tracing
/// caches per call site whether anyone listens, and call sites first reached by two threads at
/// once (one listening, one not) may be cached as unheard.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Every log line at WARN or above written on this thread while the guard lives.
fn capture_warnings() -> (Logs, tracing::subscriber::DefaultGuard) {
    let logs = Logs::default();
    let guard = logs.install_at(tracing::Level::WARN);
    (logs, guard)
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_retry_subject_the_registration_never_reads_is_refused() {
    let _serial = SERIAL.lock().await;
    let (_captured, _guard) = capture_warnings();
    let err = TestApp::start(app(|b| {
        b.include(CoreSubject::new("orders.created").handler(Always(HandlerOutcome::retry())))
            .name("create")
            .max_attempts(NonZeroU32::MIN.saturating_add(2))
            .retry_to("orders.retry");
    }))
    .await
    .expect_err("copies to a subject nobody reads would be lost");
    let message = err.to_string();
    assert!(
        message.contains(
            "registration `create` sends its retry copies to `orders.retry`, which it does not read"
        ),
        "{message}"
    );
    // A pattern that matches its retry subject starts.
    let t = TestApp::start(app(|b| {
        b.include(CoreWildcard::new("orders.*").handler(Always(HandlerOutcome::ack())))
            .retry_to("orders.retry");
    }))
    .await
    .expect("`orders.*` reads `orders.retry`");
    t.shutdown().await.expect("a clean stop");
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn two_registrations_on_one_durable_are_refused() {
    let _serial = SERIAL.lock().await;
    let (_captured, _guard) = capture_warnings();
    let err = TestApp::start(app(|b| {
        b.include(
            JetStreamSubject::new("orders.created", "ORDERS")
                .durable("worker")
                .handler(Always(HandlerOutcome::ack())),
        )
        .name("first");
        b.include(
            JetStreamSubject::new("orders.created", "ORDERS")
                .durable("worker")
                .handler(Always(HandlerOutcome::ack())),
        )
        .name("second");
    }))
    .await
    .expect_err("one durable, two registrations");
    let message = err.to_string();
    assert!(
        message.contains("registrations `first` and `second` both read durable consumer `worker` of stream `ORDERS`"),
        "{message}"
    );
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn an_uncapped_jetstream_retry_is_warned_about_logged_and_fails_settle_fast() {
    let _serial = SERIAL.lock().await;
    let (captured, _guard) = capture_warnings();
    let looping = app(|b| {
        b.include(
            JetStreamSubject::new("orders.created", "ORDERS")
                .durable("loop")
                .handler(Always(HandlerOutcome::retry())),
        )
        .name("loop");
    });
    let broker = NatsBroker::new("nats://localhost:4222");
    let warnings = broker.warnings(&looping.registrations());
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("registration `loop` has no attempt cap"),
        "{warnings:?}"
    );

    let t = TestApp::start(looping).await.expect("the app starts");
    assert!(
        captured
            .text()
            .contains("registration `loop` has no attempt cap"),
        "warned at startup: {}",
        captured.text()
    );
    t.publish("orders.created", &Order { id: 1 })
        .await
        .expect("published");
    let settled = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(t.settle())).await;
    let panic = settled.expect_err("a message retried forever does not settle");
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        message.contains("registration `loop` took one message")
            && message.contains("max_attempts"),
        "{message}"
    );
    let (most, registration) = t.recorder().most_deliveries();
    assert_eq!(registration, "loop");
    assert!(
        (ruststream_nats::testing::LOOP_DELIVERIES..2 * ruststream_nats::testing::LOOP_DELIVERIES)
            .contains(&most),
        "gave up right after {} deliveries, not after {most}",
        ruststream_nats::testing::LOOP_DELIVERIES
    );
    let logs = captured.text();
    assert!(
        logs.contains("one message was delivered 100 times"),
        "{logs}"
    );
    assert!(
        logs.contains("one message was delivered 1000 times"),
        "{logs}"
    );
    assert!(
        !logs.contains("delivered 101 times"),
        "said at powers of ten only"
    );
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
#[should_panic(expected = "registration `loop` took one message")]
async fn settle_names_the_registration_that_loops() {
    let _serial = SERIAL.lock().await;
    let (_captured, _guard) = capture_warnings();
    let t = TestApp::start(app(|b| {
        b.include(
            JetStreamSubject::new("orders.created", "ORDERS")
                .durable("loop")
                .handler(Always(HandlerOutcome::retry())),
        )
        .name("loop");
    }))
    .await
    .expect("the app starts");
    t.publish("orders.created", &Order { id: 1 })
        .await
        .expect("published");
    t.settle().await;
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_core_handler_answering_ack_logs_no_warning() {
    let _serial = SERIAL.lock().await;
    let (captured, _guard) = capture_warnings();
    let t = TestApp::start(app(|b| {
        b.include(CoreSubject::new("orders.shipped").handler(Always(HandlerOutcome::ack())))
            .name("notify");
    }))
    .await
    .expect("the app starts");
    for id in 0..3 {
        t.publish("orders.shipped", &Order { id })
            .await
            .expect("published");
    }
    t.settle().await;
    assert_eq!(t.outcomes("notify").len(), 3);
    t.shutdown().await.expect("a clean stop");
    assert_eq!(captured.text(), "", "correct code logs no warning");
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn streams_the_test_creates_for_the_app_are_announced() {
    let _serial = SERIAL.lock().await;
    let (_captured, _guard) = capture_warnings();
    let t = TestApp::start(app(|b| {
        b.include(
            JetStreamSubject::new("orders.created", "ORDERS")
                .durable("worker")
                .handler(Always(HandlerOutcome::ack())),
        )
        .max_attempts(NonZeroU32::MIN);
    }))
    .await
    .expect("the app starts");
    assert_eq!(t.streams_created_for_the_test(), ["ORDERS"]);
    t.shutdown().await.expect("a clean stop");

    // A stream the broker declares is not the test's doing.
    let declared = RustStream::new(AppInfo::new("footguns", "0.1.0")).with_broker(
        NatsBroker::new("nats://localhost:4222").declare_stream("ORDERS", ["orders.>"]),
        |b| {
            b.include(
                JetStreamSubject::new("orders.created", "ORDERS")
                    .durable("worker")
                    .handler(Always(HandlerOutcome::ack())),
            )
            .max_attempts(NonZeroU32::MIN);
        },
    );
    let t = TestApp::start(declared).await.expect("the app starts");
    assert!(t.streams_created_for_the_test().is_empty());
    t.shutdown().await.expect("a clean stop");
}

#[test]
fn the_prelude_has_headers_for_publish_raw() {
    use ruststream_nats::prelude::*;
    let mut headers = Headers::new();
    headers.insert("trace-id", "t-1");
    assert_eq!(headers.get("trace-id"), Some("t-1"));
}
