//! The in-process NATS through the `Transport` trait, as the runtime uses it, under a paused
//! clock: Core fan-out, wildcards and queue groups; streams; pull consumers and every
//! acknowledgement; and the inspection a test uses. (`in_process_fidelity.rs` runs the shared
//! scenarios against a real server too.)

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use ruststream::Headers;
use ruststream_nats::DeliverPolicy;
use ruststream_nats::testing::{ConsumerFacts, InProcessNats, StoredMessage};
use ruststream_nats::transport::{
    ConsumerSpec, CorePubSub, JetStreamPublish, MessageStream, PullConsumer, RawMessage,
    StreamAdmin, StreamSpec, TransportErrorKind,
};
use tokio::time::Instant;

const ACK_WAIT: Duration = Duration::from_secs(30);

fn spec(durable: Option<&str>, filter: &str) -> ConsumerSpec {
    ConsumerSpec {
        stream: "PAYMENTS".into(),
        durable: durable.map(str::to_owned),
        filter_subject: filter.into(),
        ack_wait: ACK_WAIT,
        max_ack_pending: None,
        deliver_policy: DeliverPolicy::All,
        batch: 8,
        expires: Duration::from_secs(30),
    }
}

async fn nats_with_stream() -> InProcessNats {
    let nats = InProcessNats::new();
    nats.declare_stream(StreamSpec {
        name: "PAYMENTS".into(),
        subjects: vec!["payments.>".into()],
    })
    .await
    .expect("declare");
    nats
}

async fn publish(nats: &InProcessNats, subject: &str, payload: &str) {
    nats.publish(
        Arc::from(subject),
        Headers::new(),
        payload.to_owned().into(),
    )
    .await
    .expect("publish");
}

async fn ack(nats: &InProcessNats, m: &RawMessage, wire: &str) {
    let reply = m.reply.as_ref().expect("an ack subject");
    nats.acknowledge(reply, wire.to_owned().into())
        .await
        .expect("ack");
}

/// A message ready now (without time passing), if any.
async fn ready(feed: &mut MessageStream) -> Option<RawMessage> {
    for _ in 0..4 {
        tokio::task::yield_now().await;
    }
    futures::FutureExt::now_or_never(feed.next())
        .flatten()
        .map(|r| r.expect("a message"))
}

/// `(delivered, stream seq, consumer seq, pending)` of an ack subject.
fn facts(m: &RawMessage) -> (u64, u64, u64, u64) {
    let reply = m.reply.as_deref().expect("an ack subject");
    let t: Vec<&str> = reply.split('.').collect();
    assert_eq!(t.len(), 9, "v1 ack subject: {reply}");
    assert_eq!(&t[..2], ["$JS", "ACK"]);
    let n = |i: usize| t[i].parse::<u64>().expect("a number");
    (n(4), n(5), n(6), n(8))
}

fn text(m: &RawMessage) -> String {
    String::from_utf8_lossy(&m.payload).into_owned()
}

// ---- Core -------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn core_publish_reaches_every_matching_subscription() {
    let nats = InProcessNats::new();
    let (mut exact, _s1) = nats.subscribe("a.b".into(), None).await.expect("sub");
    let (mut star, _s2) = nats.subscribe("a.*".into(), None).await.expect("sub");
    let (mut tail, _s3) = nats.subscribe("a.>".into(), None).await.expect("sub");
    let (mut none, _s4) = nats.subscribe("b.>".into(), None).await.expect("sub");

    publish(&nats, "a.b", "1").await;
    publish(&nats, "a.b.c", "2").await;

    assert_eq!(ready(&mut exact).await.map(|m| text(&m)), Some("1".into()));
    assert_eq!(ready(&mut star).await.map(|m| text(&m)), Some("1".into()));
    assert!(ready(&mut star).await.is_none());
    assert_eq!(ready(&mut tail).await.map(|m| text(&m)), Some("1".into()));
    assert_eq!(ready(&mut tail).await.map(|m| text(&m)), Some("2".into()));
    assert!(ready(&mut none).await.is_none());
}

#[tokio::test(start_paused = true)]
async fn a_queue_group_takes_turns() {
    let nats = InProcessNats::new();
    let (mut one, _s1) = nats
        .subscribe("jobs.*".into(), Some("workers".into()))
        .await
        .expect("sub");
    let (mut two, _s2) = nats
        .subscribe("jobs.*".into(), Some("workers".into()))
        .await
        .expect("sub");
    let (mut all, _s3) = nats.subscribe("jobs.*".into(), None).await.expect("sub");
    for i in 0..4 {
        publish(&nats, "jobs.run", &i.to_string()).await;
    }
    let mut a = Vec::new();
    while let Some(m) = ready(&mut one).await {
        a.push(text(&m));
    }
    let mut b = Vec::new();
    while let Some(m) = ready(&mut two).await {
        b.push(text(&m));
    }
    assert_eq!(
        (a, b),
        (
            vec!["0".to_owned(), "2".into()],
            vec!["1".to_owned(), "3".into()]
        )
    );
    let mut everyone = 0;
    while ready(&mut all).await.is_some() {
        everyone += 1;
    }
    assert_eq!(everyone, 4);
}

#[tokio::test(start_paused = true)]
async fn core_keeps_nothing_and_a_stopped_subscription_gets_nothing() {
    let nats = InProcessNats::new();
    publish(&nats, "news.today", "missed").await;
    let (mut feed, stop) = nats.subscribe("news.*".into(), None).await.expect("sub");
    assert!(ready(&mut feed).await.is_none());
    publish(&nats, "news.today", "seen").await;
    stop.stop().await;
    publish(&nats, "news.today", "after stop").await;
    assert_eq!(
        ready(&mut feed).await.map(|m| text(&m)),
        Some("seen".into())
    );
    assert!(feed.next().await.is_none(), "the feed ends after a stop");
    // The history still saw every publish.
    assert_eq!(nats.published("news.today").len(), 3);
}

#[tokio::test(start_paused = true)]
async fn invalid_subjects_and_names_are_refused() {
    let nats = InProcessNats::new();
    for subject in ["", "a..b", "a.*", "a.>", "a b"] {
        let err = nats
            .publish(Arc::from(subject), Headers::new(), "x".into())
            .await
            .expect_err(subject);
        assert_eq!(err.kind, TransportErrorKind::Invalid, "{subject}");
    }
    let Err(err) = nats.subscribe("a.>.b".into(), None).await else {
        panic!("`>` in the middle");
    };
    assert_eq!(err.kind, TransportErrorKind::Invalid);
    let err = nats
        .declare_stream(StreamSpec {
            name: "BAD.NAME".into(),
            subjects: vec!["x".into()],
        })
        .await
        .expect_err("a dot in a stream name");
    assert_eq!(err.kind, TransportErrorKind::Invalid);
}

// ---- streams ----------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_stream_stores_what_its_subjects_match_and_core_still_gets_it() {
    let nats = nats_with_stream().await;
    let (mut core, _s) = nats
        .subscribe("payments.*".into(), None)
        .await
        .expect("sub");
    let headers: Headers = [("x-id", "7")].into_iter().collect();
    let seq = nats
        .publish_stored(
            Arc::from("payments.authorized"),
            headers.clone(),
            "p1".into(),
        )
        .await
        .expect("stored");
    assert_eq!(seq, 1);
    publish(&nats, "payments.captured", "p2").await;
    publish(&nats, "orders.placed", "o1").await;

    assert_eq!(
        nats.stream_messages("PAYMENTS"),
        [
            StoredMessage::new(1, "payments.authorized", headers, "p1"),
            StoredMessage::new(2, "payments.captured", Headers::new(), "p2"),
        ]
    );
    assert_eq!(ready(&mut core).await.map(|m| text(&m)), Some("p1".into()));
    assert_eq!(ready(&mut core).await.map(|m| text(&m)), Some("p2".into()));
    let err = nats
        .publish_stored(Arc::from("orders.placed"), Headers::new(), "o2".into())
        .await
        .expect_err("no stream");
    assert_eq!(err.kind, TransportErrorKind::NoStream);
    assert!(nats.stream_exists("PAYMENTS").await.expect("exists"));
    assert!(!nats.stream_exists("ORDERS").await.expect("exists"));
}

#[tokio::test(start_paused = true)]
async fn streams_do_not_share_subjects_and_a_declaration_adds_subjects() {
    let nats = nats_with_stream().await;
    let err = nats
        .declare_stream(StreamSpec {
            name: "OTHER".into(),
            subjects: vec!["payments.authorized".into()],
        })
        .await
        .expect_err("overlapping subjects");
    assert_eq!(err.kind, TransportErrorKind::Other);
    nats.declare_stream(StreamSpec {
        name: "PAYMENTS".into(),
        subjects: vec!["payments.authorized".into(), "refunds.*".into()],
    })
    .await
    .expect("update");
    // `payments.>` already stores `payments.authorized`; nothing is removed.
    assert_eq!(
        nats.stream_subjects("PAYMENTS"),
        Some(vec!["payments.>".into(), "refunds.*".into()])
    );
    assert_eq!(nats.stream_names(), ["PAYMENTS"]);
}

// ---- pull consumers ---------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn every_acknowledgement_does_what_the_server_does() {
    let nats = nats_with_stream().await;
    for p in ["ack", "nak", "delay", "term", "silent"] {
        publish(&nats, "payments.authorized", p).await;
    }
    let (mut feed, _stop) = nats
        .consume(spec(Some("capture"), "payments.authorized"))
        .await
        .expect("consume");
    let mut first = Vec::new();
    for _ in 0..5 {
        first.push(ready(&mut feed).await.expect("a first delivery"));
    }
    assert_eq!(
        first.iter().map(facts).collect::<Vec<_>>(),
        [
            (1, 1, 1, 4),
            (1, 2, 2, 3),
            (1, 3, 3, 2),
            (1, 4, 4, 1),
            (1, 5, 5, 0)
        ]
    );
    let start = Instant::now();
    ack(&nats, &first[0], "+ACK").await;
    ack(&nats, &first[1], "-NAK").await;
    ack(&nats, &first[2], r#"-NAK {"delay": 10000000000}"#).await;
    ack(&nats, &first[3], "+TERM").await;

    // -NAK: at once, delivered + 1, same stream sequence, a new consumer sequence.
    let nak = ready(&mut feed).await.expect("the -NAK comes back at once");
    assert_eq!((text(&nak), facts(&nak)), ("nak".into(), (2, 2, 6, 0)));
    assert!(ready(&mut feed).await.is_none());
    assert_eq!(
        nats.consumer_info("PAYMENTS", "capture"),
        Some(ConsumerFacts::new(6, 5, 3, 1, 0))
    );
    ack(&nats, &nak, "+ACK").await;

    // The delayed -NAK comes back after its 10 s, and not before.
    let delayed = feed.next().await.expect("a delivery").expect("ok");
    assert_eq!(start.elapsed(), Duration::from_secs(10));
    assert_eq!(
        (text(&delayed), facts(&delayed)),
        ("delay".into(), (2, 3, 7, 0))
    );
    ack(&nats, &delayed, "+ACK").await;

    // The silent one comes back when its ack_wait runs out, 30 s after its delivery.
    let silent = feed.next().await.expect("a delivery").expect("ok");
    assert_eq!(start.elapsed(), ACK_WAIT);
    assert_eq!(
        (text(&silent), facts(&silent)),
        ("silent".into(), (2, 5, 8, 0))
    );
    ack(&nats, &silent, "+ACK").await;

    // +ACK and +TERM: never again.
    tokio::time::sleep(ACK_WAIT * 3).await;
    assert!(ready(&mut feed).await.is_none());
    assert_eq!(
        nats.consumer_info("PAYMENTS", "capture"),
        Some(ConsumerFacts::new(8, 5, 0, 0, 0))
    );
    assert_eq!(
        nats.acknowledgements("PAYMENTS", "capture"),
        [
            "+ACK",
            "-NAK",
            r#"-NAK {"delay": 10000000000}"#,
            "+TERM",
            "+ACK",
            "+ACK",
            "+ACK"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_thirty_second_delay_takes_no_wall_time() {
    let nats = nats_with_stream().await;
    publish(&nats, "payments.authorized", "busy").await;
    let (mut feed, _stop) = nats
        .consume(spec(Some("capture"), "payments.authorized"))
        .await
        .expect("consume");
    let wall = std::time::Instant::now();
    let clock = Instant::now();
    for delivered in 1..=5 {
        let m = feed.next().await.expect("a delivery").expect("ok");
        assert_eq!(facts(&m).0, delivered);
        ack(&nats, &m, r#"-NAK {"delay": 30000000000}"#).await;
    }
    assert_eq!(clock.elapsed(), Duration::from_secs(4 * 30));
    assert!(wall.elapsed() < Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn ack_wait_expiry_and_progress() {
    let nats = nats_with_stream().await;
    publish(&nats, "payments.authorized", "slow").await;
    let (mut feed, _stop) = nats
        .consume(spec(Some("capture"), "payments.authorized"))
        .await
        .expect("consume");
    let start = Instant::now();
    let m = ready(&mut feed).await.expect("delivered");
    assert_eq!(nats.next_deadline(), Some(start + ACK_WAIT));
    assert_eq!(nats.in_flight(), 1);

    tokio::time::sleep(Duration::from_secs(20)).await;
    ack(&nats, &m, "+WPI").await;
    assert_eq!(nats.next_deadline(), Some(start + Duration::from_secs(50)));
    let again = feed.next().await.expect("a delivery").expect("ok");
    assert_eq!(start.elapsed(), Duration::from_secs(50));
    assert_eq!(facts(&again), (2, 1, 2, 0));
    assert_eq!(
        nats.consumer_info("PAYMENTS", "capture"),
        Some(ConsumerFacts::new(2, 1, 1, 1, 0))
    );
    // A late +ACK from the first delivery still settles the message.
    ack(&nats, &m, "+ACK").await;
    assert_eq!(nats.in_flight(), 0);
    assert_eq!(nats.next_deadline(), None);
}

#[tokio::test(start_paused = true)]
async fn max_ack_pending_and_the_pull_batch_bound_deliveries() {
    let nats = nats_with_stream().await;
    for i in 0..5 {
        publish(&nats, "payments.authorized", &i.to_string()).await;
    }
    let mut s = spec(Some("capture"), "payments.authorized");
    s.max_ack_pending = Some(2);
    let (mut feed, _stop) = nats.consume(s).await.expect("consume");
    let a = ready(&mut feed).await.expect("first");
    let b = ready(&mut feed).await.expect("second");
    assert!(ready(&mut feed).await.is_none(), "max_ack_pending reached");
    assert_eq!(
        nats.consumer_info("PAYMENTS", "capture"),
        Some(ConsumerFacts::new(2, 2, 2, 0, 3))
    );
    ack(&nats, &a, "+ACK").await;
    let c = ready(&mut feed).await.expect("third after an ack");
    assert_eq!(text(&c), "2");
    drop((b, c));

    // A batch of 1 hands over one message until the reader takes it.
    let mut s = spec(Some("audit"), "payments.authorized");
    s.batch = 1;
    let (mut feed, _stop) = nats.consume(s).await.expect("consume");
    assert_eq!(
        nats.consumer_info("PAYMENTS", "audit").map(|f| f.delivered),
        Some(1)
    );
    let _first = ready(&mut feed).await.expect("first");
    assert_eq!(
        nats.consumer_info("PAYMENTS", "audit").map(|f| f.delivered),
        Some(2)
    );
}

#[tokio::test(start_paused = true)]
async fn a_durable_is_shared_and_kept() {
    let nats = nats_with_stream().await;
    let mut s = spec(Some("capture"), "payments.authorized");
    s.batch = 1;
    let (mut one, stop_one) = nats.consume(s.clone()).await.expect("consume");
    let (mut two, _stop_two) = nats.consume(s.clone()).await.expect("consume");
    for i in 0..4 {
        publish(&nats, "payments.authorized", &i.to_string()).await;
    }
    let mut got = Vec::new();
    for _ in 0..2 {
        for feed in [&mut one, &mut two] {
            let m = ready(feed).await.expect("a delivery");
            got.push(text(&m));
            ack(&nats, &m, "+ACK").await;
        }
    }
    got.sort();
    assert_eq!(got, ["0", "1", "2", "3"]);
    stop_one.stop().await;
    assert_eq!(nats.consumer_names("PAYMENTS"), ["capture"]);

    // A changed ack_wait updates the durable; a changed filter is a conflict.
    let mut longer = s.clone();
    longer.ack_wait = Duration::from_secs(90);
    let _updated = nats.consume(longer).await.expect("an update");
    let mut other = s;
    other.filter_subject = "payments.captured".into();
    let Err(err) = nats.consume(other).await else {
        panic!("a conflicting durable");
    };
    assert_eq!(err.kind, TransportErrorKind::ConsumerConflict);
}

#[tokio::test(start_paused = true)]
async fn an_ephemeral_consumer_goes_away_with_its_reader() {
    let nats = nats_with_stream().await;
    publish(&nats, "payments.authorized", "x").await;
    let (mut feed, stop) = nats
        .consume(spec(None, "payments.>"))
        .await
        .expect("consume");
    let m = ready(&mut feed).await.expect("a delivery");
    let names = nats.consumer_names("PAYMENTS");
    assert_eq!(names.len(), 1);
    assert!(m.reply.as_deref().is_some_and(|r| r.contains(&names[0])));
    stop.stop().await;
    assert!(nats.consumer_names("PAYMENTS").is_empty());
}

#[tokio::test(start_paused = true)]
async fn deliver_policies_pick_the_first_message() {
    let nats = nats_with_stream().await;
    for (subject, p) in [
        ("payments.a", "a1"),
        ("payments.b", "b1"),
        ("payments.a", "a2"),
        ("payments.b", "b2"),
        ("payments.c", "c1"),
    ] {
        publish(&nats, subject, p).await;
    }
    let cases = [
        (DeliverPolicy::All, vec!["a1", "b1", "a2", "b2", "c1"]),
        (DeliverPolicy::New, vec![]),
        (DeliverPolicy::Last, vec!["c1"]),
        (DeliverPolicy::LastPerSubject, vec!["a2", "b2", "c1"]),
        (DeliverPolicy::ByStartSequence(4), vec!["b2", "c1"]),
    ];
    for (i, (policy, expected)) in cases.into_iter().enumerate() {
        let mut s = spec(Some(&format!("c{i}")), "payments.>");
        s.deliver_policy = policy;
        let (mut feed, _stop) = nats.consume(s).await.expect("consume");
        let mut got = Vec::new();
        while let Some(m) = ready(&mut feed).await {
            got.push(text(&m));
        }
        assert_eq!(got, expected, "{policy:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn consuming_needs_a_stream_that_stores_the_filter() {
    let nats = nats_with_stream().await;
    let mut missing = spec(Some("x"), "payments.>");
    missing.stream = "MISSING".into();
    let Err(err) = nats.consume(missing).await else {
        panic!("no stream");
    };
    assert_eq!(err.kind, TransportErrorKind::StreamNotFound);
    let Err(err) = nats.consume(spec(Some("x"), "orders.>")).await else {
        panic!("a filter the stream does not store");
    };
    assert_eq!(err.kind, TransportErrorKind::Invalid);
}

#[tokio::test(start_paused = true)]
async fn the_history_records_every_publish_in_order() {
    let nats = nats_with_stream().await;
    publish(&nats, "payments.authorized", "1").await;
    publish(&nats, "orders.placed", "2").await;
    let (mut feed, _stop) = nats
        .consume(spec(Some("capture"), "payments.authorized"))
        .await
        .expect("consume");
    let m = ready(&mut feed).await.expect("a delivery");
    ack(&nats, &m, "+ACK").await;
    let all: Vec<String> = nats.published(">").iter().map(text).collect();
    assert_eq!(all, ["1", "2", "+ACK"]);
    assert_eq!(nats.published("orders.*").len(), 1);
    assert_eq!(nats.published("$JS.ACK.>").len(), 1);
}
