//! What the `scale_*` tests share: a cluster (or a single server) to publish to without losing a
//! message across a fail-over, and the server's view of a consumer.

// Each test crate uses a part of it.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt as _;
use ruststream_test_server::NatsServer;
use ruststream_test_server::cluster::{NatsCluster, free_port, monitor_json, retry_taken_ports};
use ruststream_test_server::service_process::ServiceProcess;

/// How long a fail-over (a new leader, a reconnect, an ack_wait expiry) may take before a test
/// fails instead of hanging.
pub const FAILOVER: Duration = Duration::from_secs(45);
const POLL: Duration = Duration::from_millis(50);

/// A single nats-server (its version printed) and its monitoring port, the `ORDERS` stream of
/// `orders_worker`, a client and JetStream over it, and the tally of fulfilled orders: where the
/// `scale_*` runs of that example start.
pub async fn orders_server() -> (
    NatsServer,
    u16,
    async_nats::Client,
    jetstream::Context,
    Tally,
) {
    println!("running against {}", NatsServer::version());
    let (server, monitor) = retry_taken_ports(|| {
        let monitor = free_port();
        NatsServer::builder()
            .arg("-m")
            .arg(monitor.to_string())
            .try_start()
            .map(|server| (server, monitor))
    });
    let client = async_nats::connect(server.url())
        .await
        .expect("the client connects");
    let js = jetstream::new(client.clone());
    create_stream(&js, ORDERS, &[PLACED], 1).await;
    let fulfilled = Tally::start(&client, FULFILLED).await;
    (server, monitor, client, js, fulfilled)
}

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
        |i| i.num_pending == 0 && i.num_ack_pending == 0 && i.ack_floor.stream_sequence >= last,
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
    step_down_until_led_elsewhere(
        client,
        &format!("stream {stream}"),
        &format!("$JS.API.STREAM.LEADER.STEPDOWN.{stream}"),
        avoid,
        || async {
            let mut s = js.get_stream(stream).await.ok()?;
            s.info().await.ok()?.cluster.clone()?.leader
        },
    )
    .await
}

/// Asks the leader of consumer `durable` of `stream` to step down until a node other than
/// `avoid` leads it, and returns the new leader's name.
pub async fn consumer_leader_other_than(
    client: &async_nats::Client,
    js: &jetstream::Context,
    stream: &str,
    durable: &str,
    avoid: &str,
) -> String {
    step_down_until_led_elsewhere(
        client,
        &format!("consumer {stream}/{durable}"),
        &format!("$JS.API.CONSUMER.LEADER.STEPDOWN.{stream}.{durable}"),
        avoid,
        || async {
            let s = js.get_stream(stream).await.ok()?;
            s.consumer_info(durable).await.ok()?.cluster.clone()?.leader
        },
    )
    .await
}

/// Sends `step_down` until `leader` names a node other than `avoid`, and returns it.
async fn step_down_until_led_elsewhere<F: std::future::Future<Output = Option<String>>>(
    client: &async_nats::Client,
    what: &str,
    step_down: &str,
    avoid: &str,
    leader: impl Fn() -> F,
) -> String {
    let deadline = Instant::now() + FAILOVER;
    loop {
        if let Some(leader) = leader().await
            && leader != avoid
        {
            return leader;
        }
        // Errors are asked again: the election may still run.
        let _ = client.request(step_down.to_owned(), "".into()).await;
        assert!(
            Instant::now() < deadline,
            "{what} is still led by {avoid} after {FAILOVER:?} of step-downs"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// The example every instance runs.
pub const WORKER_EXAMPLE: &str = "orders_worker";
/// Its stream, durable consumer and subjects (see `examples/orders_worker.rs`).
pub const ORDERS: &str = "ORDERS";
pub const FULFIL: &str = "fulfil";
pub const PLACED: &str = "orders.placed";
pub const FULFILLED: &str = "orders.fulfilled";
pub const NOTIFY: &str = "orders.notify";
pub const NOTIFIED: &str = "orders.notified";
/// The worker's ack_wait.
pub const WORKER_ACK_WAIT: Duration = Duration::from_secs(5);

/// How many messages the many-instance tests send: `RUSTSTREAM_SCALE_MESSAGES`, 3 000 when
/// unset (the full run is `RUSTSTREAM_SCALE_MESSAGES=30000`).
pub fn message_count() -> u64 {
    match std::env::var("RUSTSTREAM_SCALE_MESSAGES") {
        Ok(value) => value.trim().parse().unwrap_or_else(|_| {
            panic!("RUSTSTREAM_SCALE_MESSAGES={value:?} is not a number of messages")
        }),
        Err(_) => 3_000,
    }
}

/// How long `n` messages may take to go through, on a slow machine.
pub fn patience_for(n: u64) -> Duration {
    FAILOVER + Duration::from_millis(n * 2)
}

/// A worker instance: `orders_worker` as a child process named `HOSTNAME=name`.
pub struct Worker {
    pub name: String,
    pub process: ServiceProcess,
}

impl Worker {
    /// Starts an instance named `name` on the servers of `url`.
    pub fn start(url: &str, name: &str) -> Self {
        let binary = ServiceProcess::example(WORKER_EXAMPLE);
        let process = ServiceProcess::spawn(
            &binary,
            // 5 ms a fulfilment: each instance has its 16 handlers in flight throughout a run,
            // so one killed mid-run always held orders (`scale_instances`).
            &[
                ("NATS_URL", url),
                ("HOSTNAME", name),
                ("RUST_LOG", "warn"),
                ("ORDERS_FULFIL_MS", "5"),
            ],
        );
        Self {
            name: name.to_owned(),
            process,
        }
    }

    /// Its connection name, as `/connz` shows it.
    pub fn connection_name(&self) -> String {
        format!("orders-worker {}", self.name)
    }
}

/// Waits until the server whose monitoring port is `monitor` has a connection of each of
/// `workers` subscribed to [`NOTIFY`] (in the queue group), and, when `idle` (the stream holds
/// nothing for them), the durable [`FULFIL`] has as many pull requests waiting: every instance
/// is consuming.
pub async fn until_consuming(
    js: &jetstream::Context,
    monitor: u16,
    workers: &mut [&mut Worker],
    idle: bool,
) {
    let deadline = Instant::now() + FAILOVER;
    loop {
        for w in workers.iter_mut() {
            assert!(
                w.process.is_running(),
                "worker {} exited while starting\n{}",
                w.name,
                w.process.output_tail()
            );
        }
        let connz = monitor_json(monitor, "/connz?subs=1&limit=1024");
        let subscribed = workers.iter().all(|w| {
            let name = w.connection_name();
            connz
                .as_ref()
                .and_then(|c| c["connections"].as_array().cloned())
                .is_some_and(|conns| {
                    conns.iter().any(|c| {
                        c["name"] == name.as_str()
                            && c["subscriptions_list"]
                                .as_array()
                                .is_some_and(|subs| subs.iter().any(|s| s == NOTIFY))
                    })
                })
        });
        let waiting = match js.get_stream(ORDERS).await {
            Ok(s) => s
                .consumer_info(FULFIL)
                .await
                .map(|i| i.num_waiting)
                .unwrap_or(0),
            Err(_) => 0,
        };
        if subscribed && (!idle || waiting >= workers.len()) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the workers are not all consuming within {FAILOVER:?} (subscribed: {subscribed}, \
             pull requests waiting: {waiting})\n{}",
            workers
                .iter()
                .map(|w| w.process.output_tail())
                .collect::<String>()
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Waits until the server whose monitoring port is `monitor` no longer lists `worker`'s
/// connection, then makes a round trip on `client`: the server has routed the last messages the
/// (killed) instance sent, and `client` has received them. What the test counts for the instance
/// after this no longer changes.
pub async fn until_disconnected(monitor: u16, worker: &Worker, client: &async_nats::Client) {
    let deadline = Instant::now() + FAILOVER;
    let name = worker.connection_name();
    loop {
        let connected = monitor_json(monitor, "/connz?limit=1024")
            .and_then(|c| c["connections"].as_array().cloned())
            .is_none_or(|conns| conns.iter().any(|c| c["name"] == name.as_str()));
        if !connected {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the server still lists {name}'s connection {FAILOVER:?} after it was killed"
        );
        tokio::time::sleep(POLL).await;
    }
    client
        .flush()
        .await
        .expect("a round trip on the test's connection");
}

/// Who answered which message: every `{"order": id, "by": name}` published on a subject, as
/// the test's own subscription got it.
#[derive(Clone, Default)]
pub struct Tally {
    by_id: Arc<Mutex<HashMap<u64, Vec<String>>>>,
    subject: String,
    /// How many of the test's own markers the subscription has read (see [`Tally::caught_up`]).
    markers: Arc<std::sync::atomic::AtomicU64>,
}

/// The payload of the test's own marker on a tally's subject.
const MARKER: &[u8] = b"tally-marker";

#[derive(serde::Deserialize)]
struct Answer {
    order: u64,
    by: String,
}

impl Tally {
    /// Subscribes `client` to `subject` (in place on the server when this returns).
    pub async fn start(client: &async_nats::Client, subject: &str) -> Self {
        let mut subscription = client
            .subscribe(subject.to_owned())
            .await
            .unwrap_or_else(|e| panic!("the test subscribes to {subject}: {e}"));
        client.flush().await.expect("flush the subscription");
        let tally = Self {
            subject: subject.to_owned(),
            ..Self::default()
        };
        let sink = Arc::clone(&tally.by_id);
        let markers = Arc::clone(&tally.markers);
        tokio::spawn(async move {
            while let Some(message) = subscription.next().await {
                if message.payload.as_ref() == MARKER {
                    markers.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                } else if let Ok(answer) = serde_json::from_slice::<Answer>(&message.payload) {
                    lock(&sink).entry(answer.order).or_default().push(answer.by);
                }
            }
        });
        tally
    }

    /// Waits until the subscription has read everything the server sent it before this call: a
    /// marker published now on `client` comes after all of it, so once the tally has read the
    /// marker, counting again counts every answer the server had (answers still in the test's
    /// own buffers are not missed).
    pub async fn caught_up(&self, client: &async_nats::Client) {
        use std::sync::atomic::Ordering;
        let target = self.markers.load(Ordering::SeqCst) + 1;
        client
            .publish(self.subject.clone(), bytes::Bytes::from_static(MARKER))
            .await
            .expect("publish the tally's marker");
        client.flush().await.expect("flush the tally's marker");
        let deadline = Instant::now() + FAILOVER;
        while self.markers.load(Ordering::SeqCst) < target {
            assert!(
                Instant::now() < deadline,
                "the tally of {} did not read its own marker within {FAILOVER:?}",
                self.subject
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// How many distinct messages were answered.
    pub fn distinct(&self) -> usize {
        lock(&self.by_id).len()
    }

    /// How many answers in all.
    pub fn total(&self) -> usize {
        lock(&self.by_id).values().map(Vec::len).sum()
    }

    /// The ids answered more than once.
    pub fn duplicates(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = lock(&self.by_id)
            .iter()
            .filter(|(_, by)| by.len() > 1)
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids
    }

    /// The ids of `range` nobody answered.
    pub fn missing(&self, range: std::ops::RangeInclusive<u64>) -> Vec<u64> {
        let by_id = lock(&self.by_id);
        range.filter(|id| !by_id.contains_key(id)).collect()
    }

    /// How many answers each instance gave.
    pub fn per_instance(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for by in lock(&self.by_id).values().flatten() {
            *counts.entry(by.clone()).or_default() += 1;
        }
        counts
    }

    /// How many answers for ids in `range`, by instance.
    pub fn per_instance_in(&self, range: std::ops::RangeInclusive<u64>) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for (id, by) in lock(&self.by_id).iter() {
            if range.contains(id) {
                for name in by {
                    *counts.entry(name.clone()).or_default() += 1;
                }
            }
        }
        counts
    }

    /// Waits until every id of `range` was answered.
    pub async fn until_all(&self, range: std::ops::RangeInclusive<u64>, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let missing = self.missing(range.clone());
            if missing.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} of {range:?} not answered within {within:?} (first: {:?}); answers by \
                 instance: {:?}",
                missing.len(),
                &missing[..missing.len().min(10)],
                self.per_instance()
            );
            tokio::time::sleep(POLL).await;
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Publishes `{"id": id}` for every id of `ids` to stream subject `subject`, many in flight at
/// once, and waits until the stream stored each.
pub async fn publish_orders(
    js: &jetstream::Context,
    subject: &str,
    ids: std::ops::RangeInclusive<u64>,
) {
    let mut acks = Vec::with_capacity(512);
    for id in ids {
        let ack = js
            .publish(subject.to_owned(), format!(r#"{{"id":{id}}}"#).into())
            .await
            .unwrap_or_else(|e| panic!("order {id} is sent: {e}"));
        acks.push(ack);
        if acks.len() == 512 {
            for ack in acks.drain(..) {
                ack.await.expect("the stream stored the order");
            }
        }
    }
    for ack in acks {
        ack.await.expect("the stream stored the order");
    }
}

/// Publishes `{"order": id}` for every id of `ids` to Core subject `subject`, and flushes.
pub async fn publish_notifications(
    client: &async_nats::Client,
    subject: &str,
    ids: std::ops::RangeInclusive<u64>,
) {
    for id in ids {
        client
            .publish(subject.to_owned(), format!(r#"{{"order":{id}}}"#).into())
            .await
            .unwrap_or_else(|e| panic!("notification {id} is sent: {e}"));
    }
    client.flush().await.expect("flush the notifications");
}
