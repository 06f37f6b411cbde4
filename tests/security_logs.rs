//! What the logs say and do not say, against a real nats-server: an undecodable payload's
//! values stay out of the log unless the broker opts in, and a JetStream registration whose
//! dead letters no stream stores is warned about at startup.

mod support;

use ruststream::HandlerOutcome;
use ruststream_nats::{CoreSubject, NatsBroker};
use ruststream_test_server::client::eventually;
use support::nats::*;
use support::security::capture;

/// Publishes a payload whose decoding fails on a value, and returns the warning about it.
async fn undecodable_warning(
    broker: fn(String) -> NatsBroker,
    subject: &str,
    card: &str,
) -> String {
    let captured = capture();
    let (server, client) = live_server().await;
    let handler = Scripted::always(HandlerOutcome::ack());
    let app = start(broker(server.url()), |b| {
        b.include(CoreSubject::new(subject.to_owned()).handler(handler.clone()));
    })
    .await
    .expect("the app starts");
    publish_core(&client, subject, &[], &format!(r#"{{"id":"{card}"}}"#)).await;
    let subject_field = format!("subject=\"{subject}\"");
    let lines = eventually(PATIENCE, "the undecodable payload logged", || {
        let lines = captured.lines_with(&["WARN", &subject_field, "does not decode"]);
        async move { (!lines.is_empty()).then_some(lines) }
    })
    .await;
    app.stop().await.expect("the app stops");
    assert!(handler.seen().is_empty());
    lines[0].clone()
}

#[tokio::test]
async fn an_undecodable_payload_is_logged_without_its_values_by_default() {
    let card = "4111 1111 1111 1111";
    let line = undecodable_warning(NatsBroker::new, "cards.default", card).await;
    assert!(!line.contains(card), "{line}");
    assert!(line.contains("invalid type (at line 1 column"), "{line}");
    assert!(line.contains("Order"), "names the type: {line}");
}

#[tokio::test]
async fn an_undecodable_payload_is_quoted_when_the_broker_opts_in() {
    let card = "5500 0000 0000 0004";
    let line = undecodable_warning(
        |url| NatsBroker::new(url).log_payload_values(true),
        "cards.quoted",
        card,
    )
    .await;
    assert!(line.contains(card), "{line}");
}

/// A payload without one of the type's fields: `qty`, named by the type, not by the payload.
#[derive(Debug, serde::Deserialize)]
#[allow(dead_code)]
struct Line {
    sku: String,
    qty: u32,
}

#[ruststream_nats::prelude::subscriber("lines.added")]
async fn line_added(line: &Line) -> HandlerOutcome {
    let _ = line;
    HandlerOutcome::ack()
}

#[tokio::test]
async fn an_undecodable_payload_names_the_missing_field_but_not_the_values() {
    let captured = capture();
    let (server, client) = live_server().await;
    let app = start(NatsBroker::new(server.url()), |b| {
        b.include(line_added);
    })
    .await
    .expect("the app starts");
    let secret = "SKU-4111-1111-1111-1111";
    publish_core(
        &client,
        "lines.added",
        &[],
        &format!(r#"{{"sku":"{secret}"}}"#),
    )
    .await;
    let lines = eventually(PATIENCE, "the undecodable payload logged", || {
        let lines = captured.lines_with(&["WARN", "subject=\"lines.added\"", "does not decode"]);
        async move { (!lines.is_empty()).then_some(lines) }
    })
    .await;
    app.stop().await.expect("the app stops");
    let line = &lines[0];
    assert!(
        line.contains("missing field `qty`"),
        "names the field: {line}"
    );
    assert!(!line.contains(secret), "{line}");
    assert!(!line.contains("SKU"), "{line}");
}

#[tokio::test]
async fn a_dead_letter_no_stream_stores_is_warned_about_at_startup() {
    let captured = capture();
    let (server, _client, js) = jetstream_server().await;
    let handler = Scripted::always(HandlerOutcome::ack());
    let app = start_on(&server, |b| {
        b.include(created("unstored_worker").handler(handler.clone()))
            .name("unstored_worker")
            .dead_letter("nowhere.dead");
    })
    .await;
    app.stop().await.expect("the app stops");
    let lines = captured.lines_with(&[
        "WARN",
        "unstored_worker",
        "no stream stores the dead-letter subject",
    ]);
    assert_eq!(lines.len(), 1, "{}", captured.text());
    assert!(lines[0].contains("nowhere.dead"), "{}", lines[0]);

    // Stored: no warning.
    create_stream(&js, "DEAD", ["stored.dead"]).await;
    let app = start_on(&server, |b| {
        b.include(created("stored_worker").handler(handler.clone()))
            .name("stored_worker")
            .dead_letter("stored.dead");
    })
    .await;
    app.stop().await.expect("the app stops");
    assert!(
        captured
            .lines_with(&["WARN", "registration=stored_worker", "no stream stores"])
            .is_empty()
    );
}
