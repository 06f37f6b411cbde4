//! The edges a payload, a peer or a shared server could push through, against a real
//! nats-server: a subject built from payload data that names the KV or object store (`$KV.`,
//! `$O.`) or another consumer's acknowledgements (`$JS.ACK.`) is refused before anything is
//! sent, while ordinary publishes go on; a declared stream that already exists keeps its
//! subjects and limits (the declaration adds and raises, never removes or tightens).

mod support;

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use async_nats::jetstream::stream;
use ruststream::PublishErrorKind;
use ruststream_nats::StreamDeclaration;
use ruststream_nats::prelude::*;
use ruststream_nats::testing::{InProcessNats, StreamLimits, TestApp};
use ruststream_nats::transport::{StreamAdmin as _, StreamSpec};
use ruststream_test_server::client::{create_stream, stream_messages};
use serde::{Deserialize, Serialize};
use support::nats::{
    Logs, NatsServer, PATIENCE, Recorder, STREAM, Scripted, attempts, connect_jetstream,
    eventually, jetstream_server, publish_stored, start, until_settled,
};

/// Where the router sends an order: to the subject `to` names, or, with `area` and `key`, to
/// the subject [`Mark`]'s template fills from them.
#[derive(Debug, Deserialize)]
struct Route {
    id: u64,
    #[serde(default)]
    to: String,
    area: Option<String>,
    key: Option<String>,
}

/// An output whose whole subject comes from payload fields.
#[derive(Debug, Serialize, Outgoing)]
#[outgoing(name = "{area}.idem.{key}")]
struct Mark {
    area: String,
    key: String,
}

/// Every publish error the router met, as `(order id, kind, message)`.
static REFUSED: Mutex<Vec<(u64, PublishErrorKind, String)>> = Mutex::new(Vec::new());

/// Publishes where the payload says; a refused publish is a permanent failure, so the answer
/// `retry()` is not taken: the delivery is dead-lettered at once.
#[subscriber(JetStreamSubject::new("orders.routed", STREAM).durable("router"))]
async fn route(r: &Route, ctx: &mut Context<'_>) -> HandlerOutcome {
    let sent = match (&r.area, &r.key) {
        (Some(area), Some(key)) => {
            ctx.publish(&Mark {
                area: area.clone(),
                key: key.clone(),
            })
            .await
        }
        _ => {
            ctx.publish_to(&r.to, &serde_json::json!({ "id": r.id }))
                .await
        }
    };
    match sent {
        Ok(()) => HandlerOutcome::ack(),
        Err(err) => {
            REFUSED
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((r.id, err.kind(), format!("{err:#}")));
            HandlerOutcome::retry()
        }
    }
}

#[tokio::test]
async fn payload_built_subjects_cannot_reach_kv_object_store_or_acks() {
    let (server, client, js) = jetstream_server().await;
    // The stream of the KV bucket idempotency keys would live in, to show no key was written.
    create_stream(&js, "KV_IDEM", ["$KV.IDEM.>"]).await;
    let recorder = Recorder::start(
        &client,
        ["$KV.>", "$O.>", "$JS.ACK.ORDERS.victim.>", "audit.>"],
    )
    .await;
    let app = start(NatsBroker::new(server.url()), |b| {
        b.include(route)
            .max_attempts(attempts(2))
            .dead_letter("orders.dead");
    })
    .await
    .expect("the app starts");

    let forged = [
        r#"{"id":1,"to":"$KV.IDEM.order-7"}"#,
        r#"{"id":2,"to":"$JS.ACK.ORDERS.victim.1.9.9.0.0"}"#,
        r#"{"id":3,"to":"$O.FILES.C.chunk"}"#,
        r#"{"id":4,"area":"$KV","key":"order-7"}"#,
        r#"{"id":5,"to":"$JS.ACK"}"#,
    ];
    for payload in forged {
        publish_stored(&js, "orders.routed", payload).await;
    }
    // An ordinary publish, after the forged ones, on the same connection.
    let last = publish_stored(&js, "orders.routed", r#"{"id":6,"to":"audit.routed"}"#).await;

    recorder.until(1).await;
    until_settled(&js, "router", last, "every routed order settled").await;
    let dead = eventually(PATIENCE, "five dead letters stored", || async {
        let dead: Vec<_> = stream_messages(&js, STREAM)
            .await
            .into_iter()
            .filter(|m| m.subject.as_str() == "orders.dead")
            .collect();
        (dead.len() == forged.len()).then_some(dead)
    })
    .await;
    let payloads: Vec<String> = dead
        .iter()
        .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
        .collect();
    assert_eq!(
        payloads, forged,
        "every forged order is dead-lettered as it arrived"
    );
    app.stop().await.expect("the app stops");

    let seen: Vec<String> = recorder
        .messages()
        .iter()
        .map(|m| m.subject.to_string())
        .collect();
    assert_eq!(
        seen,
        ["audit.routed"],
        "only the ordinary publish reached the server"
    );
    assert!(
        stream_messages(&js, "KV_IDEM").await.is_empty(),
        "no idempotency key was written"
    );
    let refused = REFUSED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    for id in 1..=5 {
        let mine: Vec<_> = refused.iter().filter(|(of, ..)| *of == id).collect();
        assert_eq!(
            mine.len(),
            1,
            "order {id} refused once, not retried: {refused:?}"
        );
        for (_, kind, message) in mine {
            assert_eq!(*kind, PublishErrorKind::Reserved, "{message}");
            assert!(message.contains("reserved prefix"), "{message}");
        }
    }
    assert!(refused.iter().all(|(id, ..)| *id != 6), "{refused:?}");
}

/// A quote request.
#[derive(Debug, Deserialize)]
struct Ask {
    id: u64,
}

/// The answer, published to `quotes.answered` and to the requester's reply subject.
#[derive(Debug, Serialize, Outgoing)]
#[outgoing(name = "quotes.answered")]
struct Quoted {
    id: u64,
}

#[subscriber(CoreSubject::new("quotes.ask"), reply)]
async fn quote(ask: &Ask) -> Result<Quoted, HandlerOutcome> {
    Ok(Quoted { id: ask.id })
}

/// A request's reply subject is the requester's choice: one under a reserved prefix other than
/// `_INBOX.` is not answered (a "response" to `$JS.API.STREAM.DELETE.ORDERS` would delete the
/// stream with the app's permissions), while the output is published and a real inbox answered.
#[tokio::test]
async fn a_reserved_reply_subject_is_not_answered() {
    let (server, client, js) = jetstream_server().await;
    let logs = Logs::default();
    let _guard = logs.install_at(tracing::Level::WARN);
    let recorder = Recorder::start(
        &client,
        [
            "$JS.API.STREAM.DELETE.>",
            "$KV.>",
            "$O.>",
            "quotes.answered",
            "my.inbox.>",
        ],
    )
    .await;
    let app = start(NatsBroker::new(server.url()), |b| {
        b.include(quote);
    })
    .await
    .expect("the app starts");
    let forged = [
        "$JS.API.STREAM.DELETE.ORDERS",
        "$KV.IDEM.order-7",
        "$O.FILES.C.chunk",
    ];
    for (id, reply) in forged.iter().enumerate() {
        client
            .publish_with_reply("quotes.ask", *reply, format!(r#"{{"id":{id}}}"#).into())
            .await
            .expect("published");
    }
    client
        .publish_with_reply("quotes.ask", "my.inbox.1", r#"{"id":9}"#.into())
        .await
        .expect("published");
    // Four outputs and the real inbox's answer, the last request's.
    let seen = eventually(PATIENCE, "four outputs and one answer", || async {
        let outputs = recorder.matching("quotes.answered").len();
        let answered = !recorder.matching("my.inbox.1").is_empty();
        (outputs == forged.len() + 1 && answered).then(|| recorder.messages())
    })
    .await;
    app.stop().await.expect("the app stops");
    let mut subjects: Vec<String> = seen.iter().map(|m| m.subject.to_string()).collect();
    subjects.sort();
    assert_eq!(
        subjects,
        [
            "my.inbox.1",
            "quotes.answered",
            "quotes.answered",
            "quotes.answered",
            "quotes.answered"
        ],
        "no answer reached a reserved subject"
    );
    js.get_stream(STREAM)
        .await
        .expect("the stream still exists");
    for reply in forged {
        let warned = logs.lines_with(&["WARN", reply, "not answered"]);
        assert_eq!(warned.len(), 1, "{reply}:\n{}", logs.text());
    }
}

/// The app of the declaration tests: `refunds` reads `orders.created` from `ORDERS` (a stream
/// an operator created with `orders.>`), and the broker declares `ORDERS` with `refunds.>` only,
/// and stream `AUDIT` with replicas and limits.
fn declaring(url: String) -> NatsBroker {
    NatsBroker::new(url)
        .declare_stream(STREAM, ["refunds.>"])
        .declare_stream_with(
            StreamDeclaration::new(STREAM, ["refunds.>"])
                .max_age(Duration::from_secs(7 * 24 * 3600))
                .max_messages(10),
        )
        .declare_stream_with(
            StreamDeclaration::new("AUDIT", ["audit.>"])
                .replicas(1)
                .max_age(Duration::from_secs(3600))
                .max_bytes(1 << 20)
                .max_messages(1_000)
                .duplicate_window(Duration::from_secs(30)),
        )
}

#[tokio::test]
async fn declaring_an_existing_stream_adds_subjects_and_raises_limits_only() {
    let logs = Logs::default();
    let _guard = logs.install_at(tracing::Level::WARN);
    support::nats::logs();
    let server = NatsServer::start();
    let (_client, js) = connect_jetstream(&server).await;
    js.create_stream(stream::Config {
        name: STREAM.into(),
        subjects: vec!["orders.>".into()],
        max_age: Duration::from_secs(3600),
        max_messages: 100,
        ..Default::default()
    })
    .await
    .expect("the operator's stream is created");
    let before = publish_stored(&js, "orders.created", r#"{"id":1}"#).await;

    // The first attempt is retried after a delay, the second acknowledged.
    let handler = Scripted::first_then_ack(HandlerOutcome::retry_after(Duration::from_millis(200)));
    let app = start(declaring(server.url()), |b| {
        b.include(
            JetStreamSubject::new("orders.created", STREAM)
                .durable("refunds")
                .handler(handler.clone()),
        )
        .max_attempts(attempts(3))
        .dead_letter("orders.dead");
    })
    .await
    .expect("the app starts");

    let info = js
        .get_stream(STREAM)
        .await
        .expect("the stream exists")
        .info()
        .await
        .expect("its info")
        .clone();
    assert_eq!(
        info.config.subjects,
        ["orders.>", "refunds.>"],
        "added, not replaced"
    );
    assert_eq!(
        info.config.max_age,
        Duration::from_secs(7 * 24 * 3600),
        "raised"
    );
    assert_eq!(info.config.max_messages, 100, "not tightened to 10");
    let after = publish_stored(&js, "orders.created", r#"{"id":2}"#).await;
    publish_stored(&js, "refunds.issued", r#"{"id":3}"#).await;
    let mut seen: Vec<u64> = handler.until_seen(4).await.iter().map(|s| s.id).collect();
    seen.sort_unstable();
    assert_eq!(seen, [1, 1, 2, 2], "both orders handled, each retried once");
    until_settled(
        &js,
        "refunds",
        after.max(before),
        "both orders acknowledged",
    )
    .await;
    let stored: Vec<String> = stream_messages(&js, STREAM)
        .await
        .iter()
        .map(|m| m.subject.to_string())
        .collect();
    assert_eq!(
        stored,
        ["orders.created", "orders.created", "refunds.issued"]
    );

    let audit = js
        .get_stream("AUDIT")
        .await
        .expect("the declared stream exists")
        .info()
        .await
        .expect("its info")
        .config
        .clone();
    assert_eq!(audit.subjects, ["audit.>"]);
    assert_eq!(audit.num_replicas, 1);
    assert_eq!(audit.max_age, Duration::from_secs(3600));
    assert_eq!(audit.max_bytes, 1 << 20);
    assert_eq!(audit.max_messages, 1_000);
    assert_eq!(audit.duplicate_window, Duration::from_secs(30));
    app.stop().await.expect("the app stops");

    assert_warned(
        &logs,
        "max_age 604800s (was 3600s)",
        "max_messages 10 (stays 100)",
    );
}

/// One warning names the subjects added to `ORDERS`, one the limit `raised`, one the limit
/// `kept`.
fn assert_warned(logs: &Logs, raised: &str, kept: &str) {
    for needles in [
        [
            "ORDERS",
            "added the subjects",
            r#"added_subjects=["refunds.>"]"#,
        ],
        ["ORDERS", "added the subjects", raised],
        ["ORDERS", "left as they are", kept],
    ] {
        let lines = logs.lines_with(&needles);
        assert_eq!(
            lines.len(),
            1,
            "one warning with {needles:?}:\n{}",
            logs.text()
        );
        assert!(lines[0].contains("WARN"), "{}", lines[0]);
    }
}

#[tokio::test(start_paused = true)]
async fn in_process_declaring_an_existing_stream_adds_subjects_and_raises_limits_only() {
    let logs = Logs::default();
    let _guard = logs.install_at(tracing::Level::WARN);
    let nats = InProcessNats::new();
    nats.declare_stream(StreamSpec {
        name: STREAM.into(),
        subjects: vec!["orders.>".into()],
    })
    .await
    .expect("the operator's stream is declared");
    assert!(nats.set_stream_limits(STREAM, StreamLimits::drop_oldest_past(100)));
    let app = RustStream::new(AppInfo::new("declaring", "0.1.0"))
        .with_broker(declaring("nats://127.0.0.1:1".into()), |_| {});
    let t = TestApp::start_on(app, nats).await.expect("the app starts");
    assert_eq!(
        t.nats().stream_subjects(STREAM).expect("the stream exists"),
        ["orders.>", "refunds.>"]
    );
    let limits = t.nats().stream_limits(STREAM).expect("the stream exists");
    assert_eq!(limits.max_age, None, "unlimited is not tightened to 7 days");
    assert_eq!(limits.max_msgs, Some(100), "not tightened to 10");
    let audit = t.nats().stream_limits("AUDIT").expect("declared");
    assert_eq!(audit.replicas, 1);
    assert_eq!(audit.max_age, Some(Duration::from_secs(3600)));
    assert_eq!(audit.max_bytes, Some(1 << 20));
    assert_eq!(audit.max_msgs, Some(1_000));
    assert_eq!(audit.duplicate_window, Duration::from_secs(30));
    t.shutdown().await.expect("a clean stop");
    // `max_age` has nothing to raise in process (the stream keeps messages forever).
    let lines = logs.lines_with(&[
        "ORDERS",
        "added the subjects",
        r#"added_subjects=["refunds.>"]"#,
    ]);
    assert_eq!(lines.len(), 1, "{}", logs.text());
    let lines = logs.lines_with(&["ORDERS", "left as they are", "max_messages 10 (stays 100)"]);
    assert_eq!(lines.len(), 1, "{}", logs.text());
}
