//! The edges a payload or a peer could push through, against a real nats-server: a subject
//! built from payload data that names the KV or object store (`$KV.`, `$O.`) or another
//! consumer's acknowledgements (`$JS.ACK.`) is refused before anything is sent, while ordinary
//! publishes go on.

mod support;

use std::sync::{Mutex, PoisonError};

use ruststream::PublishErrorKind;
use ruststream_nats::prelude::*;
use ruststream_test_server::client::{create_stream, stream_messages};
use serde::{Deserialize, Serialize};
use support::nats::{
    PATIENCE, Recorder, STREAM, attempts, eventually, jetstream_server, publish_stored, start,
    until_settled,
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

/// Publishes where the payload says; a refused publish is retried, so the cap dead-letters it.
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
            2,
            "order {id} refused on both attempts: {refused:?}"
        );
        for (_, kind, message) in mine {
            assert_eq!(*kind, PublishErrorKind::Reserved, "{message}");
            assert!(message.contains("reserved prefix"), "{message}");
        }
    }
    assert!(refused.iter().all(|(id, ..)| *id != 6), "{refused:?}");
}
