//! A service consuming a three-replica stream through a URL listing all three nodes of a
//! cluster loses a node mid-stream (killed with SIGKILL): the node it is connected to, then the
//! stream's leader. It reconnects, the consumer continues, every message is handled at least
//! once, the server reports nothing pending, and the restarted node rejoins without the service
//! noticing.
//!
//! Each case starts its own cluster (under a second); the time goes to the fail-over itself.

mod support;

use std::collections::BTreeSet;

use ruststream::HandlerOutcome;
use ruststream_nats::NatsBroker;
use ruststream_test_server::NatsServer;
use ruststream_test_server::cluster::NatsCluster;
use support::nats::{Scripted, created, eventually, logs, millis, order, start};
use support::scale::*;
use tokio::task::block_in_place;

/// The stream, its subject and the service's durable consumer.
const STREAM: &str = support::nats::STREAM;
const SUBJECT: &str = "orders.created";
const DURABLE: &str = "capture";
/// The service's connection name, as the nodes' `/connz` shows it.
const APP: &str = "scale-node-loss";
/// How many messages flow; the node dies after the service handled `KILL_AFTER` of them.
const TOTAL: u64 = 400;
const KILL_AFTER: usize = 100;
/// How many more after the node is back.
const AFTER_RESTART: u64 = 20;

/// Which node the test kills.
#[derive(Debug, Clone, Copy)]
enum Victim {
    /// The node the service's connection is on.
    ServiceConnection,
    /// The leader of the stream the service consumes (moved off the service's node first).
    StreamLeader,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_the_service_is_connected_to_dies_mid_stream() {
    lose_a_node(Victim::ServiceConnection).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_leader_dies_mid_stream() {
    lose_a_node(Victim::StreamLeader).await;
}

async fn lose_a_node(victim: Victim) {
    logs();
    println!("running against {}", NatsServer::version());
    let mut cluster = block_in_place(NatsCluster::start);
    let (client, js) = cluster_client(&cluster).await;
    create_stream(&js, STREAM, &["orders.>"], 3).await;

    let handler = Scripted::always(HandlerOutcome::ack());
    let running = start(NatsBroker::new(cluster.url()).connection_name(APP), |b| {
        // A short ack_wait: a delivery whose ack died with the node comes back soon.
        b.include(
            created(DURABLE)
                .ack_wait(millis(2_000))
                .handler(handler.clone()),
        );
    })
    .await
    .expect("the app starts on the cluster");
    let connected = cluster.nodes_with_connection(APP);
    assert_eq!(
        connected.len(),
        1,
        "the service has one connection: {connected:?}"
    );

    // The messages flow while the node dies.
    let publisher = tokio::spawn({
        let js = js.clone();
        async move {
            let mut last = 0;
            for id in 1..=TOTAL {
                last = publish_until_stored(&js, SUBJECT, &format!("m{id}"), order(id)).await;
            }
            last
        }
    });
    handler.until_seen(KILL_AFTER).await;
    let killed = match victim {
        Victim::ServiceConnection => connected[0],
        Victim::StreamLeader => {
            // Not the service's own node: that is the other case.
            let leader =
                stream_leader_other_than(&client, &js, STREAM, cluster.name(connected[0])).await;
            cluster.index_of(&leader).expect("the leader is a node")
        }
    };
    println!(
        "{victim:?}: killing {} (service on {}) after {} handled",
        cluster.name(killed),
        cluster.name(connected[0]),
        handler.seen().len()
    );
    block_in_place(|| cluster.kill(killed));
    let handled_at_kill = handler.seen().len();
    assert!(
        handled_at_kill < TOTAL as usize,
        "the node died mid-stream, with messages left to handle ({handled_at_kill} handled)"
    );

    let last = publisher.await.expect("the publisher finishes");
    assert_eq!(last, TOTAL, "every message stored once");
    until_all_handled(&handler, 1..=TOTAL).await;
    let info = until_drained(&js, STREAM, DURABLE, last).await;
    assert_eq!(info.delivered.stream_sequence, last);
    let now_on = eventually(FAILOVER, "the service connected to one node", || {
        let on = cluster.nodes_with_connection(APP);
        async move { (on.len() == 1).then(|| on[0]) }
    })
    .await;
    assert_ne!(now_on, killed, "the service is on a node that runs");

    // The node comes back and catches up; the service does not notice.
    block_in_place(|| cluster.restart(killed));
    for id in TOTAL + 1..=TOTAL + AFTER_RESTART {
        publish_until_stored(&js, SUBJECT, &format!("m{id}"), order(id)).await;
    }
    until_all_handled(&handler, 1..=TOTAL + AFTER_RESTART).await;
    until_drained(&js, STREAM, DURABLE, TOTAL + AFTER_RESTART).await;
    assert_eq!(
        cluster.nodes_with_connection(APP),
        vec![now_on],
        "the service stayed on its node while the other one rejoined"
    );
    let seen = handler.seen();
    let redelivered = seen.len() as u64 - (TOTAL + AFTER_RESTART);
    println!(
        "{victim:?}: {} deliveries, {redelivered} of them again",
        seen.len()
    );

    running.stop().await.expect("a clean stop");
}

/// Waits until the handler saw every id of `ids` at least once.
async fn until_all_handled(handler: &Scripted, ids: std::ops::RangeInclusive<u64>) {
    let want: BTreeSet<u64> = ids.collect();
    eventually(
        FAILOVER,
        &format!("{} messages handled", want.len()),
        || {
            let seen: BTreeSet<u64> = handler.seen().iter().map(|s| s.id).collect();
            let missing = want.difference(&seen).count();
            async move { (missing == 0).then_some(()) }
        },
    )
    .await;
}
