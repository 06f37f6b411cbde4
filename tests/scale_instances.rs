//! Three instances of `examples/orders_worker.rs`, each a real child process, on one durable
//! JetStream consumer and one Core queue group of one nats-server: the messages are split among
//! them, every JetStream message is handled at least once and acknowledged, no Core message is
//! handled twice, and when one instance is killed with SIGKILL mid-run, the messages it held
//! are delivered to the others after ack_wait and the totals still reconcile with what the
//! server reports.
//!
//! 3 000 messages of each kind by default; `RUSTSTREAM_SCALE_MESSAGES=30000 cargo test --test
//! scale_instances` runs the full count.

mod support;

use std::time::Instant;

use support::scale::*;
use tokio::task::block_in_place;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_share_a_durable_and_a_queue_group_and_one_is_killed_mid_run() {
    let (server, monitor, client, js, fulfilled) = orders_server().await;
    let n = message_count();
    let notified = Tally::start(&client, NOTIFIED).await;

    let mut w1 = block_in_place(|| Worker::start(&server.url(), "w1"));
    let mut w2 = Worker::start(&server.url(), "w2");
    let mut w3 = Worker::start(&server.url(), "w3");
    until_consuming(&js, monitor, &mut [&mut w1, &mut w2, &mut w3], true).await;
    let started = Instant::now();

    // Core, one queue group: each notification to exactly one instance.
    publish_notifications(&client, NOTIFY, 1..=n).await;
    notified.until_all(1..=n, patience_for(n)).await;
    assert_eq!(
        notified.duplicates(),
        Vec::<u64>::new(),
        "no notification handled twice"
    );
    assert_eq!(notified.total() as u64, n);
    let shares = notified.per_instance();
    println!(
        "core, {n} notifications in {:?}: {shares:?}",
        started.elapsed()
    );
    assert_eq!(shares.len(), 3, "every instance got a share: {shares:?}");

    // A graceful stop of every instance, then a backlog of orders for a new generation of
    // them, so that each holds orders (its lookahead, its handlers) when one is killed.
    for w in [&mut w1, &mut w2, &mut w3] {
        let status = block_in_place(|| w.process.terminate());
        assert!(status.success(), "{} stops cleanly: {status}", w.name);
    }
    publish_orders(&js, PLACED, 1..=n).await;

    // JetStream, one durable: every order handled at least once, one instance killed mid-run.
    let mut w1 = block_in_place(|| Worker::start(&server.url(), "w1"));
    let mut w2 = Worker::start(&server.url(), "w2");
    let mut w3 = Worker::start(&server.url(), "w3");
    until_consuming(&js, monitor, &mut [&mut w1, &mut w2, &mut w3], false).await;
    let killed_after = n as usize / 3;
    wait_for(
        patience_for(n),
        "a third of the orders fulfilled, some by w3",
        || fulfilled.distinct() >= killed_after && fulfilled.per_instance().contains_key("w3"),
    )
    .await;
    block_in_place(|| w3.process.kill());
    let killed_at = Instant::now();
    let at_kill = consumer_until(&js, ORDERS, FULFIL, "its info", |_| true).await;
    // Replies w3 sent before it died may still be on their way to the test's subscription.
    until_disconnected(monitor, &w3, &client).await;
    fulfilled.caught_up(&client).await;
    let w3_at_kill = fulfilled.per_instance().get("w3").copied().unwrap_or(0);
    assert!(
        fulfilled.distinct() < n as usize,
        "the instance died mid-run, with orders left"
    );

    fulfilled.until_all(1..=n, patience_for(n)).await;
    let info = until_drained(&js, ORDERS, FULFIL, n).await;
    let drained_after = killed_at.elapsed();
    let redelivered = info.delivered.consumer_sequence - n;
    let shares = fulfilled.per_instance();
    println!(
        "jetstream, {n} orders at {:?}: {shares:?}; {} pending acks when w3 was killed, {redelivered} \
         deliveries again, {} orders fulfilled twice, drained {drained_after:?} after the kill",
        started.elapsed(),
        at_kill.num_ack_pending,
        fulfilled.duplicates().len()
    );
    assert_eq!(shares.len(), 3, "every instance got a share: {shares:?}");
    assert_eq!(
        shares.get("w3").copied().unwrap_or(0),
        w3_at_kill,
        "nothing answered by the killed instance"
    );
    // The server's view: everything acknowledged, and the only deliveries beyond one per order
    // are the ones the killed instance held unacknowledged.
    assert_eq!(info.ack_floor.stream_sequence, n);
    assert_eq!((info.num_pending, info.num_ack_pending), (0, 0));
    assert!(
        redelivered >= 1,
        "the killed instance held orders (its lookahead and handlers) that went to the others"
    );
    assert!(
        redelivered <= at_kill.num_ack_pending as u64,
        "only orders unacknowledged when the instance died were delivered again"
    );
    assert!(fulfilled.duplicates().len() as u64 <= redelivered);
    // They came back when the instances' ack_wait ran out.
    assert_eq!(info.config.ack_wait, WORKER_ACK_WAIT);

    // The queue group without the dead instance: the other two take everything, once.
    publish_notifications(&client, NOTIFY, n + 1..=n + 300).await;
    notified.until_all(n + 1..=n + 300, patience_for(300)).await;
    assert_eq!(notified.duplicates(), Vec::<u64>::new());
    let after = notified.per_instance_in(n + 1..=n + 300);
    assert!(!after.contains_key("w3"), "{after:?}");

    for w in [&mut w1, &mut w2] {
        let status = block_in_place(|| w.process.terminate());
        assert!(
            status.success(),
            "{} stops cleanly: {status}\n{}",
            w.name,
            w.process.output_tail()
        );
    }
}

/// Polls `condition` until it holds.
async fn wait_for(within: std::time::Duration, what: &str, condition: impl Fn() -> bool) {
    let deadline = Instant::now() + within;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
