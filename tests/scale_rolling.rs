//! A rolling restart while orders flow: three instances of `examples/orders_worker.rs` (child
//! processes) stopped one after the other with SIGTERM (a graceful drain) and started again.
//! Nothing is lost, nothing is handled twice, and the only deliveries beyond one per order are
//! of orders in flight at a stop that the stopping instance released with `-NAK` (it handles
//! what it received, pulled but not started or still on the way to it as it stopped pulling,
//! and releases only what cannot start before its drain deadline). (A delivery sent in the instant the
//! inbox closes would come back after ack_wait: counted, and bounded, below;
//! `tests/scale_drain.rs` shows none does while the orders flow.)
//!
//! And what a release costs where one is still made (a delivery that cannot start before the
//! drain deadline): the server counts it as a delivery, so a released message comes back with
//! its delivery count one higher, and that attempt counts toward the cap (`max_attempts`).
//! `docs/deployment.md` says so.
//!
//! At least 3 000 orders by default (the flow goes on until every instance was restarted); `RUSTSTREAM_SCALE_MESSAGES=30000` runs the full count.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ruststream::HandlerOutcome;
use ruststream_nats::NatsBroker;
use ruststream_test_server::NatsServer;
use ruststream_test_server::client::{Recorder, eventually};
use support::nats::{Scripted, created, logs, order, start};
use support::scale::*;
use tokio::task::block_in_place;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_with_a_drain_loses_nothing_and_redelivers_only_what_it_released() {
    let (server, monitor, client, js, fulfilled) = orders_server().await;
    let n = message_count();
    let wire = Recorder::start(&client, [format!("$JS.ACK.{ORDERS}.{FULFIL}.>")]).await;

    let url = server.url();
    let mut workers: Vec<Worker> = ["w1", "w2", "w3"]
        .into_iter()
        .map(|name| block_in_place(|| Worker::start(&url, name)))
        .collect();
    {
        let mut all: Vec<&mut Worker> = workers.iter_mut().collect();
        until_consuming(&js, monitor, &mut all, true).await;
    }

    // The orders flow, paced by the service (at most 400 ahead of what was fulfilled), until
    // there were `n` of them and every instance was restarted.
    let rolled = Arc::new(AtomicBool::new(false));
    let publisher = tokio::spawn({
        let js = js.clone();
        let fulfilled = fulfilled.clone();
        let rolled = Arc::clone(&rolled);
        async move {
            let mut next = 1;
            while next <= n || !rolled.load(Ordering::SeqCst) {
                let last = next + 199;
                publish_orders(&js, PLACED, next..=last).await;
                next = last + 1;
                let ahead = (next - 1).saturating_sub(400) as usize;
                eventually(patience_for(n), "the workers keep up", || {
                    let done = fulfilled.distinct();
                    async move { (done >= ahead).then_some(()) }
                })
                .await;
            }
            next - 1
        }
    });

    // One after the other, at a quarter, a half and three quarters of the flow: a graceful
    // stop, then a new instance in its place.
    let mut stops = BTreeMap::new();
    let mut pending_after_stops = 0;
    for (i, worker) in workers.iter_mut().enumerate() {
        let at = n as usize * (i + 1) / 4;
        eventually(patience_for(n), &format!("{at} orders fulfilled"), || {
            let done = fulfilled.distinct();
            async move { (done >= at).then_some(()) }
        })
        .await;
        assert!(
            !publisher.is_finished(),
            "the orders still flow when {} stops",
            worker.name
        );
        stops.insert(worker.name.clone(), fulfilled.distinct());
        let status = block_in_place(|| worker.process.terminate());
        assert!(
            status.success(),
            "{} drains and exits cleanly: {status}\n{}",
            worker.name,
            worker.process.output_tail()
        );
        // What the server holds unacknowledged once the instance is gone: a delivery it got
        // but neither settled nor released is among these until ack_wait runs out.
        let after_exit = consumer_until(&js, ORDERS, FULFIL, "its info", |_| true).await;
        pending_after_stops += after_exit.num_ack_pending as u64;
        *worker = block_in_place(|| Worker::start(&url, &worker.name.clone()));
        until_consuming(&js, monitor, &mut [worker], false).await;
    }

    rolled.store(true, Ordering::SeqCst);
    let n = publisher.await.expect("every order stored");
    fulfilled.until_all(1..=n, patience_for(n)).await;
    let info = until_drained(&js, ORDERS, FULFIL, n).await;
    let acks = wire.acks(ORDERS, FULFIL);
    let released = acks.iter().filter(|a| a.as_str() == "-NAK").count() as u64;
    let acked = acks.iter().filter(|a| a.as_str() == "+ACK").count() as u64;
    let redelivered = info.delivered.consumer_sequence - n;
    println!(
        "{n} orders, stops at {stops:?}: {redelivered} deliveries again, {released} released \
         with -NAK at the stops, by instance {:?}",
        fulfilled.per_instance()
    );
    // Nothing lost, nothing handled twice.
    assert_eq!(
        fulfilled.duplicates(),
        Vec::<u64>::new(),
        "no order handled twice"
    );
    assert_eq!(acked, n, "one +ACK per order");
    // The only deliveries again are of orders in flight at a stop: released with -NAK, or (a
    // delivery that reached the instance as it stopped pulling) back after ack_wait.
    assert_eq!(acks.len() as u64, acked + released, "{acks:?}");
    assert!(redelivered >= released);
    let timed_out = redelivered - released;
    println!("{timed_out} of them came back after ack_wait, not released");
    assert!(
        timed_out <= pending_after_stops,
        "{timed_out} deliveries timed out, more than the {pending_after_stops} unacknowledged \
         right after the stops"
    );
    assert_eq!(info.num_redelivered, 0);

    for worker in &mut workers {
        let status = block_in_place(|| worker.process.terminate());
        assert!(status.success(), "{} stops cleanly: {status}", worker.name);
    }
}

/// The cost of a release: the server counts the `-NAK` as a delivery, so the message comes back
/// with `delivered` one higher and that attempt counts toward `max_attempts`. With a cap of 2,
/// a message released at a stop and refused once by the next instance goes to the dead-letter
/// subject after a single handling. A stop releases only what cannot start before its drain
/// deadline: here a handler outlasts the drain timeout, so the deliveries behind it never get
/// a slot.
#[tokio::test]
async fn a_delivery_released_at_stop_counts_toward_the_cap() {
    logs();
    println!("running against {}", NatsServer::version());
    let (server, client, js) = support::nats::jetstream_server().await;
    let wire = Recorder::start(&client, ["$JS.ACK.>", "dead.orders"]).await;
    for id in 1..=20 {
        support::nats::publish_stored(&js, "orders.created", order(id)).await;
    }

    // The first instance: one handler slower than the drain timeout, and a lookahead of orders
    // pulled behind it. The abandoned delivery comes back after the consumer's 2 s ack_wait.
    let first = Scripted::always(HandlerOutcome::ack()).slow(std::time::Duration::from_secs(5));
    let running = support::nats::start_with(
        NatsBroker::new(server.url()),
        ruststream::Env::new().with_drain_timeout(std::time::Duration::from_secs(2)),
        |b| {
            b.include(
                created("capture")
                    .ack_wait(std::time::Duration::from_secs(2))
                    .handler(first.clone()),
            );
        },
    )
    .await
    .expect("the first instance starts");
    first.until_seen(1).await;
    running
        .stop()
        .await
        .expect_err("the handler outlasts the drain timeout");
    let handled_first: Vec<u64> = first.seen().iter().map(|s| s.id).collect();
    let released = eventually(
        support::nats::PATIENCE,
        "the orders pulled but not started released with -NAK at the stop",
        || {
            let naks = wire
                .acks(support::nats::STREAM, "capture")
                .iter()
                .filter(|a| a.as_str() == "-NAK")
                .count();
            async move { (naks >= 1).then_some(naks) }
        },
    )
    .await;

    // The next instance refuses each order once, under a cap of 2.
    let next = Scripted::always(HandlerOutcome::retry());
    let running = start(NatsBroker::new(server.url()), |b| {
        b.include(
            created("capture")
                .ack_wait(std::time::Duration::from_secs(2))
                .handler(next.clone()),
        )
        .max_attempts(support::nats::attempts(2))
        .dead_letter("dead.orders");
    })
    .await
    .expect("the next instance starts");
    // The abandoned delivery was not acknowledged: every order ends up dead-lettered.
    let remaining = 20;
    let dead = eventually(
        support::nats::PATIENCE,
        "every remaining order dead-lettered",
        || {
            let dead = wire.matching("dead.orders").len();
            async move { (dead >= remaining).then_some(dead) }
        },
    )
    .await;
    assert_eq!(dead, remaining);
    running.stop().await.expect("a drained stop");

    let seen = next.seen();
    let released_ids: Vec<u64> = seen
        .iter()
        .filter(|s| {
            s.delivered == Some(2)
                && !handled_first.contains(&s.id)
                && seen.iter().filter(|o| o.id == s.id).count() == 1
        })
        .map(|s| s.id)
        .collect();
    println!(
        "first instance handled {handled_first:?}; {released} released at its stop; \
         dead-lettered after one handling: {released_ids:?}"
    );
    assert_eq!(
        released_ids.len(),
        released,
        "each released order arrived at attempt 2 of 2: one handling, then the dead letter"
    );
    for s in seen.iter().filter(|s| released_ids.contains(&s.id)) {
        assert_eq!((s.delivered, s.attempt), (Some(2), 2), "{s:?}");
    }
}
