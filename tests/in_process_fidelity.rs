//! The emulation's fidelity, proven at the wire: every scenario below runs twice, against the
//! NATS emulated in the process (paused clock) and against a real nats-server (real clock, short
//! delays), through the same `Transport` calls the runtime makes. Delivered counts, stream and
//! consumer sequences, consumer counters and stream contents must be identical.

mod support;

use std::sync::Arc;
use std::time::Duration;

use ruststream::Headers;
use ruststream_nats::DeliverPolicy;
use ruststream_nats::testing::{ConsumerFacts, StoredMessage};
use ruststream_nats::transport::TransportErrorKind;
use ruststream_test_server::client::{nak_with, wait_until};
use support::fidelity::{ACK_WAIT, DELAY, PATIENCE, Pull, QUIET, Reply, Server, consumer, text};
use tokio::time::Instant;

/// Runs each scenario in process (paused clock) and live (real server, real clock).
macro_rules! both {
    ($($name:ident),* $(,)?) => {
        mod in_process {
            $(
                #[tokio::test(start_paused = true)]
                async fn $name() {
                    super::$name(&super::Server::in_process()).await;
                }
            )*
        }
        mod live {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(&super::Server::live().await).await;
                }
            )*
        }
    };
}

both!(
    ack_finishes_the_message,
    nak_delivers_again_at_once,
    nak_with_delay_holds_the_message,
    term_ends_the_message,
    ack_wait_expiry_delivers_again,
    progress_restarts_ack_wait,
    deliveries_carry_sequences_and_pending,
    a_redelivery_goes_before_new_messages,
    max_ack_pending_holds_new_messages_back,
    deliver_new_skips_what_the_stream_holds,
    deliver_last_starts_at_the_last_message,
    deliver_by_start_sequence,
    a_stream_stores_and_core_subscribers_still_get_it,
    headers_travel_with_the_message,
    core_subjects_fan_out_to_every_match,
    a_queue_group_gets_each_message_once,
    core_keeps_nothing_for_later_subscribers,
    a_stored_publish_without_a_stream_is_refused,
    consuming_a_missing_stream_is_refused,
);

const STREAM: &str = "ORDERS";
const DURABLE: &str = "worker";

/// Long enough for a server to have delivered again an unsettled message.
const PAST_ACK_WAIT: Duration = ACK_WAIT.saturating_add(Duration::from_millis(500));

async fn setup(server: &Server) {
    server.stream(STREAM, &["orders.>"]).await;
}

/// The stream holding one message, `one`, and a pull on it by [`DURABLE`].
async fn one_message_pulled(server: &Server) -> Pull {
    setup(server).await;
    assert_eq!(server.publish_stored("orders.placed", "one").await, 1);
    server.pull(STREAM, DURABLE, "orders.>").await
}

/// The counters of [`DURABLE`], as the server reports them.
async fn worker(server: &Server) -> ConsumerFacts {
    server.consumer_info(STREAM, DURABLE).await
}

// ---- settlement -------------------------------------------------------------------------------

async fn ack_finishes_the_message(server: &Server) {
    let mut pull = one_message_pulled(server).await;

    let m = pull.next().await;
    assert_eq!(text(&m), "one");
    assert_eq!(Reply::of(&m).counts(), (1, 1, 1));
    assert_eq!(worker(server).await, ConsumerFacts::new(1, 1, 1, 0, 0));

    server.settle(&m, "+ACK").await;
    pull.nothing_within(PAST_ACK_WAIT).await;
    assert_eq!(worker(server).await, ConsumerFacts::new(1, 1, 0, 0, 0));
}

async fn nak_delivers_again_at_once(server: &Server) {
    let mut pull = one_message_pulled(server).await;

    let first = pull.next().await;
    let naked = Instant::now();
    server.settle(&first, "-NAK").await;
    let again = pull.next().await;
    assert!(naked.elapsed() < ACK_WAIT, "a -NAK delivers again at once");
    assert_eq!(text(&again), "one");
    assert_eq!(Reply::of(&again).counts(), (2, 1, 2));
    assert_eq!(worker(server).await, ConsumerFacts::new(2, 1, 1, 1, 0));

    server.settle(&again, "+ACK").await;
    pull.nothing_within(QUIET).await;
    assert_eq!(worker(server).await, ConsumerFacts::new(2, 1, 0, 0, 0));
}

async fn nak_with_delay_holds_the_message(server: &Server) {
    let mut pull = one_message_pulled(server).await;

    let first = pull.next().await;
    let naked = Instant::now();
    server.settle(&first, &nak_with(DELAY)).await;
    pull.nothing_within(DELAY / 2).await;
    let again = pull.next().await;
    let waited = naked.elapsed();
    assert!(
        waited >= DELAY,
        "held for the delay; came back after {waited:?}"
    );
    assert!(
        waited < ACK_WAIT,
        "came back after the delay, not after ack_wait: {waited:?}"
    );
    assert_eq!(Reply::of(&again).counts(), (2, 1, 2));
    assert_eq!(worker(server).await, ConsumerFacts::new(2, 1, 1, 1, 0));
    server.settle(&again, "+ACK").await;
    pull.nothing_within(QUIET).await;
    assert_eq!(worker(server).await, ConsumerFacts::new(2, 1, 0, 0, 0));
}

async fn term_ends_the_message(server: &Server) {
    let mut pull = one_message_pulled(server).await;

    let m = pull.next().await;
    server.settle(&m, "+TERM").await;
    pull.nothing_within(PAST_ACK_WAIT).await;
    assert_eq!(worker(server).await, ConsumerFacts::new(1, 1, 0, 0, 0));
    assert_eq!(
        server.stream_messages(STREAM).await.len(),
        1,
        "the stream keeps it"
    );
}

async fn ack_wait_expiry_delivers_again(server: &Server) {
    let mut pull = one_message_pulled(server).await;

    let first = pull.next().await;
    let delivered_at = Instant::now();
    assert_eq!(Reply::of(&first).counts(), (1, 1, 1));

    let second = pull.next().await;
    assert!(delivered_at.elapsed() >= ACK_WAIT, "not before ack_wait");
    assert_eq!(Reply::of(&second).counts(), (2, 1, 2));
    assert_eq!(worker(server).await, ConsumerFacts::new(2, 1, 1, 1, 0));

    let third = pull.next().await;
    assert_eq!(Reply::of(&third).counts(), (3, 1, 3));
    server.settle(&third, "+ACK").await;
    pull.nothing_within(PAST_ACK_WAIT).await;
    assert_eq!(worker(server).await, ConsumerFacts::new(3, 1, 0, 0, 0));
}

async fn progress_restarts_ack_wait(server: &Server) {
    let mut pull = one_message_pulled(server).await;

    let m = pull.next().await;
    tokio::time::sleep(ACK_WAIT * 6 / 10).await;
    let progressed = Instant::now();
    server.settle(&m, "+WPI").await;
    // Past the first ack_wait, the message is still out.
    pull.nothing_within(ACK_WAIT * 7 / 10).await;
    let again = pull.next().await;
    assert!(
        progressed.elapsed() >= ACK_WAIT,
        "ack_wait counts from +WPI"
    );
    assert_eq!(Reply::of(&again).counts(), (2, 1, 2));
}

// ---- delivery order and sequences -------------------------------------------------------------

async fn deliveries_carry_sequences_and_pending(server: &Server) {
    setup(server).await;
    for (i, payload) in ["a", "b", "c"].into_iter().enumerate() {
        assert_eq!(
            server.publish_stored("orders.placed", payload).await,
            i as u64 + 1
        );
    }
    let mut pull = server.pull(STREAM, DURABLE, "orders.>").await;
    let mut seen = Vec::new();
    for _ in 0..3 {
        let m = pull.next().await;
        let r = Reply::of(&m);
        assert_eq!(r.stream, STREAM);
        assert_eq!(r.consumer, DURABLE);
        seen.push((
            text(&m),
            r.delivered,
            r.stream_seq,
            r.consumer_seq,
            r.pending,
        ));
        server.settle(&m, "+ACK").await;
    }
    assert_eq!(
        seen,
        [
            ("a".to_owned(), 1, 1, 1, 2),
            ("b".to_owned(), 1, 2, 2, 1),
            ("c".to_owned(), 1, 3, 3, 0),
        ]
    );
    pull.nothing_within(QUIET).await;
    assert_eq!(worker(server).await, ConsumerFacts::new(3, 3, 0, 0, 0));
}

async fn a_redelivery_goes_before_new_messages(server: &Server) {
    setup(server).await;
    server.publish_stored("orders.placed", "a").await;
    let mut spec = consumer(STREAM, Some(DURABLE), "orders.>");
    spec.max_ack_pending = Some(1);
    let mut pull = server.pull_with(spec).await;

    let a = pull.next().await;
    server.publish_stored("orders.placed", "b").await;
    server.settle(&a, "-NAK").await;
    let again = pull.next().await;
    assert_eq!(text(&again), "a");
    assert_eq!(Reply::of(&again).counts(), (2, 1, 2));
    server.settle(&again, "+ACK").await;
    let b = pull.next().await;
    assert_eq!(text(&b), "b");
    assert_eq!(Reply::of(&b).counts(), (1, 2, 3));
    server.settle(&b, "+ACK").await;
    pull.nothing_within(QUIET).await;
    assert_eq!(worker(server).await, ConsumerFacts::new(3, 2, 0, 0, 0));
}

async fn max_ack_pending_holds_new_messages_back(server: &Server) {
    setup(server).await;
    server.publish_stored("orders.placed", "a").await;
    server.publish_stored("orders.placed", "b").await;
    let mut spec = consumer(STREAM, Some(DURABLE), "orders.>");
    spec.max_ack_pending = Some(1);
    let mut pull = server.pull_with(spec).await;

    let a = pull.next().await;
    assert_eq!(text(&a), "a");
    pull.nothing_within(QUIET).await;
    assert_eq!(worker(server).await, ConsumerFacts::new(1, 1, 1, 0, 1));
    server.settle(&a, "+ACK").await;
    let b = pull.next().await;
    assert_eq!(text(&b), "b");
    assert_eq!(Reply::of(&b).counts(), (1, 2, 2));
}

async fn deliver_new_skips_what_the_stream_holds(server: &Server) {
    setup(server).await;
    server.publish_stored("orders.placed", "old").await;
    server.publish_stored("orders.placed", "older").await;
    let mut spec = consumer(STREAM, Some(DURABLE), "orders.>");
    spec.deliver_policy = DeliverPolicy::New;
    let mut pull = server.pull_with(spec).await;
    pull.nothing_within(QUIET).await;
    assert_eq!(worker(server).await, ConsumerFacts::new(0, 2, 0, 0, 0));

    server.publish_stored("orders.placed", "new").await;
    let m = pull.next().await;
    assert_eq!(text(&m), "new");
    assert_eq!(Reply::of(&m).counts(), (1, 3, 1));
}

async fn deliver_last_starts_at_the_last_message(server: &Server) {
    setup(server).await;
    for payload in ["a", "b", "c"] {
        server.publish_stored("orders.placed", payload).await;
    }
    let mut spec = consumer(STREAM, Some(DURABLE), "orders.>");
    spec.deliver_policy = DeliverPolicy::Last;
    let mut pull = server.pull_with(spec).await;
    let m = pull.next().await;
    assert_eq!(text(&m), "c");
    assert_eq!(Reply::of(&m).counts(), (1, 3, 1));
    server.settle(&m, "+ACK").await;
    pull.nothing_within(QUIET).await;
}

async fn deliver_by_start_sequence(server: &Server) {
    setup(server).await;
    for payload in ["a", "b", "c"] {
        server.publish_stored("orders.placed", payload).await;
    }
    let mut spec = consumer(STREAM, Some(DURABLE), "orders.>");
    spec.deliver_policy = DeliverPolicy::ByStartSequence(2);
    let mut pull = server.pull_with(spec).await;
    let b = pull.next().await;
    let c = pull.next().await;
    assert_eq!((text(&b), text(&c)), ("b".to_owned(), "c".to_owned()));
    assert_eq!(Reply::of(&b).counts(), (1, 2, 1));
    assert_eq!(Reply::of(&c).pending, 0);
}

// ---- streams and Core -------------------------------------------------------------------------

async fn a_stream_stores_and_core_subscribers_still_get_it(server: &Server) {
    setup(server).await;
    let watcher = server.record("orders.*").await;
    server.publish("orders.placed", "core").await;
    server.publish_stored("orders.placed", "stored").await;
    server.publish("elsewhere.placed", "not stored").await;

    assert_eq!(watcher.wait_for(2).await, ["core", "stored"]);
    let stored = server.stream_messages(STREAM).await;
    assert_eq!(
        stored,
        [
            StoredMessage::new(1, "orders.placed", Headers::new(), "core"),
            StoredMessage::new(2, "orders.placed", Headers::new(), "stored"),
        ]
    );
}

async fn headers_travel_with_the_message(server: &Server) {
    setup(server).await;
    let headers: Headers = [("a-first", "1"), ("b-second", "2")].into_iter().collect();
    server
        .wire()
        .publish_stored(Arc::from("orders.placed"), headers.clone(), "h".into())
        .await
        .expect("stored publish");
    let mut pull = server.pull(STREAM, DURABLE, "orders.>").await;
    let m = pull.next().await;
    assert_eq!(m.headers.get("a-first"), Some("1"));
    assert_eq!(m.headers.get("b-second"), Some("2"));
    let stored = server.stream_messages(STREAM).await;
    assert_eq!(stored[0].headers, headers);
}

async fn core_subjects_fan_out_to_every_match(server: &Server) {
    let exact = server.record("a.b").await;
    let star = server.record("a.*").await;
    let tail = server.record("a.>").await;
    let front = server.record("*.b").await;
    let other = server.record("x.y").await;

    server.publish("a.b", "1").await;
    server.publish("a.b.c", "2").await;
    server.publish("a", "3").await;

    assert_eq!(tail.wait_for(2).await, ["1", "2"]);
    assert_eq!(exact.payloads(), ["1"]);
    assert_eq!(star.payloads(), ["1"]);
    assert_eq!(front.payloads(), ["1"]);
    assert!(other.payloads().is_empty());
}

async fn a_queue_group_gets_each_message_once(server: &Server) {
    let one = server.record_in("jobs.*", Some("workers")).await;
    let two = server.record_in("jobs.*", Some("workers")).await;
    let everyone = server.record("jobs.*").await;

    for i in 0..10 {
        server.publish("jobs.run", &i.to_string()).await;
    }
    assert_eq!(everyone.wait_for(10).await.len(), 10);
    wait_until(PATIENCE, "ten messages across the group", || {
        one.messages().len() + two.messages().len() >= 10
    })
    .await;
    tokio::time::sleep(QUIET).await;
    let mut got: Vec<u32> = one
        .payloads()
        .into_iter()
        .chain(two.payloads())
        .map(|p| p.parse().expect("a number"))
        .collect();
    got.sort_unstable();
    assert_eq!(
        got,
        (0..10).collect::<Vec<_>>(),
        "each message to one member"
    );
}

async fn core_keeps_nothing_for_later_subscribers(server: &Server) {
    server.publish("news.today", "missed").await;
    let late = server.record("news.*").await;
    server.publish("news.today", "seen").await;
    assert_eq!(late.wait_for(1).await, ["seen"]);
}

async fn a_stored_publish_without_a_stream_is_refused(server: &Server) {
    setup(server).await;
    let err = server
        .wire()
        .publish_stored(Arc::from("nowhere.placed"), Headers::new(), "x".into())
        .await
        .expect_err("no stream stores the subject");
    assert_eq!(err.kind, TransportErrorKind::NoStream);
}

async fn consuming_a_missing_stream_is_refused(server: &Server) {
    let Err(err) = server
        .wire()
        .consume(consumer("MISSING", Some(DURABLE), "missing.>"))
        .await
    else {
        panic!("a consumer on a missing stream");
    };
    assert_eq!(err.kind, TransportErrorKind::StreamNotFound);
}
