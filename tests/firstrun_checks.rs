//! The startup checks a newcomer's second hour ran into: a stream that would answer a `reply`
//! handler's requests with its storage receipt stops the start; a consumer without a durable
//! name that re-reads a stream's messages at every start is warned about; a misspelt stream
//! name gets the stream it most likely meant, in production and in `TestApp`; `check` warns
//! about an unstored dead-letter subject as `run` does. In process and live.

mod support;

use std::num::NonZeroU32;

use ruststream::App as _;
use ruststream_nats::prelude::*;
use ruststream_nats::testing::{InProcessNats, TestApp};
use ruststream_nats::transport::{StreamAdmin as _, StreamSpec};
use ruststream_test_server::NatsServer;
use ruststream_test_server::client::{connect_jetstream, create_stream};
use serde::{Deserialize, Serialize};
use support::logs::Logs;
use support::program::{program, run};

#[derive(Debug, Serialize, Deserialize)]
struct Query {
    id: u64,
}

#[derive(Debug, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "status.answered")]
struct Status {
    open: u64,
}

#[derive(Debug, Serialize, Deserialize)]
struct Order {
    id: u64,
}

#[subscriber("orders.status", reply)]
async fn status(_query: &Query) -> Result<Status, HandlerOutcome> {
    Ok(Status { open: 7 })
}

/// Retries an order's first delivery, then acknowledges it.
#[subscriber(JetStreamSubject::new("orders.created", "ORDERS").durable("worker"))]
async fn worker(_order: &Order, Ctx(delivered): Ctx<Delivered>) -> HandlerOutcome {
    if delivered.is_some_and(|n| n > 1) {
        HandlerOutcome::ack()
    } else {
        HandlerOutcome::retry()
    }
}

/// Reads `ORDERS` without a durable name, from its first message (the default).
#[subscriber(JetStreamSubject::new("orders.created", "ORDERS"))]
async fn forgetful(_order: &Order) -> HandlerOutcome {
    HandlerOutcome::retry_after(std::time::Duration::from_millis(10))
}

/// Reads `ORDER`, a typo of `ORDERS`.
#[subscriber(JetStreamSubject::new("orders.shipped", "ORDER").durable("ship"))]
async fn ship(_order: &Order) -> HandlerOutcome {
    HandlerOutcome::drop()
}

#[test]
fn a_reply_handler_says_it_answers_requests_and_others_do_not() {
    use ruststream::Mount as _;
    let info = |m: ruststream::Registration<()>| m.info().answers_requests;
    assert!(info(status.mount()), "`reply` answers requests");
    assert!(!info(worker.mount()), "no `reply`: answers none");
    assert!(!info(forgetful.mount()));
}

fn with_status(b: &mut ruststream::Scope<()>) {
    b.include(status);
    b.include(worker)
        .max_attempts(NonZeroU32::MIN.saturating_add(2));
}

fn app_on(
    broker: NatsBroker,
    mount: fn(&mut ruststream::Scope<()>),
) -> impl ruststream::App<State = ()> {
    RustStream::new(AppInfo::new("checks", "0.1.0")).with_broker(broker, mount)
}

/// The tests of this file that start apps run one at a time: tracing caches per call site
/// whether anyone listens, and the warning test listens on its thread only.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn assert_names_the_capture(message: &str) {
    for needle in [
        "stream `ORDERS` stores `orders.>`",
        "`orders.status`, the subject registration `status` answers requests on",
        "storage receipt",
        "narrow the stream's subjects",
        "move the request subject",
    ] {
        assert!(message.contains(needle), "{needle}: {message}");
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_stream_capturing_a_reply_subject_stops_the_test_app() {
    let _serial = SERIAL.lock().await;
    // Declared by the app.
    let declared = NatsBroker::new("nats://localhost:4222").declare_stream("ORDERS", ["orders.>"]);
    let err = TestApp::start(app_on(declared, with_status))
        .await
        .err()
        .unwrap_or_else(|| panic!("ORDERS would answer the status requests"));
    assert_names_the_capture(&err.to_string());

    // Already on the emulated server, not declared.
    let nats = InProcessNats::new();
    nats.declare_stream(StreamSpec {
        name: "ORDERS".into(),
        subjects: vec!["orders.>".into()],
    })
    .await
    .expect("declared");
    let plain = NatsBroker::new("nats://localhost:4222");
    let err = TestApp::start_on(app_on(plain, with_status), nats.clone())
        .await
        .err()
        .unwrap_or_else(|| panic!("ORDERS would answer the status requests"));
    assert_names_the_capture(&err.to_string());
    assert!(nats.stream_messages("ORDERS").is_empty(), "nothing stored");

    // Narrowed, the app starts and the handler answers.
    let narrow =
        NatsBroker::new("nats://localhost:4222").declare_stream("ORDERS", ["orders.created"]);
    let t = TestApp::start(app_on(narrow, with_status))
        .await
        .expect("`orders.created` leaves `orders.status` out");
    t.shutdown().await.expect("a clean stop");
}

#[tokio::test]
async fn a_stream_capturing_a_reply_subject_stops_the_live_start() {
    let _serial = SERIAL.lock().await;
    let server = NatsServer::start();
    let (client, js) = connect_jetstream(&server).await;
    create_stream(&js, "ORDERS", ["orders.>"]).await;
    let err = app_on(NatsBroker::new(server.url()), with_status)
        .start(ruststream::Env::new())
        .await
        .err()
        .unwrap_or_else(|| panic!("ORDERS would answer the status requests"));
    assert_names_the_capture(&err.to_string());
    // The server saw no consumer: nothing was opened.
    let mut stream = js.get_stream("ORDERS").await.expect("the stream");
    let info = stream.info().await.expect("its info");
    assert_eq!(info.state.consumer_count, 0, "no consumer was created");

    // Declared by the app: refused before the stream is created or changed.
    let declared = NatsBroker::new(server.url()).declare_stream("ORDERS", ["orders.>"]);
    let err = app_on(declared, with_status)
        .start(ruststream::Env::new())
        .await
        .err()
        .unwrap_or_else(|| panic!("refused"));
    assert_names_the_capture(&err.to_string());

    // Narrowed, the request gets the handler's answer, not the stream's receipt.
    js.delete_stream("ORDERS").await.expect("deleted");
    create_stream(&js, "ORDERS", ["orders.created"]).await;
    let running = app_on(NatsBroker::new(server.url()), with_status)
        .start(ruststream::Env::new())
        .await
        .expect("the app starts");
    let answer = client
        .request("orders.status", r#"{"id":1}"#.into())
        .await
        .expect("answered");
    assert_eq!(&answer.payload[..], br#"{"open":7}"#);
    running.stop().await.expect("a clean stop");
}

#[tokio::test]
async fn a_consumer_without_a_durable_that_rereads_a_stream_is_warned_about() {
    let _serial = SERIAL.lock().await;
    let server = NatsServer::start();
    let (_client, js) = connect_jetstream(&server).await;
    create_stream(&js, "ORDERS", ["orders.created"]).await;
    let logs = Logs::default();
    let _guard = logs.install_at(tracing::Level::WARN);
    let forgetful_app = |url: String| {
        app_on(NatsBroker::new(url), |b| {
            b.include(forgetful).max_attempts(NonZeroU32::MIN);
        })
    };

    // An empty stream: nothing to read again.
    let running = forgetful_app(server.url())
        .start(ruststream::Env::new())
        .await
        .expect("starts");
    running.stop().await.expect("stops");
    assert!(
        logs.lines_with(&["without a durable consumer"]).is_empty(),
        "{}",
        logs.text()
    );

    for id in 0..2 {
        js.publish("orders.created", format!(r#"{{"id":{id}}}"#).into())
            .await
            .expect("sent")
            .await
            .expect("stored");
    }
    let running = forgetful_app(server.url())
        .start(ruststream::Env::new())
        .await
        .expect("starts");
    running.stop().await.expect("stops");
    let warned = logs
        .lines_with(&["registration `forgetful` reads stream `ORDERS` without a durable consumer"]);
    assert_eq!(warned.len(), 1, "{}", logs.text());
    for needle in [
        "the 2 message(s) it holds",
        ".durable(\"forgetful\")",
        "DeliverPolicy::New",
    ] {
        assert!(warned[0].contains(needle), "{needle}: {}", warned[0]);
    }
    // `check` says it too, as a warning.
    let done = forgetful_app(server.url())
        .check(ruststream::Env::new())
        .await
        .unwrap_or_else(|err| panic!("a warning, not a refusal: {err}"));
    assert!(
        done.iter().any(|l| l.starts_with(
            "warning: registration `forgetful` reads stream `ORDERS` without a durable consumer"
        )),
        "{done:?}"
    );
    // The stream still holds both: they were read, not consumed away.
    let mut stream = js.get_stream("ORDERS").await.expect("the stream");
    assert_eq!(stream.info().await.expect("info").state.messages, 2);

    // A durable consumer goes on where it stopped: no warning.
    let before = logs.text().len();
    let running = app_on(NatsBroker::new(server.url()), |b| {
        b.include(worker)
            .max_attempts(NonZeroU32::MIN.saturating_add(2));
    })
    .start(ruststream::Env::new())
    .await
    .expect("starts");
    running.stop().await.expect("stops");
    assert!(
        !logs.text()[before..].contains("without a durable consumer"),
        "{}",
        logs.text()
    );
}

fn with_typo(b: &mut ruststream::Scope<()>) {
    b.include(ship).max_attempts(NonZeroU32::MIN);
}

fn assert_suggests_orders(message: &str) {
    assert!(
        message.contains("registration `ship` reads stream `ORDER`, which does not exist; did you mean `ORDERS`, which stores `orders.created`?"),
        "{message}"
    );
    assert!(!message.contains("nats stream add ORDER "), "{message}");
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_misspelt_stream_gets_the_near_name_in_the_test_app() {
    let _serial = SERIAL.lock().await;
    let nats = InProcessNats::new();
    let broker =
        NatsBroker::new("nats://localhost:4222").declare_stream("ORDERS", ["orders.created"]);
    let err = TestApp::start_on(app_on(broker, with_typo), nats.clone())
        .await
        .err()
        .unwrap_or_else(|| panic!("ORDER is a typo of ORDERS"));
    assert_suggests_orders(&err.to_string());
    assert!(
        !nats.stream_names().contains(&"ORDER".to_owned()),
        "the typo'd stream was not created: {:?}",
        nats.stream_names()
    );
}

#[tokio::test]
async fn a_misspelt_stream_gets_the_near_name_live() {
    let _serial = SERIAL.lock().await;
    let server = NatsServer::start();
    let (_client, js) = connect_jetstream(&server).await;
    create_stream(&js, "ORDERS", ["orders.created"]).await;
    let err = app_on(NatsBroker::new(server.url()), with_typo)
        .start(ruststream::Env::new())
        .await
        .err()
        .unwrap_or_else(|| panic!("ORDER does not exist"));
    assert_suggests_orders(&err.to_string());
    assert!(js.get_stream("ORDER").await.is_err(), "nothing created");

    // `check` says the same.
    let err = app_on(NatsBroker::new(server.url()), with_typo)
        .check(ruststream::Env::new())
        .await
        .expect_err("ORDER does not exist");
    assert_suggests_orders(&err.to_string());
}

/// `ORDERS` read by a durable consumer that dead-letters to `orders.dead`.
fn dead_lettering() -> impl ruststream::App<State = ()> {
    app_on(NatsBroker::new("nats://localhost:4222"), |b| {
        b.include(worker)
            .max_attempts(NonZeroU32::MIN)
            .dead_letter("orders.dead");
    })
}

/// In a child started by [`program`]: the app's command line.
#[test]
fn as_the_app() {
    support::program::as_the_app("checks", dead_lettering);
}

#[test]
fn check_warns_about_an_unstored_dead_letter_subject_as_run_does() {
    let server = NatsServer::start();
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async {
        let (_client, js) = connect_jetstream(&server).await;
        create_stream(&js, "ORDERS", ["orders.created"]).await;
    });
    let (out, stdout, stderr) = run(&mut program(["check", "--url", &server.url()]));
    assert!(
        out.status.success(),
        "a warning, not a refusal: {stdout}{stderr}"
    );
    let warning = stdout
        .lines()
        .find(|l| l.starts_with("warning: registration `worker`: no stream stores the dead-letter subject `orders.dead`"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        warning.contains("declare_stream(\"DEAD\", [\"orders.dead\"])"),
        "{warning}"
    );
    assert!(
        !stdout.contains("ok: dead letters of registration `worker`"),
        "{stdout}"
    );

    // Stored, it is an ok line.
    runtime.block_on(async {
        let (_client, js) = connect_jetstream(&server).await;
        create_stream(&js, "DEAD", ["orders.dead"]).await;
    });
    let (out, stdout, _) = run(&mut program(["check", "--url", &server.url()]));
    assert!(out.status.success());
    assert!(
        stdout.contains(
            "ok: dead letters of registration `worker` go to `orders.dead`, stored in stream `DEAD`"
        ),
        "{stdout}"
    );
    assert!(
        !stdout.contains("warning: registration `worker`"),
        "{stdout}"
    );
}
