//! Outputs as safe as inputs, asked of a real nats-server and of the in-process NATS with the
//! same scenario bodies:
//!
//! - a reply whose subject a stream stores is confirmed by that stream before the input is
//!   settled: a stream that refuses it (full, `discard: new`) leaves the input unacknowledged,
//!   and nothing is lost once the stream takes messages again;
//! - a redelivered input does not store its output twice: the output carries a `Nats-Msg-Id`
//!   derived from the input, and the stream's duplicate window drops the second copy;
//! - a Core request whose `reply` output a stream stores gets its response once the stream
//!   stored the output, without the output's `Nats-Msg-Id`; a full stream sends no response,
//!   and the input is retried (a Core copy) up to its cap;
//! - a stream created while the app runs is learned when the server announces it, not at the
//!   next periodic look (`RELEARN_AFTER`): the outputs it stores are confirmed, with their ids,
//!   from the next input or so on.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use ruststream::App as _;
use ruststream_nats::prelude::*;
use ruststream_nats::testing::{StoredMessage, StreamLimits, TestApp};
use ruststream_nats::transport::TransportOverride;
use serde::{Deserialize, Serialize};

use ruststream_test_server::client::{create_stream, stream_messages};
use support::nats::{PATIENCE, jetstream_server, millis};

#[derive(Debug, Deserialize)]
struct Order {
    id: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "receipts.issued")]
struct Receipt {
    order: u64,
}

/// A derived `Nats-Msg-Id` without the time its input was stored (`ORDERS:1:<ns>:receipt:0`
/// reads `ORDERS:1:receipt:0`), which differs from run to run; any other id as it is.
fn without_stored_at(id: &str) -> String {
    let parts: Vec<&str> = id.split(':').collect();
    match parts.as_slice() {
        [stream, sequence, at, rest @ ..] if !rest.is_empty() && at.parse::<u64>().is_ok() => {
            format!("{stream}:{sequence}:{}", rest.join(":"))
        }
        _ => id.to_owned(),
    }
}

/// How many times the handlers ran, per app (the in-process and live runs share no counter).
#[derive(Clone, Default)]
struct Calls(Arc<AtomicU32>);

impl Calls {
    fn count(&self) -> u32 {
        self.0.load(Ordering::SeqCst)
    }

    fn add(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[subscriber(
    JetStreamSubject::new("orders.created", "ORDERS").durable("receipt").ack_wait(millis(3000)),
    reply
)]
async fn receipt(order: &Order, State(calls): State<Calls>) -> Result<Receipt, HandlerOutcome> {
    calls.add();
    Ok(Receipt { order: order.id })
}

/// Publishes its receipt, then (on a first delivery) takes longer than `ack_wait`: its `+ACK`
/// comes too late, and the server delivers the input again.
#[subscriber(JetStreamSubject::new("orders.placed", "ORDERS").durable("slow").ack_wait(millis(1000)))]
async fn slow_receipt(
    order: &Order,
    Ctx(delivered): Ctx<Delivered>,
    State(calls): State<Calls>,
    ctx: &mut Context<'_>,
) -> HandlerOutcome {
    calls.add();
    if ctx.publish(&Receipt { order: order.id }).await.is_err() {
        return HandlerOutcome::retry();
    }
    if delivered == Some(1) {
        tokio::time::sleep(Duration::from_millis(1600)).await;
    }
    HandlerOutcome::ack()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "late.issued")]
struct LateReceipt {
    order: u64,
}

/// Replies on a subject no stream stores when the app starts (`LATE` is created later).
#[subscriber(
    JetStreamSubject::new("orders.late", "ORDERS").durable("late").ack_wait(millis(3000)),
    reply
)]
async fn late_receipt(
    order: &Order,
    State(calls): State<Calls>,
) -> Result<LateReceipt, HandlerOutcome> {
    calls.add();
    Ok(LateReceipt { order: order.id })
}

/// Answers a Core request with a receipt, which `RECEIPTS` stores.
#[subscriber("asks.receipt", reply)]
async fn asked_receipt(
    order: &Order,
    State(calls): State<Calls>,
) -> Result<Receipt, HandlerOutcome> {
    calls.add();
    Ok(Receipt { order: order.id })
}

fn app(calls: Calls, mount: impl FnOnce(&mut ruststream::Scope<Calls>)) -> impl App<State = Calls> {
    RustStream::new(AppInfo::new("outputs", "0.1.0"))
        .on_startup(async move |()| Ok::<_, std::convert::Infallible>(calls))
        .with_broker(NatsBroker::new("nats://127.0.0.1:1"), mount)
}

/// What a scenario asks of the server it runs on, in process or live.
#[allow(clippy::large_enum_variant)] // one per test
enum Server {
    InProcess(TestApp),
    Live {
        _server: ruststream_test_server::NatsServer,
        js: jetstream::Context,
        running: Option<ruststream::RunningApp>,
    },
}

impl Server {
    /// The app of `mount` on a server whose `ORDERS` stores `orders.>` and `RECEIPTS` stores
    /// `receipts.>` with `limits`.
    async fn start(
        live: bool,
        limits: StreamLimits,
        calls: Calls,
        mount: impl FnOnce(&mut ruststream::Scope<Calls>),
    ) -> Self {
        if live {
            let (server, _client, js) = jetstream_server().await;
            js.create_stream(stream::Config {
                name: "RECEIPTS".into(),
                subjects: vec!["receipts.>".into()],
                max_messages: limits.max_msgs.map_or(-1, |m| m as i64),
                discard: if limits.discard_new {
                    stream::DiscardPolicy::New
                } else {
                    stream::DiscardPolicy::Old
                },
                duplicate_window: limits.duplicate_window,
                ..Default::default()
            })
            .await
            .expect("RECEIPTS is created");
            let transport = ruststream_nats::transport::nats::NatsTransport::new(
                ruststream_test_server::client::connect(&server).await,
            );
            let env = ruststream::Env::new().with(TransportOverride(Arc::new(transport)));
            let running = app(calls, mount).start(env).await.expect("the app starts");
            Self::Live {
                _server: server,
                js,
                running: Some(running),
            }
        } else {
            let nats = ruststream_nats::testing::InProcessNats::new();
            use ruststream_nats::transport::{StreamAdmin as _, StreamSpec};
            for (name, subjects) in [("ORDERS", "orders.>"), ("RECEIPTS", "receipts.>")] {
                nats.declare_stream(StreamSpec {
                    name: name.into(),
                    subjects: vec![subjects.into()],
                })
                .await
                .expect("declared");
            }
            assert!(nats.set_stream_limits("RECEIPTS", limits));
            Self::InProcess(
                TestApp::start_on(app(calls, mount), nats)
                    .await
                    .expect("the app starts"),
            )
        }
    }

    /// A Core request to `subject`: the response (payload, headers), or the transport's error.
    async fn request(
        &self,
        subject: &str,
        payload: &str,
        timeout: Duration,
    ) -> Result<(String, ruststream::Headers), ruststream_nats::transport::TransportError> {
        use ruststream_nats::transport::CorePubSub as _;
        let (subject, payload) = (Arc::from(subject), payload.to_owned().into());
        let headers = ruststream::Headers::new();
        let response = match self {
            Self::InProcess(t) => t.nats().request(subject, headers, payload, timeout).await?,
            Self::Live { js, .. } => {
                ruststream_nats::transport::nats::NatsTransport::new(js.client())
                    .request(subject, headers, payload, timeout)
                    .await?
            }
        };
        Ok((
            String::from_utf8_lossy(&response.payload).into_owned(),
            response.headers,
        ))
    }

    async fn publish(&self, subject: &str, payload: &str) {
        match self {
            Self::InProcess(t) => {
                t.publish_raw(
                    subject,
                    ruststream::Headers::new(),
                    payload.as_bytes().to_vec(),
                )
                .await
                .expect("published");
            }
            Self::Live { js, .. } => {
                support::nats::publish_stored(js, subject, payload).await;
            }
        }
    }

    /// Lets time pass (the paused clock in process, the real one live) and things settle.
    async fn wait(&self, d: Duration) {
        match self {
            // A handler retrying at once (a stream refusing its output) keeps the app busy
            // without time passing: then only let it run a little.
            Self::InProcess(t) => {
                if t.try_settle(20).await {
                    t.advance(d).await;
                }
            }
            Self::Live { .. } => tokio::time::sleep(d).await,
        }
    }

    /// The messages `stream` holds: payload, `Nats-Msg-Id`.
    async fn stored(&self, stream: &str) -> Vec<(String, Option<String>)> {
        let messages: Vec<StoredMessage> = match self {
            Self::InProcess(t) => t.nats().stream_messages(stream),
            Self::Live { js, .. } => stream_messages(js, stream)
                .await
                .into_iter()
                .map(StoredMessage::from)
                .collect(),
        };
        messages
            .into_iter()
            .map(|m| {
                (
                    String::from_utf8_lossy(&m.payload).into_owned(),
                    m.headers.get("Nats-Msg-Id").map(without_stored_at),
                )
            })
            .collect()
    }

    /// (ack pending, ack floor stream sequence) of consumer `durable` of ORDERS; in process the
    /// floor is the last stream sequence delivered once nothing is pending, else 0.
    async fn consumer(&self, durable: &str) -> (u64, u64) {
        match self {
            Self::InProcess(t) => {
                let info = t
                    .nats()
                    .consumer_info("ORDERS", durable)
                    .expect("the consumer");
                let floor = if info.ack_pending == 0 {
                    info.delivered_stream
                } else {
                    0
                };
                (info.ack_pending as u64, floor)
            }
            Self::Live { js, .. } => {
                let info = support::nats::consumer_info(js, "ORDERS", durable).await;
                (info.num_ack_pending as u64, info.ack_floor.stream_sequence)
            }
        }
    }

    /// Creates stream `name` storing `subject`, while the app runs.
    async fn create_stream(&self, name: &str, subject: &str) {
        match self {
            Self::InProcess(t) => {
                use ruststream_nats::transport::{StreamAdmin as _, StreamSpec};
                t.nats()
                    .declare_stream(StreamSpec {
                        name: name.into(),
                        subjects: vec![subject.into()],
                    })
                    .await
                    .expect("declared");
            }
            Self::Live { js, .. } => create_stream(js, name, [subject]).await,
        }
    }

    /// Lets RECEIPTS take any number of messages.
    async fn lift_limits(&self) {
        match self {
            Self::InProcess(t) => {
                assert!(
                    t.nats()
                        .set_stream_limits("RECEIPTS", StreamLimits::default())
                );
            }
            Self::Live { js, .. } => {
                let mut config = js
                    .get_stream("RECEIPTS")
                    .await
                    .expect("RECEIPTS")
                    .cached_info()
                    .config
                    .clone();
                config.max_messages = -1;
                js.update_stream(&config).await.expect("RECEIPTS updated");
            }
        }
    }

    async fn until(&self, what: &str, mut check: impl FnMut() -> bool) {
        let step = Duration::from_millis(50);
        let deadline = PATIENCE.as_millis() / step.as_millis();
        for _ in 0..deadline {
            if check() {
                return;
            }
            self.wait(step).await;
        }
        panic!("timed out after {PATIENCE:?} waiting for: {what}");
    }

    async fn stop(mut self) {
        match &mut self {
            Self::InProcess(t) => t.shutdown().await.expect("a clean stop"),
            Self::Live { running, .. } => {
                if let Some(running) = running.take() {
                    running.stop().await.expect("a clean stop");
                }
            }
        }
    }
}

/// Runs each scenario in process (paused clock) and live (real server, real clock).
macro_rules! both {
    ($($name:ident),* $(,)?) => {
        mod in_process {
            $(
                #[tokio::test(start_paused = true)]
                async fn $name() {
                    super::$name(false).await;
                }
            )*
        }
        mod live {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(true).await;
                }
            )*
        }
    };
}

both!(
    a_refused_reply_leaves_the_input_unacknowledged,
    a_redelivered_input_stores_its_output_once,
    a_core_request_is_answered_after_its_stored_output,
    a_stream_created_while_running_is_learned_at_once
);

async fn a_refused_reply_leaves_the_input_unacknowledged(live: bool) {
    let counter = Calls::default();
    let server = Server::start(live, StreamLimits::refuse_past(1), counter.clone(), |b| {
        b.include(receipt);
    })
    .await;
    let calls = || counter.count();

    server.publish("orders.created", r#"{"id":1}"#).await;
    server
        .until("the first input is handled", || calls() >= 1)
        .await;
    for _ in 0..100 {
        if server.consumer("receipt").await == (0, 1) {
            break;
        }
        server.wait(Duration::from_millis(50)).await;
    }
    assert_eq!(
        server.consumer("receipt").await,
        (0, 1),
        "the first input is acknowledged"
    );
    assert_eq!(server.stored("RECEIPTS").await.len(), 1);

    // RECEIPTS is full and refuses the second receipt: the input is not acknowledged, and
    // comes back (retry) while the stream refuses.
    let before = calls();
    server.publish("orders.created", r#"{"id":2}"#).await;
    server
        .until("the second input is handled three times", || {
            calls() >= before + 3
        })
        .await;
    let (pending, _) = server.consumer("receipt").await;
    assert_eq!(pending, 1, "the second input is not acknowledged");
    assert_eq!(
        server.stored("RECEIPTS").await.len(),
        1,
        "the stream refused it"
    );

    // Once the stream takes messages, the receipt is stored and the input acknowledged.
    server.lift_limits().await;
    for _ in 0..100 {
        if server.consumer("receipt").await == (0, 2) {
            break;
        }
        server.wait(Duration::from_millis(50)).await;
    }
    assert_eq!(server.consumer("receipt").await, (0, 2), "nothing pending");
    let stored: Vec<String> = server
        .stored("RECEIPTS")
        .await
        .into_iter()
        .map(|(payload, _)| payload)
        .collect();
    assert_eq!(stored, [r#"{"order":1}"#, r#"{"order":2}"#], "nothing lost");
    server.stop().await;
}

async fn a_redelivered_input_stores_its_output_once(live: bool) {
    let counter = Calls::default();
    let server = Server::start(live, StreamLimits::default(), counter.clone(), |b| {
        b.include(slow_receipt);
    })
    .await;
    let before = counter.count();
    server.publish("orders.placed", r#"{"id":7}"#).await;
    // The first delivery's +ACK comes after ack_wait: the server delivers it again, and the
    // handler publishes its receipt a second time.
    server
        .until("the input is handled twice", || {
            counter.count() >= before + 2
        })
        .await;
    for _ in 0..100 {
        if server.consumer("slow").await.0 == 0 {
            break;
        }
        server.wait(Duration::from_millis(50)).await;
    }
    assert_eq!(server.consumer("slow").await.0, 0, "settled");
    assert_eq!(
        server.stored("RECEIPTS").await,
        [(
            r#"{"order":7}"#.to_owned(),
            Some("ORDERS:1:slow_receipt:0".to_owned())
        )],
        "the stream holds the receipt once, under the id derived from the input"
    );
    server.stop().await;
}

async fn a_core_request_is_answered_after_its_stored_output(live: bool) {
    let counter = Calls::default();
    let server = Server::start(live, StreamLimits::refuse_past(1), counter.clone(), |b| {
        b.include(asked_receipt)
            .max_attempts(support::nats::attempts(3));
    })
    .await;

    let (response, headers) = server
        .request("asks.receipt", r#"{"id":1}"#, PATIENCE)
        .await
        .expect("answered");
    assert_eq!(response, r#"{"order":1}"#);
    // The response goes after the stream stored the output: it is there by now.
    assert_eq!(
        server.stored("RECEIPTS").await,
        // A Core input has no stream sequence: no id is derived for its output.
        [(r#"{"order":1}"#.to_owned(), None)]
    );
    assert_eq!(headers.get("Nats-Msg-Id"), None, "{headers:?}");
    assert_eq!(headers.get("content-type"), Some("application/json"));

    // RECEIPTS is full and refuses the second receipt: no response, and the input is retried
    // (a Core copy, without the inbox) up to its cap of three attempts.
    let before = counter.count();
    let err = server
        .request("asks.receipt", r#"{"id":2}"#, Duration::from_secs(2))
        .await
        .expect_err("no response after a refused output");
    assert_eq!(
        err.kind,
        ruststream_nats::transport::TransportErrorKind::TimedOut,
        "{err}"
    );
    server
        .until("the second input is handled three times", || {
            counter.count() >= before + 3
        })
        .await;
    assert_eq!(
        server.stored("RECEIPTS").await.len(),
        1,
        "the stream refused it"
    );
    server.stop().await;
}

async fn a_stream_created_while_running_is_learned_at_once(live: bool) {
    let counter = Calls::default();
    let server = Server::start(live, StreamLimits::default(), counter.clone(), |b| {
        b.include(late_receipt);
    })
    .await;
    // No stream stores `late.issued` yet: the first receipt is a Core publish nobody keeps.
    server.publish("orders.late", r#"{"id":1}"#).await;
    server
        .until("the first input is handled", || counter.count() >= 1)
        .await;
    server.create_stream("LATE", "late.>").await;
    // tokio's clock: the paused one in process, the real one live.
    let created = tokio::time::Instant::now();

    // The server announces the new stream, and the app learns it: within a few inputs (and a
    // few seconds, far from the 30 s periodic look) a receipt is stored, confirmed and under
    // the id derived from its input.
    let mut learned = None;
    for id in 2..=40_u64 {
        server
            .publish("orders.late", &format!(r#"{{"id":{id}}}"#))
            .await;
        let handled = u32::try_from(id).expect("small");
        server
            .until("the input is handled", || counter.count() >= handled)
            .await;
        let stored = server.stored("LATE").await;
        if let Some((payload, msg_id)) = stored.into_iter().find(|(_, msg_id)| msg_id.is_some()) {
            learned = Some((id, payload, msg_id));
            break;
        }
        server.wait(Duration::from_millis(100)).await;
    }
    let (id, payload, msg_id) = learned.expect(
        "a receipt stored with its message id within 40 inputs: the stream created while the app ran was learned",
    );
    assert_eq!(payload, format!(r#"{{"order":{id}}}"#));
    assert_eq!(msg_id, Some(format!("ORDERS:{id}:late_receipt:0")));
    let took = created.elapsed();
    assert!(
        took < ruststream_nats::RELEARN_AFTER,
        "learned after {took:?}: by the periodic look, not by the stream's announcement"
    );
    server.stop().await;
}

/// A service whose user may not subscribe to the stream advisories (`$JS.EVENT.>` denied)
/// starts and confirms its stored outputs as any other: the denied subscription costs only the
/// prompt learning of new streams (the periodic look remains).
#[tokio::test]
async fn live_without_permission_for_the_advisories_outputs_are_still_confirmed() {
    // `#[tokio::test]` runs every task on this thread: the connection's events included.
    let logs = support::logs::Logs::default();
    let _logging = logs.install_at(tracing::Level::WARN);
    let password = "svc-Pass-1";
    let server = ruststream_test_server::NatsServer::builder()
        .config(format!(
            "authorization {{ users: [ {{ user: svc, password: \"{password}\", permissions: {{ publish: \">\", subscribe: {{ allow: \">\", deny: \"$JS.EVENT.>\" }} }} }} ] }}"
        ))
        .start();
    let client = async_nats::ConnectOptions::with_user_and_password("svc".into(), password.into())
        .connect(server.url())
        .await
        .expect("connects");
    let js = jetstream::new(client);
    for (name, subject) in [("ORDERS", "orders.>"), ("RECEIPTS", "receipts.>")] {
        create_stream(&js, name, [subject]).await;
    }
    let calls = Calls::default();
    let app = RustStream::new(AppInfo::new("outputs", "0.1.0"))
        .on_startup({
            let calls = calls.clone();
            async move |()| Ok::<_, std::convert::Infallible>(calls)
        })
        .with_broker(
            NatsBroker::new(server.url()).user_and_password("svc", password),
            |b| {
                b.include(receipt);
            },
        );
    let running = app
        .start(ruststream::Env::new())
        .await
        .expect("the app starts without the advisories");
    support::nats::publish_stored(&js, "orders.created", r#"{"id":1}"#).await;
    let stored =
        ruststream_test_server::client::eventually(PATIENCE, "the receipt is stored", || {
            let js = js.clone();
            async move {
                let messages = stream_messages(&js, "RECEIPTS").await;
                (!messages.is_empty()).then_some(messages)
            }
        })
        .await;
    let ids: Vec<Option<String>> = stored
        .into_iter()
        .map(|m| {
            StoredMessage::from(m)
                .headers
                .get("Nats-Msg-Id")
                .map(without_stored_at)
        })
        .collect();
    assert_eq!(
        ids,
        [Some("ORDERS:1:receipt:0".to_owned())],
        "confirmed, with its id"
    );
    assert_eq!(calls.count(), 1);
    // The refusal is explained, with the fix.
    ruststream_test_server::client::eventually(
        PATIENCE,
        "the advisories' refusal is logged",
        || {
            let lines = logs.lines_with(&["may not subscribe to the stream advisories", "grant"]);
            async move { (!lines.is_empty()).then_some(()) }
        },
    )
    .await;
    running.stop().await.expect("a clean stop");
}
