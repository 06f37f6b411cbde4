//! The in-process NATS refuses what the broker refuses: one set of subject rules.

use std::sync::Arc;

use ruststream::Headers;

use super::InProcessNats;
use crate::transport::{CorePubSub, JetStreamPublish, StreamAdmin, StreamSpec, TransportErrorKind};

#[tokio::test(start_paused = true)]
async fn a_token_mixing_a_wildcard_with_text_is_refused_as_the_broker_refuses_it() {
    let nats = InProcessNats::new();
    let Err(err) = nats.subscribe("orders.a*".into(), None).await else {
        panic!("`orders.a*` was subscribed to; the broker refuses it");
    };
    assert_eq!(err.kind, TransportErrorKind::Invalid, "{err}");
    let err = nats
        .publish(Arc::from("orders.a>"), Headers::new(), "x".into())
        .await
        .expect_err("`orders.a>` was published to; the broker refuses it");
    assert_eq!(err.kind, TransportErrorKind::Invalid, "{err}");
    let err = nats
        .declare_stream(StreamSpec {
            name: "ORDERS".into(),
            subjects: vec!["orders.a*".into()],
        })
        .await
        .expect_err("a stream stored `orders.a*`; the broker refuses it");
    assert_eq!(err.kind, TransportErrorKind::Invalid, "{err}");
}

include!("../../subject/table.rs");

#[tokio::test(start_paused = true)]
async fn every_row_of_the_shared_subject_table() {
    let nats = InProcessNats::new();
    for &(subject, publish, pattern) in SUBJECT_TABLE {
        let published = nats
            .publish(Arc::from(subject), Headers::new(), "x".into())
            .await;
        assert_eq!(
            published.is_ok(),
            publish,
            "publish to {subject:?}: {published:?}"
        );
        let subscribed = nats.subscribe(subject.to_owned(), None).await;
        assert_eq!(
            subscribed.is_ok(),
            pattern,
            "subscribe to {subject:?}: {:?}",
            subscribed.err()
        );
    }
}

/// A stream created or changed is announced as a server announces it, on the advisory
/// subjects a running app's publisher listens to; declaring it again unchanged is not.
#[tokio::test(start_paused = true)]
async fn a_stream_created_or_changed_is_announced() {
    use futures::{FutureExt as _, StreamExt as _};
    let nats = InProcessNats::new();
    let (mut advisories, _unsubscribe) = nats
        .subscribe(crate::publish::STREAM_ADVISORIES.into(), None)
        .await
        .expect("subscribed");
    let declare = |subject: &str| StreamSpec {
        name: "ORDERS".into(),
        subjects: vec![subject.into()],
    };
    let mut next = || {
        advisories
            .next()
            .now_or_never()
            .flatten()
            .map(|m| m.expect("a message").subject.to_string())
    };
    for (subjects, announced) in [
        ("orders.>", Some("$JS.EVENT.ADVISORY.STREAM.CREATED.ORDERS")),
        ("orders.>", None),
        // Already stored by `orders.>`: nothing changes.
        ("orders.*", None),
        (
            "refunds.*",
            Some("$JS.EVENT.ADVISORY.STREAM.UPDATED.ORDERS"),
        ),
    ] {
        nats.declare_stream(declare(subjects))
            .await
            .expect("declared");
        assert_eq!(next().as_deref(), announced, "declaring `{subjects}`");
    }
}

/// A declared `max_bytes` and `max_age` keep what a server keeps: the oldest messages go first.
#[tokio::test(start_paused = true)]
async fn declared_max_bytes_and_max_age_drop_the_oldest() {
    use crate::transport::StreamDeclaration;
    let nats = InProcessNats::new();
    nats.declare_stream_with(
        StreamDeclaration::new("S", ["s.>"])
            .max_bytes(40)
            .max_age(std::time::Duration::from_secs(10)),
    )
    .await
    .expect("declared");
    let publish = |payload: &'static str| {
        nats.publish_stored(Arc::from("s.a"), Headers::new(), payload.into())
    };
    // 3 + 12 bytes each: the third makes room by dropping the first.
    for payload in ["one---------", "two---------", "three-------"] {
        publish(payload).await.expect("stored");
    }
    let kept = |nats: &InProcessNats| -> Vec<u64> {
        nats.stream_messages("S")
            .iter()
            .map(|m| m.sequence)
            .collect()
    };
    assert_eq!(kept(&nats), [2, 3]);
    tokio::time::advance(std::time::Duration::from_secs(11)).await;
    publish("four").await.expect("stored");
    assert_eq!(kept(&nats), [4], "older than max_age");
}
