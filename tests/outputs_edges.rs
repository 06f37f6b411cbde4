//! Outputs at the edges, against a real nats-server:
//!
//! - a stored output whose stream does not answer (its only node is down: the publish gets "no
//!   responders") is not published on Core NATS instead: the input is not acknowledged, and once
//!   the node is back the output is in its stream and the input acknowledged; a dead letter
//!   whose stream is down is held back the same way, not lost;
//! - a publish that can never succeed (a reply over the server's `max_payload`, a subject
//!   template filled with a value that makes no subject) is not retried: the input goes to the
//!   dead-letter subject, or is ended with an error naming the registration when none is
//!   declared, and the handler ran once;
//! - the message id of an output derived from its input stays unique when the input stream is
//!   deleted and created again (its sequences start over), and the same for a redelivery.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream;
use ruststream::App as _;
use ruststream_nats::prelude::*;
use ruststream_test_server::NatsServer;
use ruststream_test_server::client::{create_stream, stream_messages};
use ruststream_test_server::cluster::NatsCluster;
use serde::{Deserialize, Serialize};
use support::logs::Logs;
use support::nats::{PATIENCE, attempts, eventually, millis};
use support::scale::{
    FAILOVER, cluster_client, consumer_leader_other_than, publish_until_stored, stream_leader,
    stream_leader_other_than,
};
use tokio::task::block_in_place;

#[derive(Debug, Deserialize)]
struct Order {
    id: u64,
    /// How many bytes of padding the receipt carries.
    #[serde(default)]
    pad: usize,
    #[serde(default)]
    tenant: String,
}

#[derive(Debug, Serialize, Outgoing)]
#[outgoing(name = "receipts.issued")]
struct Receipt {
    order: u64,
    pad: String,
}

#[derive(Debug, Serialize, Outgoing)]
#[outgoing(name = "receipts.tenant.{tenant}")]
struct TenantReceipt {
    tenant: String,
    order: u64,
}

/// How many times the handlers ran on each order id.
#[derive(Clone, Default)]
struct Calls(Arc<Mutex<HashMap<u64, u32>>>);

impl Calls {
    fn add(&self, id: u64) {
        *self.0.lock().expect("not poisoned").entry(id).or_default() += 1;
    }

    fn of(&self, id: u64) -> u32 {
        self.0
            .lock()
            .expect("not poisoned")
            .get(&id)
            .copied()
            .unwrap_or(0)
    }
}

fn receipt(order: &Order) -> Receipt {
    Receipt {
        order: order.id,
        pad: "x".repeat(order.pad),
    }
}

/// Publishes its receipt; a publish that failed is tried again a little later.
#[subscriber(JetStreamSubject::new("orders.created", "ORDERS").durable("issue").ack_wait(millis(5000)))]
async fn issue(order: &Order, State(calls): State<Calls>, ctx: &mut Context<'_>) -> HandlerOutcome {
    calls.add(order.id);
    match ctx.publish(&receipt(order)).await {
        Ok(()) => HandlerOutcome::ack(),
        Err(_) => HandlerOutcome::retry_after(Duration::from_millis(200)),
    }
}

/// Replies with its receipt (the generated code publishes it; a failed publish is a `retry()`).
#[subscriber(JetStreamSubject::new("orders.answer", "ORDERS").durable("answer").ack_wait(millis(5000)), reply)]
async fn answer(order: &Order, State(calls): State<Calls>) -> Result<Receipt, HandlerOutcome> {
    calls.add(order.id);
    Ok(receipt(order))
}

/// Never succeeds: at its cap of one attempt it goes to the dead-letter subject.
#[subscriber(JetStreamSubject::new("orders.poison", "ORDERS").durable("poison").ack_wait(millis(5000)))]
async fn poison(order: &Order, State(calls): State<Calls>) -> HandlerOutcome {
    calls.add(order.id);
    HandlerOutcome::retry()
}

/// Publishes its receipt, then answers `retry()` to a first delivery: the redelivery publishes
/// the same receipt again.
#[subscriber(JetStreamSubject::new("orders.created", "ORDERS").durable("twice").ack_wait(millis(5000)))]
async fn twice(
    order: &Order,
    Ctx(delivered): Ctx<Delivered>,
    State(calls): State<Calls>,
    ctx: &mut Context<'_>,
) -> HandlerOutcome {
    calls.add(order.id);
    if ctx.publish(&receipt(order)).await.is_err() {
        return HandlerOutcome::retry();
    }
    if delivered == Some(1) {
        HandlerOutcome::retry()
    } else {
        HandlerOutcome::ack()
    }
}

/// Replies with a receipt as large as the order asks.
#[subscriber(JetStreamSubject::new("orders.big", "ORDERS").durable("big").ack_wait(millis(5000)), reply)]
async fn big(order: &Order, State(calls): State<Calls>) -> Result<Receipt, HandlerOutcome> {
    calls.add(order.id);
    Ok(receipt(order))
}

/// The same, on a registration without a dead-letter subject.
#[subscriber(JetStreamSubject::new("orders.huge", "ORDERS").durable("huge").ack_wait(millis(5000)), reply)]
async fn huge(order: &Order, State(calls): State<Calls>) -> Result<Receipt, HandlerOutcome> {
    calls.add(order.id);
    Ok(receipt(order))
}

/// Replies to the tenant's own subject, filled from the order.
#[subscriber(JetStreamSubject::new("orders.tenant", "ORDERS").durable("tenant").ack_wait(millis(5000)), reply)]
async fn tenant(
    order: &Order,
    State(calls): State<Calls>,
) -> Result<TenantReceipt, HandlerOutcome> {
    calls.add(order.id);
    Ok(TenantReceipt {
        tenant: order.tenant.clone(),
        order: order.id,
    })
}

async fn start_app(
    url: String,
    calls: &Calls,
    mount: impl FnOnce(&mut ruststream::Scope<Calls>),
) -> ruststream::RunningApp {
    let calls = calls.clone();
    RustStream::new(AppInfo::new("outputs-edges", "0.1.0"))
        .on_startup(async move |()| Ok::<_, std::convert::Infallible>(calls))
        .with_broker(NatsBroker::new(url).connection_name("outputs-edges"), mount)
        .start(ruststream::Env::new())
        .await
        .expect("the app starts")
}

/// The messages of `stream` on `subject`, as their payloads.
async fn payloads(js: &jetstream::Context, stream: &str, subject: &str) -> Vec<String> {
    // Nothing while the stream does not answer (`stream_messages` would panic).
    let Ok(mut handle) = js.get_stream(stream).await else {
        return Vec::new();
    };
    if handle.info().await.is_err() {
        return Vec::new();
    }
    stream_messages(js, stream)
        .await
        .into_iter()
        .filter(|m| m.subject.as_str() == subject)
        .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
        .collect()
}

/// Waits until consumer `durable` of `ORDERS` settled everything up to `seq` for good.
async fn until_drained(js: &jetstream::Context, durable: &str, seq: u64, within: Duration) {
    eventually(
        within,
        &format!("{durable} settled up to {seq}"),
        || async {
            let info = js
                .get_stream("ORDERS")
                .await
                .ok()?
                .consumer_info(durable)
                .await
                .ok()?;
            (info.num_ack_pending == 0 && info.ack_floor.stream_sequence >= seq).then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_output_whose_stream_node_is_down_leaves_its_input_unacknowledged() {
    support::nats::logs();
    println!("running against {}", NatsServer::version());
    let mut cluster = block_in_place(NatsCluster::start);
    let (client, js) = cluster_client(&cluster).await;
    support::scale::create_stream(&js, "ORDERS", &["orders.>"], 3).await;
    support::scale::create_stream(&js, "RECEIPTS", &["receipts.>"], 1).await;
    let down = cluster
        .index_of(&stream_leader(&js, "RECEIPTS").await)
        .expect("the leader is a node");
    let app_node = (down + 1) % 3;

    let calls = Calls::default();
    let running = start_app(cluster.node(app_node).url(), &calls, |b| {
        b.include(issue);
        b.include(answer);
        b.include(poison)
            .max_attempts(attempts(1))
            .dead_letter("receipts.dead");
    })
    .await;
    // The orders and their consumers are led elsewhere: their own fail-over is not what is
    // tested here (`scale_node_loss` is about it).
    let avoid = cluster.name(down).to_owned();
    stream_leader_other_than(&client, &js, "ORDERS", &avoid).await;
    for durable in ["issue", "answer", "poison"] {
        consumer_leader_other_than(&client, &js, "ORDERS", durable, &avoid).await;
    }
    // Works while every node runs.
    let first = publish_until_stored(&js, "orders.created", "o1", r#"{"id":1}"#).await;
    until_drained(&js, "issue", first, FAILOVER).await;
    assert_eq!(payloads(&js, "RECEIPTS", "receipts.issued").await.len(), 1);

    block_in_place(|| cluster.kill(down));
    let second = publish_until_stored(&js, "orders.created", "o2", r#"{"id":2}"#).await;
    let poisoned = publish_until_stored(&js, "orders.poison", "p3", r#"{"id":3}"#).await;
    let answered = publish_until_stored(&js, "orders.answer", "a4", r#"{"id":4}"#).await;
    // The receipts of orders 2 and 4 cannot be stored: their inputs come back instead of being
    // acknowledged, and the poison message's dead letter cannot be stored either.
    eventually(FAILOVER, "orders 2 and 4 handled again", || async {
        (calls.of(2) >= 3 && calls.of(4) >= 3).then_some(())
    })
    .await;
    let info = support::scale::consumer_until(&js, "ORDERS", "issue", "its info", |_| true).await;
    assert!(info.ack_floor.stream_sequence < second, "{info:#?}");
    let info = support::scale::consumer_until(&js, "ORDERS", "answer", "its info", |_| true).await;
    assert!(info.ack_floor.stream_sequence < answered, "{info:#?}");
    // Held back after its dead letter failed, and delivered again: not terminated.
    let info = support::scale::consumer_until(
        &js,
        "ORDERS",
        "poison",
        "the poison message redelivered",
        |i| i.num_redelivered >= 1,
    )
    .await;
    assert!(info.ack_floor.stream_sequence < poisoned, "{info:#?}");
    assert_eq!(
        calls.of(3),
        1,
        "past the cap the handler does not run again"
    );

    block_in_place(|| cluster.restart(down));
    until_drained(&js, "issue", second, FAILOVER).await;
    until_drained(&js, "poison", poisoned, FAILOVER).await;
    until_drained(&js, "answer", answered, FAILOVER).await;
    // Read until the restarted node answers every read.
    let stored = eventually(FAILOVER, "the receipts read back", || async {
        let issued = payloads(&js, "RECEIPTS", "receipts.issued").await;
        let dead = payloads(&js, "RECEIPTS", "receipts.dead").await;
        (issued.len() + dead.len() >= 4).then_some((sorted(issued), dead))
    })
    .await;
    assert_eq!(
        stored.0,
        [
            r#"{"order":1,"pad":""}"#,
            r#"{"order":2,"pad":""}"#,
            r#"{"order":4,"pad":""}"#
        ],
        "every acknowledged input has its stored output"
    );
    assert_eq!(
        stored.1,
        [r#"{"id":3}"#],
        "the dead letter is stored once its stream is back"
    );
    assert_eq!(calls.of(3), 1, "the poison handler ran once");
    running.stop().await.expect("a clean stop");
}

#[tokio::test]
async fn a_publish_that_can_never_succeed_is_dead_lettered_not_retried() {
    let logs = Logs::default();
    let _guard = logs.install();
    println!("running against {}", NatsServer::version());
    let server = NatsServer::builder().config("max_payload: 4096\n").start();
    let (_client, js) = ruststream_test_server::client::connect_jetstream(&server).await;
    create_stream(&js, "ORDERS", ["orders.>"]).await;
    create_stream(&js, "RECEIPTS", ["receipts.>"]).await;

    let calls = Calls::default();
    let running = start_app(server.url(), &calls, |b| {
        b.include(big).dead_letter("orders.dead");
        b.include(huge);
        b.include(tenant).dead_letter("orders.dead");
    })
    .await;
    let big_order = r#"{"id":1,"pad":8000}"#;
    let bad_tenant = r#"{"id":3,"tenant":"a.b"}"#;
    let one = publish_until_stored(&js, "orders.big", "b1", big_order).await;
    let two = publish_until_stored(&js, "orders.huge", "h2", r#"{"id":2,"pad":8000}"#).await;
    let three = publish_until_stored(&js, "orders.tenant", "t3", bad_tenant).await;
    let fine =
        publish_until_stored(&js, "orders.tenant", "t4", r#"{"id":4,"tenant":"acme"}"#).await;

    until_drained(&js, "big", one, PATIENCE).await;
    until_drained(&js, "huge", two, PATIENCE).await;
    until_drained(&js, "tenant", fine.max(three), PATIENCE).await;
    assert_eq!(
        payloads(&js, "ORDERS", "orders.dead").await,
        [big_order, bad_tenant],
        "both inputs went to the dead-letter subject as they arrived"
    );
    assert_eq!(
        payloads(&js, "RECEIPTS", "receipts.tenant.acme").await,
        [r#"{"tenant":"acme","order":4}"#]
    );
    assert!(
        payloads(&js, "RECEIPTS", "receipts.issued")
            .await
            .is_empty(),
        "no receipt was published"
    );
    for id in 1..=4 {
        assert_eq!(calls.of(id), 1, "the handler ran once on order {id}");
    }
    let ended = logs.lines_with(&["huge", "no dead-letter subject"]);
    assert!(!ended.is_empty(), "{}", logs.text());
    running.stop().await.expect("a clean stop");
}

#[tokio::test]
async fn output_ids_stay_unique_when_the_input_stream_is_created_again() {
    support::nats::logs();
    println!("running against {}", NatsServer::version());
    let server = NatsServer::start();
    let (_client, js) = ruststream_test_server::client::connect_jetstream(&server).await;
    create_stream(&js, "ORDERS", ["orders.>"]).await;
    create_stream(&js, "RECEIPTS", ["receipts.>"]).await;

    let calls = Calls::default();
    for round in 0..2_u64 {
        let running = start_app(server.url(), &calls, |b| {
            b.include(twice);
        })
        .await;
        let mut last = 0;
        for id in round * 3 + 1..=round * 3 + 3 {
            last = publish_until_stored(&js, "orders.created", &format!("o{id}"), order(id)).await;
        }
        assert_eq!(last, 3, "the stream's sequences start at 1");
        until_drained(&js, "twice", last, PATIENCE).await;
        running.stop().await.expect("a clean stop");
        if round == 0 {
            js.delete_stream("ORDERS").await.expect("deleted");
            create_stream(&js, "ORDERS", ["orders.>"]).await;
        }
    }
    let receipts = payloads(&js, "RECEIPTS", "receipts.issued").await;
    let expected: Vec<String> = (1..=6)
        .map(|id| format!(r#"{{"order":{id},"pad":""}}"#))
        .collect();
    assert_eq!(
        receipts, expected,
        "one receipt per order: the redeliveries' copies dropped as duplicates, the second stream's not"
    );
    for id in 1..=6 {
        assert_eq!(
            calls.of(id),
            2,
            "order {id} handled twice (a retry, then an ack)"
        );
    }
}

fn sorted(mut payloads: Vec<String>) -> Vec<String> {
    payloads.sort();
    payloads
}

fn order(id: u64) -> String {
    format!(r#"{{"id":{id}}}"#)
}
