//! What the `scale_*` tests share: a cluster (or a single server) to publish to without losing a
//! message across a fail-over, and the server's view of a consumer.

// Each test crate uses a part of it.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, stream};
use ruststream_test_server::cluster::NatsCluster;

/// How long a fail-over (a new leader, a reconnect, an ack_wait expiry) may take before a test
/// fails instead of hanging.
pub const FAILOVER: Duration = Duration::from_secs(45);
const POLL: Duration = Duration::from_millis(50);

/// A client of every node of `cluster`, and JetStream over it.
pub async fn cluster_client(cluster: &NatsCluster) -> (async_nats::Client, jetstream::Context) {
    let client = async_nats::ConnectOptions::new()
        .name("scale-test-client")
        .connect(cluster.servers())
        .await
        .expect("the test client connects to the cluster");
    let js = jetstream::new(client.clone());
    (client, js)
}

/// Creates stream `name` storing `subjects` with `replicas` replicas.
pub async fn create_stream(
    js: &jetstream::Context,
    name: &str,
    subjects: &[&str],
    replicas: usize,
) {
    js.create_stream(stream::Config {
        name: name.to_owned(),
        subjects: subjects.iter().map(|s| (*s).to_owned()).collect(),
        num_replicas: replicas,
        ..Default::default()
    })
    .await
    .unwrap_or_else(|e| panic!("the stream {name} is created with {replicas} replicas: {e}"));
}

/// Publishes `payload` to `subject` with message id `id` until the stream stored it, across a
/// fail-over: a publish whose acknowledgement was lost is sent again, and the stream's duplicate
/// window (`Nats-Msg-Id`) stores it once. Returns the stream sequence.
pub async fn publish_until_stored(
    js: &jetstream::Context,
    subject: &str,
    id: &str,
    payload: impl AsRef<[u8]>,
) -> u64 {
    let deadline = Instant::now() + FAILOVER;
    loop {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", id);
        let sent = js
            .publish_with_headers(
                subject.to_owned(),
                headers,
                payload.as_ref().to_vec().into(),
            )
            .await;
        let error = match sent {
            Ok(ack) => match ack.await {
                Ok(ack) => return ack.sequence,
                Err(e) => e.to_string(),
            },
            Err(e) => e.to_string(),
        };
        assert!(
            Instant::now() < deadline,
            "message {id} to {subject} not stored within {FAILOVER:?}: {error}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Asks for consumer `durable` of `stream` until `check` holds (across a fail-over: an error is
/// asked again), and returns its info.
pub async fn consumer_until(
    js: &jetstream::Context,
    stream: &str,
    durable: &str,
    what: &str,
    check: impl Fn(&consumer::Info) -> bool,
) -> consumer::Info {
    let deadline = Instant::now() + FAILOVER;
    loop {
        let info = match js.get_stream(stream).await {
            Ok(s) => s.consumer_info(durable).await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        if let Ok(info) = &info
            && check(info)
        {
            return info.clone();
        }
        assert!(
            Instant::now() < deadline,
            "consumer {stream}/{durable}: {what}, not within {FAILOVER:?}; last: {info:#?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Nothing left for consumer `durable`: every message up to `last` delivered and acknowledged
/// (none pending, none waiting for an ack, the ack floor at `last`).
pub async fn until_drained(
    js: &jetstream::Context,
    stream: &str,
    durable: &str,
    last: u64,
) -> consumer::Info {
    consumer_until(
        js,
        stream,
        durable,
        &format!("everything acknowledged up to {last}"),
        |i| i.num_pending == 0 && i.num_ack_pending == 0 && i.ack_floor.stream_sequence == last,
    )
    .await
}

/// The name of the stream's leader, once it has one.
pub async fn stream_leader(js: &jetstream::Context, stream: &str) -> String {
    let deadline = Instant::now() + FAILOVER;
    loop {
        if let Ok(mut s) = js.get_stream(stream).await
            && let Ok(info) = s.info().await
            && let Some(leader) = info.cluster.as_ref().and_then(|c| c.leader.clone())
        {
            return leader;
        }
        assert!(
            Instant::now() < deadline,
            "stream {stream} has no leader within {FAILOVER:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Asks the leader of `stream` to step down until a node other than `avoid` leads it, and
/// returns the new leader's name.
pub async fn stream_leader_other_than(
    client: &async_nats::Client,
    js: &jetstream::Context,
    stream: &str,
    avoid: &str,
) -> String {
    let deadline = Instant::now() + FAILOVER;
    loop {
        let leader = stream_leader(js, stream).await;
        if leader != avoid {
            return leader;
        }
        // Errors are asked again: the election may still run.
        let _ = client
            .request(
                format!("$JS.API.STREAM.LEADER.STEPDOWN.{stream}"),
                "".into(),
            )
            .await;
        assert!(
            Instant::now() < deadline,
            "stream {stream} is still led by {avoid} after {FAILOVER:?} of step-downs"
        );
        tokio::time::sleep(POLL).await;
    }
}
