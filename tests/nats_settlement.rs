//! Every row of the settlement table, asked of a real nats-server: what each outcome does to a
//! JetStream delivery (consumer info, redeliveries) and to a Core one (what comes back on the
//! wire), and a graceful stop whose settlements reach the server.

mod support;

use std::time::Duration;

use ruststream::{Env, ErrorKind, HandlerOutcome};
use ruststream_nats::{CoreSubject, JetStreamSubject, NatsBroker, RETRY_COUNT_HEADER};
use support::nats::*;

#[tokio::test]
async fn ack_finishes_the_message() {
    let (server, _client, js) = jetstream_server().await;
    let handler = Scripted::always(HandlerOutcome::ack());
    let running = start_on(&server, |b| {
        b.include(
            created("ack")
                .ack_wait(millis(500))
                .handler(handler.clone()),
        );
    })
    .await;

    let seq = publish_stored(&js, "orders.created", &order(1)).await;
    handler.until_seen(1).await;
    let info = until_settled(&js, "ack", seq, "the message is acknowledged").await;
    assert_eq!(info.num_pending, 0);

    // Past ack_wait, the server sends it no more.
    quiet_for(Duration::from_millis(900)).await;
    assert_eq!(handler.seen().len(), 1);
    let info = consumer_info(&js, STREAM, "ack").await;
    assert_eq!(info.delivered.consumer_sequence, 1, "delivered once");
    assert_eq!(info.delivered.stream_sequence, seq);

    running.stop().await.expect("a clean stop");
}

#[tokio::test]
async fn an_ephemeral_consumer_on_a_pattern_reads_and_settles() {
    let (server, _client, js) = jetstream_server().await;
    let handler = Scripted::first_then_ack(HandlerOutcome::retry());
    let running = start_on(&server, |b| {
        b.include(JetStreamSubject::new("orders.*", STREAM).handler(handler.clone()));
    })
    .await;

    publish_stored(&js, "orders.created", &order(1)).await;
    publish_stored(&js, "orders.shipped", &order(2)).await;
    let seen = handler.until_seen(4).await;
    let mut subjects: Vec<_> = seen.iter().map(|s| s.subject.as_str()).collect();
    subjects.sort_unstable();
    assert_eq!(
        subjects,
        [
            "orders.created",
            "orders.created",
            "orders.shipped",
            "orders.shipped"
        ]
    );
    let mut stream = js.get_stream(STREAM).await.expect("the stream");
    let consumers = stream.info().await.expect("its info").state.consumer_count;
    assert_eq!(consumers, 1, "one ephemeral consumer");
    running.stop().await.expect("a clean stop");
}

#[tokio::test]
async fn retry_is_delivered_again_at_once_with_the_same_stream_sequence() {
    let (server, _client, js) = jetstream_server().await;
    // The default ack_wait is 30 s: a redelivery within the test's patience is the -NAK's.
    let handler = Scripted::first_then_ack(HandlerOutcome::retry());
    let running = start_on(&server, |b| {
        b.include(created("retry").handler(handler.clone()));
    })
    .await;

    let seq = publish_stored(&js, "orders.created", &order(7)).await;
    let seen = handler.until_seen(2).await;
    assert_eq!(seen[0].delivered, Some(1));
    assert_eq!(seen[1].delivered, Some(2));
    assert_eq!(seen[1].attempt, 2);
    assert_eq!(seen[0].stream_sequence, Some(seq));
    assert_eq!(seen[1].stream_sequence, Some(seq));

    let info = until_settled(&js, "retry", seq, "acknowledged after the retry").await;
    assert_eq!(info.delivered.consumer_sequence, 2, "delivered twice");
    assert_eq!(info.delivered.stream_sequence, seq, "one message");
    running.stop().await.expect("a clean stop");
}

#[tokio::test]
async fn retry_after_is_held_for_the_delay_then_delivered_again() {
    let (server, _client, js) = jetstream_server().await;
    let delay = Duration::from_millis(400);
    let handler = Scripted::first_then_ack(HandlerOutcome::retry_after(delay));
    let running = start_on(&server, |b| {
        b.include(created("later").handler(handler.clone()));
    })
    .await;

    let seq = publish_stored(&js, "orders.created", &order(3)).await;
    let seen = handler.until_seen(2).await;
    assert!(
        seen[1].at - seen[0].at >= delay,
        "held {:?}, less than the delay",
        seen[1].at - seen[0].at
    );
    assert_eq!(seen[1].delivered, Some(2));
    assert_eq!(seen[1].stream_sequence, Some(seq));
    until_settled(&js, "later", seq, "acknowledged after the delay").await;
    running.stop().await.expect("a clean stop");
}

#[tokio::test]
async fn drop_ends_the_message_for_good() {
    let (server, _client, js) = jetstream_server().await;
    let handler = Scripted::always(HandlerOutcome::drop());
    let running = start_on(&server, |b| {
        b.include(
            created("drop")
                .ack_wait(millis(300))
                .handler(handler.clone()),
        );
    })
    .await;

    let seq = publish_stored(&js, "orders.created", &order(9)).await;
    handler.until_seen(1).await;
    until_settled(&js, "drop", seq, "the message is terminated").await;
    quiet_for(Duration::from_millis(900)).await;
    assert_eq!(handler.seen().len(), 1, "a terminated message came back");
    let info = consumer_info(&js, STREAM, "drop").await;
    assert_eq!(info.delivered.consumer_sequence, 1, "delivered once");
    running.stop().await.expect("a clean stop");
}

#[tokio::test]
async fn no_outcome_before_ack_wait_is_delivered_again_and_counts_toward_the_cap() {
    let (server, client, js) = jetstream_server().await;
    let ack_wait = Duration::from_millis(800);
    let dead = Recorder::start(&client, ["dead.orders"]).await;
    // The first delivery outlives ack_wait; the second comes from the server meanwhile.
    let handler = Scripted::always(HandlerOutcome::retry()).slow_when(move |seen| {
        if seen.delivered == Some(1) {
            ack_wait * 3
        } else {
            Duration::ZERO
        }
    });
    let running = start_on(&server, |b| {
        b.include(
            created("slow")
                .ack_wait(ruststream::NonZeroDuration::new(ack_wait).expect("not zero"))
                .handler(handler.clone()),
        )
        .concurrency(std::num::NonZeroUsize::new(2).expect("not zero"))
        .max_attempts(attempts(2))
        .dead_letter("dead.orders");
    })
    .await;

    let published = std::time::Instant::now();
    let seq = publish_stored(&js, "orders.created", &order(11)).await;
    let seen = handler.until_seen(2).await;
    // The server's ack_wait runs from its first delivery, which came after the publish.
    assert!(
        seen[1].at - published >= ack_wait,
        "delivered again {:?} after the publish, before ack_wait",
        seen[1].at - published
    );
    assert_eq!(seen[1].delivered, Some(2));
    assert_eq!(seen[1].stream_sequence, Some(seq));
    // The expired ack_wait counted: the second delivery is at the cap of 2 and goes to the dead
    // letter, then it is terminated.
    let dead = dead.until(1).await;
    assert_eq!(&dead[0].payload[..], order(11).as_bytes());
    until_settled(&js, "slow", seq, "terminated at the cap").await;
    running.stop().await.expect("a clean stop");
}

#[tokio::test]
async fn core_outcomes_bring_nothing_back() {
    let (server, client) = live_server().await;
    let wire = Recorder::start(&client, ["notices.sent"]).await;
    let handler = Scripted::new(|seen| {
        Some(match seen.id {
            1 => HandlerOutcome::ack(),
            2 => HandlerOutcome::drop(),
            _ => HandlerOutcome::retry(),
        })
    });
    let running = start_on(&server, |b| {
        b.include(CoreSubject::new("notices.sent").handler(handler.clone()));
    })
    .await;

    for id in 1..=3 {
        publish_core(&client, "notices.sent", &[], &order(id)).await;
    }
    let seen = handler.until_seen(3).await;
    assert!(seen.iter().all(|s| s.delivered.is_none() && s.attempt == 1));
    quiet_for(Duration::from_millis(500)).await;
    // A plain retry without a cap is at most once: no copy, nothing more on the wire.
    assert_eq!(handler.seen().len(), 3);
    assert_eq!(wire.messages().len(), 3);
    running.stop().await.expect("a clean stop");
}

#[tokio::test]
async fn a_queue_group_hands_each_core_message_to_one_member() {
    let (server, client) = live_server().await;
    let first = Scripted::always(HandlerOutcome::ack());
    let second = Scripted::always(HandlerOutcome::ack());
    let running_first = start_on(&server, |b| {
        b.include(
            CoreSubject::new("notices.sent")
                .queue_group("mailers")
                .handler(first.clone()),
        );
    })
    .await;
    let running_second = start_on(&server, |b| {
        b.include(
            CoreSubject::new("notices.sent")
                .queue_group("mailers")
                .handler(second.clone()),
        );
    })
    .await;

    for id in 1..=40 {
        publish_core(&client, "notices.sent", &[], &order(id)).await;
    }
    eventually(PATIENCE, "all 40 notices handled", || async {
        (first.seen().len() + second.seen().len() == 40).then_some(())
    })
    .await;
    quiet_for(Duration::from_millis(300)).await;
    let mut ids: Vec<u64> = first
        .seen()
        .iter()
        .chain(second.seen().iter())
        .map(|s| s.id)
        .collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        (1..=40).collect::<Vec<_>>(),
        "each notice exactly once"
    );
    assert!(
        !first.seen().is_empty() && !second.seen().is_empty(),
        "the server spreads a queue group's messages over its members"
    );
    running_first.stop().await.expect("a clean stop");
    running_second.stop().await.expect("a clean stop");
}

#[tokio::test]
async fn core_retry_after_publishes_a_copy_after_the_delay() {
    let (server, client) = live_server().await;
    let wire = Recorder::start(&client, ["notices.sent"]).await;
    let delay = Duration::from_millis(400);
    let handler = Scripted::first_then_ack(HandlerOutcome::retry_after(delay));
    let running = start_on(&server, |b| {
        b.include(CoreSubject::new("notices.sent").handler(handler.clone()));
    })
    .await;

    publish_core(&client, "notices.sent", &[("trace-id", "abc")], &order(5)).await;
    let seen = handler.until_seen(2).await;
    assert!(
        seen[1].at - seen[0].at >= delay,
        "the copy came before the delay"
    );
    assert_eq!(seen[1].attempt, 2);
    assert_eq!(seen[1].headers.get(RETRY_COUNT_HEADER), Some("1"));
    assert_eq!(seen[1].headers.get("trace-id"), Some("abc"));
    assert_eq!(seen[1].id, 5);
    quiet_for(Duration::from_millis(300)).await;
    assert_eq!(wire.messages().len(), 2, "the original and one copy");
    running.stop().await.expect("a clean stop");
}

#[tokio::test]
async fn a_graceful_stop_lets_the_handler_in_flight_settle_on_the_server() {
    let (server, _client, js) = jetstream_server().await;
    let handler = Scripted::always(HandlerOutcome::ack()).slow(Duration::from_millis(800));
    let running = start_on(&server, |b| {
        b.include(created("drain").handler(handler.clone()));
    })
    .await;

    let seq = publish_stored(&js, "orders.created", &order(21)).await;
    handler.until_seen(1).await;
    // The handler is still running: stop now.
    running.stop().await.expect("a clean stop");

    let info = consumer_info(&js, STREAM, "drain").await;
    assert_eq!(info.num_ack_pending, 0, "the settlement reached the server");
    assert_eq!(info.ack_floor.stream_sequence, seq);
}

#[tokio::test]
async fn a_stop_gives_back_what_was_pulled_but_not_started() {
    let (server, _client, js) = jetstream_server().await;
    let slow = Scripted::always(HandlerOutcome::ack()).slow(Duration::from_millis(600));
    // Two at once, so that a message waits in the client while two are handled.
    let running = start_on(&server, |b| {
        b.include(created("handover").handler(slow.clone()))
            .concurrency(std::num::NonZeroUsize::new(2).expect("not zero"));
    })
    .await;
    for id in 1..=6 {
        publish_stored(&js, "orders.created", &order(id)).await;
    }
    slow.until_seen(2).await;
    running.stop().await.expect("a clean stop");
    let handled = slow.seen().len();
    assert!(
        handled < 6,
        "every message was handled before the stop: {handled}"
    );

    // What the stopping instance received it handled; the rest go to the next instance at
    // once: nothing waits for the 30 s ack_wait (longer than the test's patience).
    let fast = Scripted::always(HandlerOutcome::ack());
    let running = start_on(&server, |b| {
        b.include(created("handover").handler(fast.clone()));
    })
    .await;
    let rest = fast.until_seen(6 - handled).await;
    let mut ids: Vec<u64> = slow.seen().iter().chain(&rest).map(|s| s.id).collect();
    ids.sort_unstable();
    assert_eq!(ids, [1, 2, 3, 4, 5, 6]);
    consumer_until(&js, STREAM, "handover", "all settled", |i| {
        i.num_ack_pending == 0 && i.num_pending == 0
    })
    .await;
    running.stop().await.expect("a clean stop");
}

#[tokio::test]
async fn a_drain_timeout_abandons_the_handler_and_leaves_the_message_to_the_server() {
    let (server, _client, js) = jetstream_server().await;
    let handler = Scripted::always(HandlerOutcome::ack()).slow(Duration::from_secs(5));
    let running = start_with(
        NatsBroker::new(server.url()),
        Env::new().with_drain_timeout(Duration::from_millis(300)),
        |b| {
            b.include(created("abandon").handler(handler.clone()));
        },
    )
    .await
    .expect("the app starts");

    publish_stored(&js, "orders.created", &order(22)).await;
    handler.until_seen(1).await;
    let err = running.stop().await.expect_err("the drain timed out");
    assert_eq!(err.kind(), ErrorKind::Shutdown);
    let info = consumer_info(&js, STREAM, "abandon").await;
    assert_eq!(
        info.num_ack_pending, 1,
        "nothing settled the abandoned delivery"
    );
}

#[tokio::test]
async fn a_stop_drops_pending_core_copies() {
    let (server, client) = live_server().await;
    let wire = Recorder::start(&client, ["notices.sent"]).await;
    let handler = Scripted::always(HandlerOutcome::retry_after(Duration::from_millis(1500)));
    let running = start_on(&server, |b| {
        b.include(CoreSubject::new("notices.sent").handler(handler.clone()));
    })
    .await;

    publish_core(&client, "notices.sent", &[], &order(30)).await;
    handler.until_seen(1).await;
    running.stop().await.expect("a clean stop");
    quiet_for(Duration::from_millis(2000)).await;
    assert_eq!(
        wire.messages().len(),
        1,
        "the pending copy was dropped with the process"
    );
}
