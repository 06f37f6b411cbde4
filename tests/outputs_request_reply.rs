//! Request/reply: a `reply` handler on a Core subject answers requests (the `Ok` value goes to
//! the requester's inbox and to its `#[outgoing]` subject), and a typed request on the calling
//! side returns the decoded response, "no responders" at once, or a timeout. Live against a
//! real nats-server (the requester a raw async-nats client, and the app's own `NatsClient`),
//! and in process through `TestApp`. A `Response<T>` answers the requester only.

mod support;

use std::time::Duration;

use futures::StreamExt as _;
use ruststream::{CORRELATION_ID_HEADER, PublishErrorKind};
use ruststream_nats::NatsClient;
use ruststream_nats::prelude::*;
use ruststream_nats::testing::TestApp;
use serde::{Deserialize, Serialize};

use support::nats::{Recorder, live_server, start_on};

#[derive(Debug, Serialize, Deserialize)]
struct Number {
    value: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "math.doubled")]
struct Doubled {
    value: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "math.quadrupled")]
struct Quadrupled {
    value: i64,
}

#[subscriber("math.double", reply)]
async fn double(n: &Number) -> Result<Doubled, HandlerOutcome> {
    Ok(Doubled { value: n.value * 2 })
}

/// Asks `math.double` twice, from inside a handler.
#[subscriber("math.quadruple", reply)]
async fn quadruple(n: &Number, ctx: &mut Context<'_>) -> Result<Quadrupled, HandlerOutcome> {
    let ask = async |value| {
        ctx.request::<_, Doubled>("math.double", &Number { value }, Duration::from_secs(2))
            .await
            .map_err(|_| HandlerOutcome::drop())
    };
    let twice = ask(n.value).await?;
    let four_times = ask(twice.value).await?;
    Ok(Quadrupled {
        value: four_times.value,
    })
}

/// Answers the requester only: `Doubled` is an `#[outgoing]` type, and nothing goes to
/// `math.doubled`.
#[subscriber("math.double_quietly", reply)]
async fn double_quietly(n: &Number) -> Result<Response<Doubled>, HandlerOutcome> {
    Ok(Response(Doubled { value: n.value * 2 }))
}

/// Listens and never answers.
#[subscriber("math.silent")]
async fn silent(_n: &Number) -> HandlerOutcome {
    HandlerOutcome::ack()
}

fn mount(b: &mut ruststream::Scope<()>) {
    b.include(double);
    b.include(quadruple);
    b.include(silent);
    b.include(double_quietly);
}

#[tokio::test]
async fn a_raw_request_to_a_reply_handler_gets_the_value_and_the_outgoing_subject_the_event() {
    let (server, client) = live_server().await;
    let running = start_on(&server, mount).await;
    let events = Recorder::start(&client, ["math.doubled"]).await;

    let response = client
        .request("math.double", r#"{"value":21}"#.into())
        .await
        .expect("the handler answers");
    assert_eq!(&response.payload[..], br#"{"value":42}"#);

    let seen = events.until(1).await;
    assert_eq!(seen.len(), 1);
    assert_eq!(&seen[0].payload[..], br#"{"value":42}"#);
    assert_eq!(seen[0].subject.as_str(), "math.doubled");

    // The correlation id of the request comes back on the response and on the event.
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(CORRELATION_ID_HEADER, "req-7");
    let response = client
        .request_with_headers("math.double", headers, r#"{"value":5}"#.into())
        .await
        .expect("the handler answers");
    assert_eq!(&response.payload[..], br#"{"value":10}"#);
    let correlation = |m: &async_nats::Message| {
        m.headers
            .as_ref()
            .and_then(|h| h.get(CORRELATION_ID_HEADER))
            .map(|v| v.as_str().to_owned())
    };
    assert_eq!(correlation(&response).as_deref(), Some("req-7"));
    let seen = events.until(2).await;
    assert_eq!(correlation(&seen[1]).as_deref(), Some("req-7"));

    running.stop().await.expect("a clean stop");
}

/// How many requests [`a_backlog_of_requests_is_answered_each_with_its_own_value`] sends at once.
const BURST: i64 = 300;

/// Requests sent at once reach the handler as a backlog: each one it takes looks at what is
/// ready behind it (a request with nothing behind has its response written at once, one with a
/// request behind leaves that one to be taken next). Every request still gets its own answer, and
/// the outgoing subject sees each value once.
#[tokio::test]
async fn a_backlog_of_requests_is_answered_each_with_its_own_value() {
    let (server, client) = live_server().await;
    let running = start_on(&server, mount).await;
    let events = Recorder::start(&client, ["math.doubled"]).await;

    let asks = (1..=BURST).map(|value| {
        let client = client.clone();
        async move {
            let response = client
                .request("math.double", format!(r#"{{"value":{value}}}"#).into())
                .await
                .expect("answered");
            let doubled: Doubled = serde_json::from_slice(&response.payload).expect("a Doubled");
            (value, doubled.value)
        }
    });
    for (value, answer) in futures::future::join_all(asks).await {
        assert_eq!(answer, value * 2, "the answer to {value}");
    }
    let mut seen: Vec<i64> = events
        .until(usize::try_from(BURST).expect("small"))
        .await
        .iter()
        .map(|m| {
            serde_json::from_slice::<Doubled>(&m.payload)
                .expect("a Doubled")
                .value
        })
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, (1..=BURST).map(|v| v * 2).collect::<Vec<_>>());

    running.stop().await.expect("a clean stop");
}

#[tokio::test]
async fn a_typed_request_from_outside_and_inside_a_handler() {
    let (server, client) = live_server().await;
    let running = start_on(&server, mount).await;
    let nats = NatsClient::of(&running).expect("the app runs a NATS broker");

    let doubled: Doubled = nats
        .request("math.double", &Number { value: 4 }, Duration::from_secs(5))
        .await
        .expect("answered");
    assert_eq!(doubled, Doubled { value: 8 });

    let quadrupled: Quadrupled = nats
        .request(
            "math.quadruple",
            &Number { value: 3 },
            Duration::from_secs(5),
        )
        .await
        .expect("answered");
    assert_eq!(quadrupled, Quadrupled { value: 12 });

    // Nobody listens: at once, not after the timeout.
    let started = std::time::Instant::now();
    let err = nats
        .request::<_, Doubled>("nobody.home", &Number { value: 1 }, Duration::from_secs(30))
        .await
        .expect_err("no responders");
    assert_eq!(err.kind(), PublishErrorKind::NoResponders, "{err}");
    assert!(started.elapsed() < Duration::from_secs(10), "{err}");

    // Someone listens and does not answer.
    let err = nats
        .request::<_, Doubled>(
            "math.silent",
            &Number { value: 1 },
            Duration::from_millis(300),
        )
        .await
        .expect_err("a timeout");
    assert_eq!(err.kind(), PublishErrorKind::Timeout, "{err}");

    // A response that is not the type asked for.
    let mut echo = client.subscribe("math.echo").await.expect("subscribed");
    let responder = client.clone();
    tokio::spawn(async move {
        while let Some(m) = echo.next().await {
            if let Some(reply) = m.reply {
                let _ = responder.publish(reply, "not json".into()).await;
            }
        }
    });
    // The responder answers before the typed request asks (its subscription is on the server).
    client
        .request("math.echo", "probe".into())
        .await
        .expect("the echo responder answers");
    let err = nats
        .request::<_, Doubled>("math.echo", &Number { value: 1 }, Duration::from_secs(5))
        .await
        .expect_err("undecodable");
    assert_eq!(err.kind(), PublishErrorKind::Decode, "{err}");

    let err = nats
        .request::<_, Doubled>("$JS.API.INFO", &Number { value: 1 }, Duration::from_secs(1))
        .await
        .expect_err("reserved");
    assert_eq!(err.kind(), PublishErrorKind::Reserved, "{err}");

    running.stop().await.expect("a clean stop");
}

fn app() -> impl App<State = ()> {
    RustStream::new(AppInfo::new("math", "0.1.0"))
        .with_broker(NatsBroker::new("nats://127.0.0.1:1"), mount)
}

/// [`a_backlog_of_requests_is_answered_each_with_its_own_value`] in process.
#[tokio::test(start_paused = true)]
async fn test_app_answers_a_backlog_of_requests_each_with_its_own_value() {
    let t = TestApp::start(app()).await.expect("the app starts");
    let asks = (1..=BURST).map(|value| {
        let t = &t;
        async move {
            let doubled: Doubled = t
                .request("math.double", &Number { value }, Duration::from_secs(5))
                .await
                .expect("answered");
            (value, doubled.value)
        }
    });
    for (value, answer) in futures::future::join_all(asks).await {
        assert_eq!(answer, value * 2, "the answer to {value}");
    }
    t.settle().await;
    let mut seen: Vec<i64> = t
        .published::<Doubled>("math.doubled")
        .into_iter()
        .map(|d| d.value)
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, (1..=BURST).map(|v| v * 2).collect::<Vec<_>>());
}

#[tokio::test(start_paused = true)]
async fn test_app_answers_requests_and_sends_them() {
    let t = TestApp::start(app()).await.expect("the app starts");

    let doubled: Doubled = t
        .request("math.double", &Number { value: 21 }, Duration::from_secs(1))
        .await
        .expect("answered");
    assert_eq!(doubled, Doubled { value: 42 });
    t.settle().await;
    assert_eq!(
        t.published::<Doubled>("math.doubled"),
        [Doubled { value: 42 }]
    );

    let quadrupled: Quadrupled = t
        .request(
            "math.quadruple",
            &Number { value: 3 },
            Duration::from_secs(5),
        )
        .await
        .expect("answered");
    assert_eq!(quadrupled, Quadrupled { value: 12 });

    let err = t
        .request::<_, Doubled>("nobody.home", &Number { value: 1 }, Duration::from_secs(30))
        .await
        .expect_err("no responders");
    assert_eq!(err.kind(), PublishErrorKind::NoResponders, "{err}");

    let started = tokio::time::Instant::now();
    let err = t
        .request::<_, Doubled>("math.silent", &Number { value: 1 }, Duration::from_secs(2))
        .await
        .expect_err("a timeout");
    assert_eq!(err.kind(), PublishErrorKind::Timeout, "{err}");
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(2),
        "on tokio's clock"
    );

    t.shutdown().await.expect("a clean stop");
}

/// Headers NATS cannot carry fail before anything is sent, and the error names the output (the
/// last subject), not the inbox a response would have gone to first.
#[tokio::test]
async fn headers_nats_cannot_carry_fail_naming_the_output_not_the_inbox() {
    use ruststream_nats::transport::{CorePubSub as _, Target};
    let (_server, client) = live_server().await;
    let transport = ruststream_nats::transport::nats::NatsTransport::new(client.clone());
    let inbox = client.new_inbox();
    let mut responses = client.subscribe(inbox.clone()).await.expect("subscribed");
    let mut headers = ruststream::Headers::new();
    headers.insert("not a header name", "value");
    let subjects = [
        Target::Shared(std::sync::Arc::from(inbox.as_str())),
        Target::Static("math.doubled"),
    ];
    let (index, err) = transport
        .publish_each(&subjects, &headers, r#"{"value":1}"#.into())
        .await
        .expect_err("refused");
    assert_eq!(index, 1, "the output's index: {err}");
    assert_eq!(
        err.kind,
        ruststream_nats::transport::TransportErrorKind::Invalid
    );
    // Nothing went to the inbox: a probe published after is the first message there.
    client
        .publish(inbox.clone(), "probe".into())
        .await
        .expect("published");
    let first = responses.next().await.expect("the probe");
    assert_eq!(&first.payload[..], b"probe");
}

/// A `Response<T>` answers the requester (with its correlation id and content type) and publishes
/// nothing to `T`'s `#[outgoing]` subject: a sentinel published there afterwards is the first
/// message a raw subscriber gets.
#[tokio::test]
async fn a_response_answers_the_requester_and_publishes_no_event() {
    let (server, client) = live_server().await;
    let running = start_on(&server, mount).await;
    let events = Recorder::start(&client, ["math.doubled"]).await;

    let mut headers = async_nats::HeaderMap::new();
    headers.insert(CORRELATION_ID_HEADER, "req-9");
    let response = client
        .request_with_headers("math.double_quietly", headers, r#"{"value":21}"#.into())
        .await
        .expect("the handler answers");
    assert_eq!(&response.payload[..], br#"{"value":42}"#);
    let header = |name: &str| {
        response
            .headers
            .as_ref()
            .and_then(|h| h.get(name))
            .map(|v| v.as_str().to_owned())
    };
    assert_eq!(header(CORRELATION_ID_HEADER).as_deref(), Some("req-9"));
    assert_eq!(header("content-type").as_deref(), Some("application/json"));
    // A plain publish (no inbox) is handled and answered to nobody.
    client
        .publish("math.double_quietly", r#"{"value":5}"#.into())
        .await
        .expect("published");
    // Handled in order: once this request is answered, the plain publish was handled too.
    let response = client
        .request("math.double_quietly", r#"{"value":1}"#.into())
        .await
        .expect("the handler answers");
    assert_eq!(&response.payload[..], br#"{"value":2}"#);

    client
        .publish("math.doubled", "sentinel".into())
        .await
        .expect("published");
    let seen = events.until(1).await;
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(&seen[0].payload[..], b"sentinel");
    running.stop().await.expect("a clean stop");
}

/// [`a_response_answers_the_requester_and_publishes_no_event`] in process.
#[tokio::test(start_paused = true)]
async fn test_app_a_response_answers_the_requester_and_publishes_no_event() {
    let t = TestApp::start(app()).await.expect("the app starts");
    let doubled: Doubled = t
        .request(
            "math.double_quietly",
            &Number { value: 21 },
            Duration::from_secs(1),
        )
        .await
        .expect("answered");
    assert_eq!(doubled, Doubled { value: 42 });
    t.publish("math.double_quietly", &Number { value: 5 })
        .await
        .expect("published");
    t.settle().await;
    assert_eq!(
        t.outcomes("double_quietly"),
        [HandlerOutcome::ack(), HandlerOutcome::ack()]
    );
    t.publish("math.doubled", &Doubled { value: -1 })
        .await
        .expect("published");
    t.settle().await;
    assert_eq!(
        t.published::<Doubled>("math.doubled"),
        [Doubled { value: -1 }],
        "only the sentinel"
    );
    t.shutdown().await.expect("a clean stop");

    // The AsyncAPI document: a reply on the requester's inbox, named by the value's type, and
    // no operation sending to `math.doubled` for this handler.
    let doc = ruststream::asyncapi::document(&app());
    let operations = doc["operations"].as_object().expect("operations");
    let of_handler: Vec<&serde_json::Value> = operations
        .values()
        .filter(|o| {
            o["action"] == "receive"
                && o["summary"]
                    .as_str()
                    .is_some_and(|s| s.contains("`double_quietly`"))
        })
        .collect();
    assert_eq!(of_handler.len(), 1, "{of_handler:#?}");
    let reply = &of_handler[0]["reply"];
    assert!(reply.is_object(), "{:#}", of_handler[0]);
    let message = &doc["channels"]["double_quietly.reply"]["messages"]["double_quietly.out"];
    assert_eq!(message["title"], "Doubled", "{:#}", doc["channels"]);
    let sends: Vec<&String> = operations
        .iter()
        .filter(|(_, o)| {
            o["action"] == "send"
                && o["summary"]
                    .as_str()
                    .is_some_and(|s| s.contains("`double_quietly`"))
        })
        .map(|(id, _)| id)
        .collect();
    assert!(
        sends.is_empty(),
        "nothing sends to `math.doubled`: {sends:?}"
    );
}
