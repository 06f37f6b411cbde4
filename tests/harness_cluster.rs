//! Live test of the three-node cluster support against real `nats-server`s.

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use ruststream_test_server::NatsServer;
use ruststream_test_server::client::eventually;
use ruststream_test_server::cluster::{CLUSTER_NAME, NatsCluster};

/// Generous bound for a fail-over, so a hang fails instead of stalling CI.
const FAILOVER: Duration = Duration::from_secs(30);

/// The stream's leader and its replicas as the server reports them.
async fn placement(js: &jetstream::Context, name: &str) -> Option<(String, Vec<(String, bool)>)> {
    let info = js.get_stream(name).await.ok()?.info().await.ok()?.clone();
    let cluster = info.cluster?;
    let leader = cluster.leader?;
    let replicas = cluster
        .replicas
        .iter()
        .map(|r| (r.name.clone(), r.current && !r.offline))
        .collect();
    Some((leader, replicas))
}

#[tokio::test]
async fn three_nodes_elect_a_leader_replicate_a_stream_and_take_back_a_killed_node() {
    println!("running against {}", NatsServer::version());
    let mut cluster = NatsCluster::start();
    let leader = cluster.meta_leader();
    let jsz = cluster
        .monitor(leader, "/jsz")
        .expect("the leader answers /jsz");
    assert_eq!(jsz["meta_cluster"]["name"], CLUSTER_NAME, "{jsz}");
    assert_eq!(jsz["meta_cluster"]["cluster_size"], 3, "{jsz}");

    let client = async_nats::connect(cluster.servers())
        .await
        .expect("a client connects to the cluster");
    let js = jetstream::new(client.clone());
    js.create_stream(stream::Config {
        name: "R3".into(),
        subjects: vec!["r3.>".into()],
        num_replicas: 3,
        ..Default::default()
    })
    .await
    .expect("an R3 stream is created");
    let (stream_leader, replicas) = eventually(FAILOVER, "the stream's replicas current", || {
        let js = js.clone();
        async move {
            placement(&js, "R3")
                .await
                .filter(|(_, r)| r.len() == 2 && r.iter().all(|(_, ok)| *ok))
        }
    })
    .await;
    for i in 0..5u8 {
        js.publish("r3.a", vec![i].into())
            .await
            .expect("published")
            .await
            .expect("stored on a quorum");
    }

    // The stream's leader crashes: another takes over, and the stream still stores.
    let killed = cluster.index_of(&stream_leader).expect("a node's name");
    cluster.kill(killed);
    assert!(!cluster.is_running(killed));
    let (new_leader, _) = eventually(FAILOVER, "a new stream leader", || {
        let js = js.clone();
        let old = stream_leader.clone();
        async move { placement(&js, "R3").await.filter(|(l, _)| *l != old) }
    })
    .await;
    assert_ne!(new_leader, stream_leader);
    let stored = eventually(FAILOVER, "a publish stored without the killed node", || {
        let js = js.clone();
        async move { js.publish("r3.a", vec![5].into()).await.ok()?.await.ok() }
    })
    .await;
    assert_eq!(stored.sequence, 6);

    // Back on the same ports with the same store: it rejoins and catches up.
    cluster.restart(killed);
    let (_, replicas_after) = eventually(FAILOVER, "every replica current again", || {
        let js = js.clone();
        async move {
            placement(&js, "R3")
                .await
                .filter(|(_, r)| r.len() == 2 && r.iter().all(|(_, ok)| *ok))
        }
    })
    .await;
    assert_eq!(replicas.len(), replicas_after.len());
    let cluster = &cluster;
    eventually(
        FAILOVER,
        "the restarted node caught up to 6 messages",
        || async move {
            cluster
                .monitor(killed, "/jsz")
                .filter(|jsz| jsz["messages"] == 6)
        },
    )
    .await;
}
