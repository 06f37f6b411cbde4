//! Batches on Core NATS: the client gathers Core messages into batches (by size, and by linger
//! time with `.max_wait(..)`), each message of a batch is settled with Core semantics of its
//! own (a retry under the cap is a copy, at the cap a dead letter; an undecodable one is
//! reported without sinking the others), a batch `reply` handler answers each request of its
//! batch (on a stream: publishes each value and settles each message), and a stop hands the
//! batch being formed over at once. In process (`TestApp`, paused clock) and live against a
//! real nats-server, asserting what the requesters and the server's subscribers saw.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use ruststream::{App as _, ErrorKind, Headers, PublishErrorKind};
use ruststream_nats::RETRY_COUNT_HEADER;
use ruststream_nats::prelude::*;
use ruststream_nats::testing::TestApp;
use serde::{Deserialize, Serialize};
use support::nats::{NatsServer, PATIENCE, Recorder, eventually};

#[derive(Debug, Serialize, Deserialize)]
struct Number {
    value: i64,
}

/// A doubled number, and the size of the batch it was answered in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "math.doubled")]
struct Doubled {
    value: i64,
    batch: usize,
}

/// How long a batch of requests may wait to fill.
const LINGER: Duration = Duration::from_secs(30);

/// Doubles each number of a batch of requests; a negative number is not answered (dropped).
#[subscriber(
    CoreSubject::new("math.double")
        .batch(nonzero!(5))
        .max_wait(LINGER),
    reply
)]
async fn double(numbers: &[Number]) -> Vec<Result<Doubled, HandlerOutcome>> {
    doubled(numbers)
}

/// Each number doubled, with the size of the batch; a negative one dropped.
fn doubled(numbers: &[Number]) -> Vec<Result<Doubled, HandlerOutcome>> {
    numbers
        .iter()
        .map(|n| match n.value {
            value if value < 0 => Err(HandlerOutcome::drop()),
            value => Ok(Doubled {
                value: value * 2,
                batch: numbers.len(),
            }),
        })
        .collect()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "math.pong")]
struct Pong {
    value: i64,
}

/// Answers at once: a request answered tells the test that what it published before reached
/// the app.
#[subscriber("math.ping", reply)]
async fn ping(n: &Number) -> Result<Pong, HandlerOutcome> {
    Ok(Pong { value: n.value })
}

fn math(broker: NatsBroker) -> impl ruststream::App<State = ()> {
    RustStream::new(AppInfo::new("math", "0.1.0")).with_broker(broker, |b| {
        b.include(double).dead_letter("math.dead");
        b.include(ping);
    })
}

#[derive(Debug, Serialize, Deserialize)]
struct Reading {
    sensor: String,
}

/// One batch as the handler got it: each reading's sensor and attempt, in order.
type Batch = Vec<(String, u32)>;

/// Every batch the handler got.
#[derive(Clone, Default)]
struct Store(Arc<Mutex<Vec<Batch>>>);

impl Store {
    fn batches(&self) -> Vec<Batch> {
        self.0.lock().expect("not poisoned").clone()
    }

    fn sizes(&self) -> Vec<usize> {
        self.batches().iter().map(Vec::len).collect()
    }

    /// The attempts each sensor was handled at, by sensor.
    fn attempts(&self) -> Vec<(String, Vec<u32>)> {
        let mut by_sensor: Vec<(String, Vec<u32>)> = Vec::new();
        for (sensor, attempt) in self.batches().into_iter().flatten() {
            match by_sensor.iter_mut().find(|(s, _)| *s == sensor) {
                Some((_, attempts)) => attempts.push(attempt),
                None => by_sensor.push((sensor, vec![attempt])),
            }
        }
        by_sensor.sort();
        by_sensor
    }
}

/// `flaky` is retried, `broken` dropped, the rest stored.
impl HandleBatch<Reading> for Store {
    async fn handle_batch(
        &self,
        readings: &[Reading],
        _outs: &(),
        ctx: &mut BatchContext<'_>,
    ) -> BatchOutcome {
        let seen = readings
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let attempt = ctx.context(i).expect("a message").attempt().get();
                (r.sensor.clone(), attempt)
            })
            .collect();
        self.0.lock().expect("not poisoned").push(seen);
        let outcomes: Vec<HandlerOutcome> = readings
            .iter()
            .map(|r| match r.sensor.as_str() {
                "flaky" => HandlerOutcome::retry(),
                "broken" => HandlerOutcome::drop(),
                _ => HandlerOutcome::ack(),
            })
            .collect();
        outcomes.into()
    }
}

fn sensors(
    broker: NatsBroker,
    store: &Store,
    linger: Option<Duration>,
) -> impl ruststream::App<State = ()> {
    let readings = CoreSubject::new("sensors.readings").batch(nonzero!(10));
    let readings = match linger {
        Some(linger) => readings.max_wait(linger),
        None => readings,
    };
    let store = store.clone();
    RustStream::new(AppInfo::new("sensors", "0.1.0")).with_broker(broker, move |b| {
        b.include(readings.handler(store))
            .name("store")
            .max_attempts(nonzero!(2))
            .dead_letter("sensors.dead");
    })
}

fn reading(sensor: &str) -> String {
    format!(r#"{{"sensor":"{sensor}"}}"#)
}

async fn start_sensors(store: &Store, linger: Option<Duration>) -> TestApp {
    let broker = NatsBroker::new("nats://unused:4222");
    TestApp::start(sensors(broker, store, linger))
        .await
        .expect("the app starts")
}

/// Five readings 100 ms apart, then one more 2 s later: the sizes of the batches formed.
async fn gathered(linger: Option<Duration>) -> Vec<usize> {
    let store = Store::default();
    let t = start_sensors(&store, linger).await;
    for _ in 0..5 {
        t.publish_raw("sensors.readings", Headers::new(), reading("cellar"))
            .await
            .expect("published");
        t.advance(Duration::from_millis(100)).await;
    }
    t.advance(Duration::from_secs(2)).await;
    t.publish_raw("sensors.readings", Headers::new(), reading("attic"))
        .await
        .expect("published");
    t.advance(Duration::from_secs(2)).await;
    t.shutdown().await.expect("a clean shutdown");
    store.sizes()
}

#[tokio::test(start_paused = true)]
async fn core_messages_are_gathered_by_linger_and_by_size_in_process() {
    // Without a linger a batch is what is ready at once: one reading each.
    assert_eq!(gathered(None).await, [1, 1, 1, 1, 1, 1]);
    // With 500 ms the five readings 100 ms apart form one batch, the late one its own.
    assert_eq!(gathered(Some(Duration::from_millis(500))).await, [5, 1]);
    // A full batch does not wait for the linger.
    let store = Store::default();
    let t = start_sensors(&store, Some(Duration::from_secs(3600))).await;
    for _ in 0..10 {
        t.publish_raw("sensors.readings", Headers::new(), reading("cellar"))
            .await
            .expect("published");
    }
    t.settle().await;
    assert_eq!(store.sizes(), [10], "handed over full, before the hour");
    t.shutdown().await.expect("a clean shutdown");
}

#[tokio::test(start_paused = true)]
async fn each_message_of_a_core_batch_is_settled_on_its_own_in_process() {
    let store = Store::default();
    let t = start_sensors(&store, Some(Duration::from_secs(1))).await;
    for payload in [
        reading("cellar"),
        reading("flaky"),
        "{".to_owned(),
        reading("broken"),
    ] {
        t.publish_raw("sensors.readings", Headers::new(), payload)
            .await
            .expect("published");
    }
    t.advance(Duration::from_secs(1)).await;
    // The undecodable one is reported and left out; the three others are one batch.
    assert_eq!(
        store.batches(),
        [vec![
            ("cellar".to_owned(), 1),
            ("flaky".to_owned(), 1),
            ("broken".to_owned(), 1)
        ]]
    );
    assert_eq!(t.decode_failures("store").len(), 1);
    // `retry()` under the cap of 2: a copy published at once, back in a batch of its own.
    t.advance(Duration::from_secs(1)).await;
    assert_eq!(store.batches()[1], [("flaky".to_owned(), 2)]);
    let copies: Vec<_> = t
        .nats()
        .published("sensors.readings")
        .into_iter()
        .filter(|m| m.headers.get(RETRY_COUNT_HEADER).is_some())
        .collect();
    assert_eq!(copies.len(), 1, "one copy");
    assert_eq!(copies[0].payload, reading("flaky").as_bytes());
    assert_eq!(copies[0].headers.get(RETRY_COUNT_HEADER), Some("1"));
    // At the cap the retry is a dead letter, as is the payload that did not decode.
    let mut dead: Vec<_> = t
        .dead_letters("sensors.dead")
        .into_iter()
        .map(|m| String::from_utf8(m.payload.to_vec()).expect("text"))
        .collect();
    dead.sort();
    assert_eq!(dead, ["{".to_owned(), reading("flaky")]);
    t.shutdown().await.expect("a clean shutdown");
}

#[tokio::test(start_paused = true)]
async fn a_batch_reply_answers_each_request_of_its_batch_in_process() {
    let t = TestApp::start(math(NatsBroker::new("nats://unused:4222")))
        .await
        .expect("the app starts");
    let app = &t;
    let ask = |value: i64| async move {
        app.request::<_, Doubled>("math.double", &Number { value }, LINGER * 2)
            .await
    };
    // Five requests fill a batch: handled at once, each answered with its own value; the
    // negative one is dropped (no answer) and the undecodable one dead-lettered.
    let (answers, undecodable) = futures::join!(
        futures::future::join_all([1, 2, 3, -1].map(ask)),
        t.request::<_, Doubled>("math.double", "seven", LINGER * 2),
    );
    let answers: Vec<_> = answers
        .into_iter()
        .map(|a| a.map_err(|err| err.kind()))
        .collect();
    assert_eq!(
        answers,
        [
            Ok(Doubled { value: 2, batch: 4 }),
            Ok(Doubled { value: 4, batch: 4 }),
            Ok(Doubled { value: 6, batch: 4 }),
            Err(PublishErrorKind::Timeout),
        ]
    );
    assert_eq!(
        undecodable.map_err(|err| err.kind()),
        Err(PublishErrorKind::Timeout)
    );
    assert_eq!(
        t.published::<Doubled>("math.doubled"),
        [2, 4, 6].map(|value| Doubled { value, batch: 4 })
    );
    assert_eq!(t.dead_letters("math.dead").len(), 1);
    assert_eq!(&t.dead_letters("math.dead")[0].payload[..], br#""seven""#);

    // Two requests wait for the linger, then are answered together.
    let started = tokio::time::Instant::now();
    let answers = futures::future::join_all([10, 20].map(ask)).await;
    assert!(started.elapsed() >= LINGER, "held for the linger");
    let answers: Vec<_> = answers.into_iter().map(|a| a.expect("answered")).collect();
    assert_eq!(
        answers,
        [
            Doubled {
                value: 20,
                batch: 2
            },
            Doubled {
                value: 40,
                batch: 2
            }
        ]
    );
    t.shutdown().await.expect("a clean shutdown");
}

/// The same answers on a stream: no inbox to answer, each value published, each message settled
/// on the server with its own outcome.
#[subscriber(
    JetStreamSubject::new("numbers.in", "NUMBERS")
        .durable("double")
        .batch(nonzero!(5)),
    reply
)]
async fn double_stored(numbers: &[Number]) -> Vec<Result<Doubled, HandlerOutcome>> {
    doubled(numbers)
}

#[tokio::test(start_paused = true)]
async fn a_batch_reply_on_a_stream_publishes_each_value_and_settles_each_message_in_process() {
    use ruststream_nats::testing::InProcessNats;
    use ruststream_nats::transport::{JetStreamPublish as _, StreamAdmin as _, StreamSpec};

    let nats = InProcessNats::new();
    nats.declare_stream(StreamSpec {
        name: "NUMBERS".to_owned(),
        subjects: vec!["numbers.>".to_owned()],
    })
    .await
    .expect("the stream");
    for value in [1, -1, 3] {
        let payload = format!(r#"{{"value":{value}}}"#);
        nats.publish_stored(Arc::from("numbers.in"), Headers::new(), payload.into())
            .await
            .expect("stored");
    }
    let app = RustStream::new(AppInfo::new("math", "0.1.0")).with_broker(
        NatsBroker::new("nats://unused:4222"),
        |b| {
            b.include(double_stored);
        },
    );
    let t = TestApp::start_on(app, nats).await.expect("the app starts");
    t.settle().await;
    let values: Vec<i64> = t
        .published::<Doubled>("math.doubled")
        .iter()
        .map(|d| d.value)
        .collect();
    assert_eq!(values, [2, 6]);
    assert_eq!(
        t.nats().acknowledgements("NUMBERS", "double"),
        ["+ACK", "+TERM", "+ACK"]
    );
    t.shutdown().await.expect("a clean shutdown");
}

#[derive(Debug, Deserialize)]
struct Order {
    tenant: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "orders.{tenant}.placed")]
struct Placed {
    tenant: String,
}

/// Places each order of a batch under its tenant's subject.
#[subscriber(CoreSubject::new("orders.incoming").batch(nonzero!(10)).max_wait(Duration::from_secs(1)), reply)]
async fn place(orders: &[Order]) -> Vec<Result<Placed, HandlerOutcome>> {
    orders
        .iter()
        .map(|o| {
            Ok(Placed {
                tenant: o.tenant.clone(),
            })
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_value_that_can_never_be_published_is_dead_lettered_not_retried_in_process() {
    let app = RustStream::new(AppInfo::new("orders", "0.1.0")).with_broker(
        NatsBroker::new("nats://unused:4222"),
        |b| {
            b.include(place)
                .max_attempts(nonzero!(3))
                .dead_letter("orders.dead");
        },
    );
    let t = TestApp::start(app).await.expect("the app starts");
    for tenant in ["acme", "a.b", "globex"] {
        let payload = format!(r#"{{"tenant":"{tenant}"}}"#);
        t.publish_raw("orders.incoming", Headers::new(), payload)
            .await
            .expect("published");
    }
    t.advance(Duration::from_secs(1)).await;
    // `a.b` cannot fill one token of the subject: the others are placed, it is dead-lettered
    // as it arrived, and no copy retries it.
    let placed: Vec<String> = t
        .published::<Placed>("orders.*.placed")
        .into_iter()
        .map(|p| p.tenant)
        .collect();
    assert_eq!(placed, ["acme", "globex"]);
    let dead = t.dead_letters("orders.dead");
    assert_eq!(dead.len(), 1);
    assert_eq!(&dead[0].payload[..], br#"{"tenant":"a.b"}"#);
    assert_eq!(t.nats().published("orders.incoming").len(), 3, "no copy");
    assert_eq!(
        t.outcomes("place"),
        [
            HandlerOutcome::ack(),
            HandlerOutcome::dead_letter(),
            HandlerOutcome::ack()
        ]
    );
    t.shutdown().await.expect("a clean shutdown");
}

#[tokio::test(start_paused = true)]
async fn a_stop_hands_the_batch_being_formed_over_at_once_in_process() {
    let store = Store::default();
    let linger = Duration::from_secs(3600);
    let t = start_sensors(&store, Some(linger)).await;
    for sensor in ["cellar", "attic", "garage"] {
        t.publish_raw("sensors.readings", Headers::new(), reading(sensor))
            .await
            .expect("published");
    }
    t.settle().await;
    assert_eq!(store.sizes(), Vec::<usize>::new(), "lingering");
    let started = tokio::time::Instant::now();
    t.shutdown().await.expect("a clean shutdown");
    assert!(
        started.elapsed() < linger,
        "the stop did not wait for the linger"
    );
    assert_eq!(store.sizes(), [3], "the batch handled");
}

/// Reads one reading at a time: `.max_wait(..)` gathers nothing for it.
#[subscriber(CoreSubject::new("sensors.single").max_wait(Duration::from_secs(1)))]
async fn single(_reading: &Reading) -> HandlerOutcome {
    HandlerOutcome::ack()
}

#[tokio::test]
async fn batch_options_on_a_handler_of_single_messages_are_refused() {
    let app = RustStream::new(AppInfo::new("sensors", "0.1.0")).with_broker(
        NatsBroker::new("nats://unused:4222"),
        |b| {
            b.include(single);
        },
    );
    let err = TestApp::start(app).await.expect_err("refused");
    assert_eq!(err.kind(), ErrorKind::Config);
    assert!(err.to_string().contains("`single`"), "{err}");
}

#[test]
fn describe_lists_a_core_batch_and_its_linger() {
    let app = sensors(
        NatsBroker::new("nats://unused:4222"),
        &Store::default(),
        Some(Duration::from_millis(500)),
    );
    let table = ruststream::app::cli::describe(&app);
    assert!(
        table.contains("core, batch (max wait 500ms)"),
        "the batch is in the table:\n{table}"
    );
    // A queue group does not hide the batch.
    let shared = RustStream::new(AppInfo::new("sensors", "0.1.0")).with_broker(
        NatsBroker::new("nats://unused:4222"),
        |b| {
            b.include(
                CoreSubject::new("sensors.readings")
                    .queue_group("stores")
                    .handler(Store::default()),
            );
        },
    );
    let table = ruststream::app::cli::describe(&shared);
    assert!(
        table.contains("core, queue group stores, batch"),
        "both are in the table:\n{table}"
    );
}

/// Publishes `payload` to `subject` as a request answered on `inbox`.
async fn request(client: &async_nats::Client, subject: &str, inbox: String, payload: String) {
    client
        .publish_with_reply(subject.to_owned(), inbox, payload.into())
        .await
        .expect("published");
}

/// A real server, a client of it, and the math app running on it.
async fn live_math() -> (NatsServer, async_nats::Client, ruststream::RunningApp) {
    support::nats::logs();
    let server = NatsServer::start();
    let client = ruststream_test_server::client::connect(&server).await;
    let running = math(NatsBroker::new(server.url()))
        .start(ruststream::Env::new())
        .await
        .expect("the app starts");
    (server, client, running)
}

/// A new inbox prefix, and the subscription to every subject under it.
async fn answers_inbox(client: &async_nats::Client) -> (String, async_nats::Subscriber) {
    let inbox = client.new_inbox();
    let answers = client
        .subscribe(format!("{inbox}.*"))
        .await
        .expect("subscribed");
    (inbox, answers)
}

/// The first `n` answers `inbox` got (its subject, the answer), by subject.
async fn answered(inbox: &mut async_nats::Subscriber, n: usize) -> Vec<(String, Doubled)> {
    let mut got = Vec::new();
    while got.len() < n {
        let answer = tokio::time::timeout(PATIENCE, inbox.next())
            .await
            .expect("answered in time")
            .expect("the subscription is open");
        let doubled: Doubled = serde_json::from_slice(&answer.payload).expect("a Doubled");
        got.push((answer.subject.to_string(), doubled));
    }
    got.sort_by(|a, b| a.0.cmp(&b.0));
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_reply_answers_each_requester_live() {
    let (_server, client, running) = live_math().await;
    let seen = Recorder::start(&client, ["math.doubled", "math.dead"]).await;
    let (inbox, mut answers) = answers_inbox(&client).await;

    // Five requests: a full batch, handled without waiting for the linger.
    for (i, payload) in ["1", "2", "3", "-1"]
        .map(|v| format!(r#"{{"value":{v}}}"#))
        .into_iter()
        .chain([r#""seven""#.to_owned()])
        .enumerate()
    {
        request(&client, "math.double", format!("{inbox}.{i}"), payload).await;
    }
    client.flush().await.expect("flushed");

    let got = answered(&mut answers, 3).await;
    assert_eq!(
        got,
        [(0, 2), (1, 4), (2, 6)]
            .map(|(i, value)| (format!("{inbox}.{i}"), Doubled { value, batch: 4 }))
    );
    // The outgoing subject saw each value; the undecodable request was dead-lettered as it came.
    let messages = seen.until(4).await;
    let mut doubled: Vec<Doubled> = messages
        .iter()
        .filter(|m| m.subject.as_str() == "math.doubled")
        .map(|m| serde_json::from_slice(&m.payload).expect("a Doubled"))
        .collect();
    doubled.sort_by_key(|d| d.value);
    assert_eq!(doubled, [2, 4, 6].map(|value| Doubled { value, batch: 4 }));
    let dead: Vec<_> = messages
        .iter()
        .filter(|m| m.subject.as_str() == "math.dead")
        .map(|m| m.payload.clone())
        .collect();
    assert_eq!(dead, [&br#""seven""#[..]]);
    running.stop().await.expect("a drained stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_message_of_a_core_batch_is_settled_on_its_own_live() {
    support::nats::logs();
    let server = NatsServer::start();
    let client = ruststream_test_server::client::connect(&server).await;
    let store = Store::default();
    let running = sensors(
        NatsBroker::new(server.url()),
        &store,
        Some(Duration::from_millis(200)),
    )
    .start(ruststream::Env::new())
    .await
    .expect("the app starts");
    let seen = Recorder::start(&client, ["sensors.readings", "sensors.dead"]).await;
    for payload in [
        reading("cellar"),
        reading("flaky"),
        "{".to_owned(),
        reading("broken"),
    ] {
        client
            .publish("sensors.readings", payload.into())
            .await
            .expect("published");
    }
    client.flush().await.expect("flushed");

    // Four published, one copy of `flaky`, then two dead letters: `flaky` at the cap of 2 and
    // the payload that did not decode.
    let messages = seen.until(7).await;
    let copies: Vec<_> = messages
        .iter()
        .filter(|m| m.subject.as_str() == "sensors.readings")
        .filter_map(|m| {
            let count = m.headers.as_ref()?.get(RETRY_COUNT_HEADER)?;
            Some((m.payload.clone(), count.as_str().to_owned()))
        })
        .collect();
    assert_eq!(
        copies,
        [(reading("flaky").into(), "1".to_owned())],
        "one copy of the retried reading"
    );
    let mut dead: Vec<_> = messages
        .iter()
        .filter(|m| m.subject.as_str() == "sensors.dead")
        .map(|m| String::from_utf8(m.payload.to_vec()).expect("text"))
        .collect();
    dead.sort();
    assert_eq!(dead, ["{".to_owned(), reading("flaky")]);
    let attempts =
        eventually(PATIENCE, "every reading handled", || {
            let attempts = store.attempts();
            async move {
                (attempts.iter().map(|(_, a)| a.len()).sum::<usize>() == 4).then_some(attempts)
            }
        })
        .await;
    assert_eq!(
        attempts,
        [
            ("broken".to_owned(), vec![1]),
            ("cellar".to_owned(), vec![1]),
            ("flaky".to_owned(), vec![1, 2]),
        ]
    );
    running.stop().await.expect("a drained stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_hands_the_batch_being_formed_over_at_once_live() {
    let (_server, client, running) = live_math().await;
    let (inbox, mut answers) = answers_inbox(&client).await;
    for (i, value) in [7, 8].into_iter().enumerate() {
        let payload = format!(r#"{{"value":{value}}}"#);
        request(&client, "math.double", format!("{inbox}.{i}"), payload).await;
    }
    // Sent after the two on the same connection, so answered once they reached the app, where
    // they wait for a batch of five or the linger.
    let pong = client
        .request("math.ping", r#"{"value":1}"#.into())
        .await
        .expect("the ping is answered");
    assert_eq!(&pong.payload[..], br#"{"value":1}"#);

    let started = std::time::Instant::now();
    running.stop().await.expect("a drained stop");
    assert!(
        started.elapsed() < LINGER,
        "the stop did not wait for the linger"
    );
    let got: Vec<Doubled> = answered(&mut answers, 2)
        .await
        .into_iter()
        .map(|(_, doubled)| doubled)
        .collect();
    assert_eq!(
        got,
        [14, 16].map(|value| Doubled { value, batch: 2 }),
        "both answered, in one batch"
    );
}

/// A batch of questions answered to each requester only: nothing goes to `math.doubled`.
#[subscriber(
    CoreSubject::new("math.quiet")
        .batch(nonzero!(3))
        .max_wait(LINGER),
    reply
)]
async fn double_quietly(numbers: &[Number]) -> Vec<Result<Response<Doubled>, HandlerOutcome>> {
    doubled(numbers)
        .into_iter()
        .map(|r| r.map(Response))
        .collect()
}

fn quiet_math(broker: NatsBroker) -> impl ruststream::App<State = ()> {
    RustStream::new(AppInfo::new("math", "0.1.0")).with_broker(broker, |b| {
        b.include(double_quietly);
        b.include(ping);
    })
}

/// Three requests fill a batch; each requester gets its own answer, and `math.doubled` gets
/// nothing: the ping answered after them is the only thing on the wire after the answers.
async fn a_batch_of_responses_answers_only_the_requesters(t: &TestApp) {
    let ask = |value: i64| async move {
        t.request::<_, Doubled>("math.quiet", &Number { value }, LINGER * 2)
            .await
    };
    let answers = futures::future::join_all([1, 2, 3].map(ask)).await;
    let answers: Vec<Doubled> = answers.into_iter().map(|a| a.expect("answered")).collect();
    assert_eq!(answers, [2, 4, 6].map(|value| Doubled { value, batch: 3 }));
    let pong: Pong = t
        .request("math.ping", &Number { value: 9 }, PATIENCE)
        .await
        .expect("the ping is answered");
    assert_eq!(pong, Pong { value: 9 });
    t.settle().await;
    assert_eq!(t.published::<Doubled>("math.doubled"), []);
    assert_eq!(t.published::<Pong>("math.pong"), [Pong { value: 9 }]);
}

#[tokio::test(start_paused = true)]
async fn a_batch_of_responses_answers_only_the_requesters_in_process() {
    let t = TestApp::start(quiet_math(NatsBroker::new("nats://unused:4222")))
        .await
        .expect("the app starts");
    a_batch_of_responses_answers_only_the_requesters(&t).await;
    t.shutdown().await.expect("a clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_responses_answers_only_the_requesters_live() {
    let server = NatsServer::start();
    let t = TestApp::start_live(quiet_math(NatsBroker::new(server.url())), &server.url())
        .await
        .expect("the app starts on the server");
    a_batch_of_responses_answers_only_the_requesters(&t).await;
    t.shutdown().await.expect("a clean shutdown");
}
