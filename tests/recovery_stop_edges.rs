//! What a graceful stop and a bounded subscription must not cost, against a real nats-server:
//!
//! - a stop does not spend a message's attempt: deliveries an instance already received are
//!   handled by it, not released with `-NAK` (the server counts a release as a delivery, so
//!   under `max_attempts(1)` the next instance would terminate them unhandled), nor does it
//!   with `.by_key(..)` lanes, whose waiting deliveries run through the drain;
//! - `.subscription_capacity(n)` bounds Core subscriptions only: a JetStream registration's pull
//!   is not throttled by it (no drop, no redelivery), and a Core subscription's drops are
//!   reported (a warning and `ruststream_slow_consumer_dropped_total`).

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroUsize;
use std::time::Duration;

use ruststream::HandlerOutcome;
use ruststream::telemetry;
use ruststream_nats::{CoreSubject, JetStreamSubject, NatsBroker};
use support::nats::{
    NatsServer, PATIENCE, Recorder, STREAM, Scripted, attempts, eventually, jetstream_server,
    order, publish_stored, start, until_settled,
};
use support::security::capture;

/// The stream sequence, the server's delivery count and the payload of each settlement sent
/// for `consumer` (read from the acknowledgement subject: the v1 form, or v2 with a domain and
/// an account hash).
fn settlements(wire: &Recorder, consumer: &str) -> Vec<(u64, u64, String)> {
    wire.matching(&format!("$JS.ACK.{STREAM}.{consumer}.>"))
        .iter()
        .map(|message| {
            let tokens: Vec<&str> = message.subject.split('.').collect();
            let t = if tokens.len() == 9 {
                &tokens[2..]
            } else {
                &tokens[4..]
            };
            let n = |s: &str| s.parse::<u64>().expect("a number in the ack subject");
            (
                n(t[3]),
                n(t[2]),
                String::from_utf8_lossy(&message.payload).into_owned(),
            )
        })
        .collect()
}

/// What the handler of the stop tests answers order `id` (`None`: it panics): half are
/// retried (`retry`, `retry_after`) or panic, which at `max_attempts(1)` without a dead letter
/// terminates them; the rest are acknowledged.
fn answer(id: u64) -> Option<HandlerOutcome> {
    match id % 6 {
        0 => Some(HandlerOutcome::retry()),
        3 => Some(HandlerOutcome::retry_after(Duration::from_millis(50))),
        5 => None,
        _ => Some(HandlerOutcome::ack()),
    }
}

fn acknowledged(id: u64) -> bool {
    !matches!(id % 6, 0 | 3 | 5)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_does_not_spend_an_attempt_of_what_it_received() {
    stop_and_start_again("edges", 2, false).await;
}

/// The same with `.by_key(..)` lanes: the deliveries waiting behind a running one of their key
/// (and those the pull held) are run in their lanes during the drain, not released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_runs_what_waits_in_a_lane() {
    stop_and_start_again("laned", 4, true).await;
}

/// 60 stored orders under `max_attempts(1)` without a dead letter, on consumer `consumer` with
/// `concurrency` handlers (in `.by_key(..)` lanes when `lanes`): one instance is stopped with
/// most of them pulled and not started, a second one takes over. Every order's handler ran, and
/// the server saw one delivery per order, settled as its handler's answer calls for.
async fn stop_and_start_again(consumer: &'static str, concurrency: usize, lanes: bool) {
    const N: u64 = 60;
    println!("running against {}", NatsServer::version());
    let (server, client, js) = jetstream_server().await;
    let wire = Recorder::start(&client, [format!("$JS.ACK.{STREAM}.{consumer}.>")]).await;
    for id in 1..=N {
        publish_stored(&js, "orders.created", order(id)).await;
    }

    let handler = Scripted::new(|seen| answer(seen.id)).slow(Duration::from_millis(20));
    let mount = |b: &mut ruststream::Scope<()>| {
        let registration = b.include(
            JetStreamSubject::new("orders.created", STREAM)
                .durable(consumer)
                .handler(handler.clone()),
        );
        registration
            .max_attempts(attempts(1))
            .concurrency(NonZeroUsize::new(concurrency).expect("not zero"));
        if lanes {
            registration.by_key(|order: &support::nats::Order| order.id % 3);
        }
    };
    let first = start(NatsBroker::new(server.url()), mount)
        .await
        .expect("the first instance starts");
    // Stopped with most of the orders pulled into the client and not started.
    handler.until_seen(10).await;
    first.stop().await.expect("a drained stop");
    let handled_by_first = handler.seen().len();

    let second = start(NatsBroker::new(server.url()), mount)
        .await
        .expect("the second instance starts");
    let info = until_settled(&js, consumer, N, "every order settled").await;
    second.stop().await.expect("a drained stop");

    // The handler ran for every order, each once (a retry at the cap is not delivered again).
    let seen = handler.seen();
    let ids: BTreeSet<u64> = seen.iter().map(|s| s.id).collect();
    assert_eq!(
        ids,
        (1..=N).collect(),
        "the handler ran for every order (the first instance handled {handled_by_first})"
    );
    // What the server saw: one delivery per order, and each order's last settlement is the
    // one its handler's answer calls for, sent for its first delivery (a release at the stop
    // would have been a second delivery, terminated by the second instance unhandled).
    assert_eq!(
        info.num_redelivered, 0,
        "no order delivered twice: {info:?}"
    );
    assert_eq!(info.delivered.consumer_sequence, N, "{info:?}");
    let settled = eventually(PATIENCE, "a settlement per order on the wire", || {
        let all = settlements(&wire, consumer);
        async move { (all.len() as u64 >= N).then_some(all) }
    })
    .await;
    let mut last: BTreeMap<u64, (u64, String)> = BTreeMap::new();
    for (sequence, delivered, payload) in &settled {
        assert!(
            !payload.starts_with("-NAK"),
            "nothing released at the stop: {settled:?}"
        );
        last.insert(*sequence, (*delivered, payload.clone()));
    }
    for id in 1..=N {
        let (delivered, payload) = last.get(&id).expect("a settlement per order");
        assert_eq!(*delivered, 1, "order {id} settled at its first delivery");
        let expected = if acknowledged(id) { "+ACK" } else { "+TERM" };
        assert!(
            payload.starts_with(expected),
            "order {id}: {payload}, expected {expected}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_subscription_capacity_does_not_throttle_a_pull() {
    const N: u64 = 3_000;
    const CONSUMER: &str = "bounded";
    println!("running against {}", NatsServer::version());
    let (server, client, js) = jetstream_server().await;
    let wire = Recorder::start(&client, [format!("$JS.ACK.{STREAM}.{CONSUMER}.>")]).await;
    for id in 1..=N {
        publish_stored(&js, "orders.created", order(id)).await;
    }
    // Every hundredth order is retried once: the only redeliveries there may be.
    let handler = Scripted::new(|seen| {
        Some(if seen.id % 100 == 0 && seen.delivered == Some(1) {
            HandlerOutcome::retry()
        } else {
            HandlerOutcome::ack()
        })
    });
    let app = start(
        NatsBroker::new(server.url()).subscription_capacity(16),
        |b| {
            b.include(
                JetStreamSubject::new("orders.created", STREAM)
                    .durable(CONSUMER)
                    .handler(handler.clone()),
            )
            .concurrency(NonZeroUsize::new(8).expect("not zero"));
        },
    )
    .await
    .expect("the app starts");
    let info = until_settled(&js, CONSUMER, N, "every order acknowledged").await;
    app.stop().await.expect("a drained stop");

    // One delivery per order, and one more per retry: nothing dropped and delivered again.
    let retried = N / 100;
    assert_eq!(info.num_redelivered, 0, "{info:?}");
    assert_eq!(
        info.delivered.consumer_sequence,
        N + retried,
        "only the retried orders came again: {info:?}"
    );
    let ids: BTreeSet<u64> = handler.seen().iter().map(|s| s.id).collect();
    assert_eq!(ids.len() as u64, N, "every order handled");
    let acks = eventually(PATIENCE, "every settlement on the wire", || {
        let all = settlements(&wire, CONSUMER);
        async move { (all.len() as u64 >= N + retried).then_some(all) }
    })
    .await;
    let naks = acks
        .iter()
        .filter(|(_, _, p)| p.starts_with("-NAK"))
        .count() as u64;
    assert_eq!(naks, retried, "a -NAK per retry, nothing else");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bounded_core_subscription_reports_its_drops_and_leaves_the_pull_alone() {
    const CORE: u64 = 1_000;
    const STORED: u64 = 1_000;
    const CONSUMER: &str = "beside";
    let captured = capture();
    let render = telemetry::install_prometheus().expect("the Prometheus recorder installs");
    println!("running against {}", NatsServer::version());
    let (server, client, js) = jetstream_server().await;
    for id in 1..=STORED {
        publish_stored(&js, "orders.created", order(id)).await;
    }
    let slow = Scripted::new(|seen| {
        Some(if seen.id % 7 == 0 {
            HandlerOutcome::retry()
        } else {
            HandlerOutcome::ack()
        })
    })
    .slow(Duration::from_millis(20));
    let stored = Scripted::new(|seen| {
        Some(if seen.id % 50 == 0 && seen.delivered == Some(1) {
            HandlerOutcome::retry_after(Duration::from_millis(20))
        } else {
            HandlerOutcome::ack()
        })
    });
    let app = start(
        NatsBroker::new(server.url()).subscription_capacity(10),
        |b| {
            b.include(CoreSubject::new("audit.edges").handler(slow.clone()))
                .name("slow_edges");
            b.include(
                JetStreamSubject::new("orders.created", STREAM)
                    .durable(CONSUMER)
                    .handler(stored.clone()),
            )
            .name("stored_edges")
            .concurrency(NonZeroUsize::new(4).expect("not zero"));
        },
    )
    .await
    .expect("the app starts");
    for id in 0..CORE {
        client
            .publish("audit.edges", order(id).into())
            .await
            .expect("published");
    }
    client.flush().await.expect("flushed");

    // The Core drops are reported: a warning naming the registration, and the metric.
    let lines = eventually(PATIENCE, "a slow-consumer warning", || {
        let lines = captured.lines_with(&["WARN", "registration=slow_edges", "dropped="]);
        async move { (!lines.is_empty()).then_some(lines) }
    })
    .await;
    assert!(lines[0].contains("subscription_capacity"), "{}", lines[0]);
    let dropped = || {
        render()
            .lines()
            .find(|l| {
                l.starts_with("ruststream_slow_consumer_dropped_total")
                    && l.contains("handler=\"slow_edges\"")
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
    };
    eventually(PATIENCE, "the dropped counter", || {
        let value = dropped();
        async move { value.filter(|v| *v > 0.0) }
    })
    .await;

    // The pull beside it: every order handled, only the retried ones delivered again.
    let info = until_settled(&js, CONSUMER, STORED, "every stored order acknowledged").await;
    app.stop().await.expect("a drained stop");
    let retried = STORED / 50;
    assert_eq!(info.num_redelivered, 0, "{info:?}");
    assert_eq!(
        info.delivered.consumer_sequence,
        STORED + retried,
        "{info:?}"
    );
    // Nothing of the pull was dropped or reported.
    assert!(
        captured
            .lines_with(&["dropped JetStream deliveries"])
            .is_empty(),
        "the pull reported drops"
    );
    let handled = slow
        .seen()
        .iter()
        .map(|s| s.id)
        .collect::<BTreeSet<u64>>()
        .len() as u64;
    assert!(handled < CORE, "the slow Core handler cannot keep up");
    // Every Core message was handled (the ones held at the stop in the drain) or counted as
    // dropped, each once.
    let dropped = dropped().unwrap_or_default() as u64;
    assert_eq!(
        dropped + handled,
        CORE,
        "dropped {dropped} + handled {handled} != {CORE}"
    );
}
