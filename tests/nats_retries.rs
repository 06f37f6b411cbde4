//! The attempt cap and the dead-letter subject on both models, asked of a real nats-server:
//! JetStream counts with the server's delivered, Core with the copies' retry-count header; at the
//! cap the delivery goes to the dead-letter subject as it arrived, or ends.

mod support;

use std::time::Duration;

use ruststream::HandlerOutcome;
use ruststream_nats::{CoreSubject, CoreWildcard, RETRY_COUNT_HEADER};
use support::nats::*;

#[tokio::test]
async fn jetstream_at_the_cap_without_a_dead_letter_is_terminated() {
    let (server, _client, js) = jetstream_server().await;
    let handler = Scripted::always(HandlerOutcome::retry());
    let running = start_on(&server, |b| {
        b.include(
            created("capped")
                .ack_wait(millis(500))
                .handler(handler.clone()),
        )
        .max_attempts(attempts(3));
    })
    .await;

    let seq = publish_stored(&js, "orders.created", &order(1)).await;
    let seen = handler.until_seen(3).await;
    let delivered: Vec<_> = seen.iter().map(|s| s.delivered).collect();
    assert_eq!(delivered, [Some(1), Some(2), Some(3)]);
    assert!(seen.iter().all(|s| s.stream_sequence == Some(seq)));
    until_settled(&js, "capped", seq, "terminated at the cap").await;
    quiet_for(Duration::from_millis(900)).await;
    assert_eq!(handler.seen().len(), 3, "a terminated message came back");
    assert_eq!(
        consumer_info(&js, STREAM, "capped")
            .await
            .delivered
            .consumer_sequence,
        3
    );
    running.stop().await.expect("a clean stop");
}

#[tokio::test]
async fn jetstream_at_the_cap_goes_to_a_stored_dead_letter_unchanged() {
    let (server, _client, js) = jetstream_server().await;
    create_stream(&js, "DEAD", ["dead.>"]).await;
    let handler = Scripted::always(HandlerOutcome::retry_after(Duration::from_millis(50)));
    let running = start_on(&server, |b| {
        b.include(created("dl").handler(handler.clone()))
            .max_attempts(attempts(2))
            .dead_letter("dead.orders");
    })
    .await;

    let seq = publish_stored_with(&js, "orders.created", &[("trace-id", "t-42")], &order(42)).await;
    let seen = handler.until_seen(2).await;
    assert_eq!(seen[1].delivered, Some(2));
    until_settled(&js, "dl", seq, "terminated after the dead letter").await;

    let dead = js.get_stream("DEAD").await.expect("the dead-letter stream");
    let stored = dead
        .get_raw_message(1)
        .await
        .expect("the dead letter is stored");
    assert_eq!(stored.subject.as_str(), "dead.orders");
    assert_eq!(&stored.payload[..], order(42).as_bytes());
    assert_eq!(
        stored.headers.get("trace-id").map(|v| v.as_str()),
        Some("t-42"),
        "the headers are those the delivery arrived with"
    );
    quiet_for(Duration::from_millis(300)).await;
    assert_eq!(handler.seen().len(), 2);
    running.stop().await.expect("a clean stop");
}

#[tokio::test]
async fn core_retry_under_a_cap_brings_one_copy_per_attempt() {
    let (server, client) = live_server().await;
    let wire = Recorder::start(&client, ["notices.sent"]).await;
    let handler = Scripted::always(HandlerOutcome::retry());
    let running = start_on(&server, |b| {
        b.include(CoreSubject::new("notices.sent").handler(handler.clone()))
            .max_attempts(attempts(3));
    })
    .await;

    publish_core(&client, "notices.sent", &[("trace-id", "c-1")], &order(8)).await;
    let seen = handler.until_seen(3).await;
    let attempts_seen: Vec<_> = seen.iter().map(|s| s.attempt).collect();
    assert_eq!(attempts_seen, [1, 2, 3]);
    let counts: Vec<_> = seen
        .iter()
        .map(|s| s.headers.get(RETRY_COUNT_HEADER).map(str::to_owned))
        .collect();
    assert_eq!(counts, [None, Some("1".to_owned()), Some("2".to_owned())]);
    assert!(
        seen.iter()
            .all(|s| s.headers.get("trace-id") == Some("c-1") && s.id == 8)
    );
    assert!(seen.iter().all(|s| s.delivered.is_none()));
    // At the cap, with no dead letter, the message is let go: nothing more on the wire.
    quiet_for(Duration::from_millis(500)).await;
    assert_eq!(handler.seen().len(), 3);
    assert_eq!(wire.messages().len(), 3, "the original and two copies");
    running.stop().await.expect("a clean stop");
}

#[tokio::test]
async fn core_at_the_cap_goes_to_the_dead_letter_as_it_arrived() {
    let (server, client) = live_server().await;
    let dead = Recorder::start(&client, ["dead.notices"]).await;
    let handler = Scripted::always(HandlerOutcome::retry_after(Duration::from_millis(50)));
    let running = start_on(&server, |b| {
        b.include(CoreSubject::new("notices.sent").handler(handler.clone()))
            .max_attempts(attempts(2))
            .dead_letter("dead.notices");
    })
    .await;

    publish_core(&client, "notices.sent", &[("trace-id", "c-2")], &order(9)).await;
    handler.until_seen(2).await;
    let dead = dead.until(1).await;
    assert_eq!(&dead[0].payload[..], order(9).as_bytes());
    let headers = dead[0]
        .headers
        .as_ref()
        .expect("the dead letter has headers");
    assert_eq!(headers.get("trace-id").map(|v| v.as_str()), Some("c-2"));
    // As it arrived: the second attempt was the first copy.
    assert_eq!(
        headers.get(RETRY_COUNT_HEADER).map(|v| v.as_str()),
        Some("1")
    );
    quiet_for(Duration::from_millis(300)).await;
    assert_eq!(handler.seen().len(), 2);
    running.stop().await.expect("a clean stop");
}

#[tokio::test]
async fn a_core_pattern_sends_its_copies_to_retry_to() {
    let (server, client) = live_server().await;
    let handler = Scripted::first_then_ack(HandlerOutcome::retry());
    let running = start_on(&server, |b| {
        b.include(CoreWildcard::new("orders.*").handler(handler.clone()))
            .max_attempts(attempts(3))
            .retry_to("orders.retry");
    })
    .await;

    publish_core(&client, "orders.eu", &[], &order(4)).await;
    let seen = handler.until_seen(2).await;
    assert_eq!(seen[0].subject, "orders.eu");
    assert_eq!(seen[1].subject, "orders.retry");
    assert_eq!(seen[1].attempt, 2);
    assert_eq!(seen[1].headers.get(RETRY_COUNT_HEADER), Some("1"));
    running.stop().await.expect("a clean stop");
}

#[tokio::test]
async fn a_malformed_retry_count_is_attempt_one_and_still_handled() {
    let (server, client) = live_server().await;
    let handler = Scripted::always(HandlerOutcome::ack());
    let running = start_on(&server, |b| {
        b.include(CoreSubject::new("notices.sent").handler(handler.clone()))
            .max_attempts(attempts(2));
    })
    .await;

    publish_core(
        &client,
        "notices.sent",
        &[(RETRY_COUNT_HEADER, "many")],
        &order(6),
    )
    .await;
    let seen = handler.until_seen(1).await;
    assert_eq!(seen[0].attempt, 1);
    running.stop().await.expect("a clean stop");
}
