//! Which outputs are stored, as `describe` (offline: the streams the broker declares) and
//! `check` (against the server: the streams that exist) say it. A stored output is a publish the
//! stream confirms before the input is settled; any other is a Core publish nobody confirms.

use ruststream::{App as _, Env};
use ruststream_nats::prelude::*;
use ruststream_test_server::NatsServer;
use ruststream_test_server::client::{connect_jetstream, create_stream};
use serde::{Deserialize, Serialize};

#[derive(Deserialize)]
struct Order {
    id: u64,
}

#[derive(Serialize, Outgoing)]
#[outgoing(name = "orders.receipt")]
struct Receipt {
    id: u64,
}

#[derive(Serialize, Outgoing)]
#[outgoing(name = "alerts.sent")]
struct Alert {
    id: u64,
}

#[derive(Serialize, Outgoing)]
#[outgoing(name = "orders.{tenant}.placed")]
struct Placed {
    tenant: String,
}

#[subscriber(JetStreamSubject::new("orders.created", "ORDERS").durable("receipts"), reply)]
async fn receipts(order: &Order) -> Result<Receipt, HandlerOutcome> {
    Ok(Receipt { id: order.id })
}

// Outside `orders.>`: a stream storing a subject a `reply` handler answers on would answer
// its requests with the storage receipt, and the app refuses to start.
#[subscriber("audit.orders", reply)]
async fn alert(order: &Order) -> Result<Alert, HandlerOutcome> {
    Ok(Alert { id: order.id })
}

#[subscriber("accept.orders", reply)]
async fn place(_order: &Order) -> Result<Placed, HandlerOutcome> {
    Ok(Placed {
        tenant: "acme".to_owned(),
    })
}

fn app(url: &str, declare: bool) -> impl App<State = ()> {
    let broker = NatsBroker::new(url);
    let broker = if declare {
        broker.declare_stream("ORDERS", ["orders.>"])
    } else {
        broker
    };
    RustStream::new(AppInfo::new("outputs", "0.1.0")).with_broker(broker, |b| {
        b.include(receipts);
        b.include(alert);
        b.include(place);
    })
}

/// The `replies` cell of `registration`'s row.
fn replies_cell(table: &str, registration: &str) -> String {
    let header = table
        .lines()
        .find(|l| l.starts_with("handler"))
        .expect("the header");
    let column = header.find("replies").expect("a replies column");
    let row = table
        .lines()
        .find(|l| l.starts_with(&format!("{registration} ")))
        .expect("the registration's row");
    row[column..].trim().to_owned()
}

#[test]
fn describe_says_which_outputs_a_declared_stream_stores() {
    let table = ruststream::app::cli::describe(&app("nats://localhost:4222", true));
    assert_eq!(
        replies_cell(&table, "receipts"),
        "orders.receipt (stored in ORDERS)"
    );
    assert_eq!(
        replies_cell(&table, "alert"),
        "alerts.sent (not in a declared stream)"
    );
    // A template is stored when every subject it fills is.
    assert_eq!(
        replies_cell(&table, "place"),
        "orders.{tenant}.placed (stored in ORDERS)"
    );

    let json = ruststream::app::cli::describe_json(&app("nats://localhost:4222", true));
    let stored_in = |i: usize| json["registrations"][i]["replies_stored_in"].clone();
    assert_eq!(
        stored_in(0),
        serde_json::json!({"orders.receipt": "ORDERS"})
    );
    assert_eq!(stored_in(1), serde_json::json!({"alerts.sent": null}));
    assert_eq!(
        stored_in(2),
        serde_json::json!({"orders.{tenant}.placed": "ORDERS"})
    );

    // Nothing declared: describe cannot know, and says so.
    let table = ruststream::app::cli::describe(&app("nats://localhost:4222", false));
    assert_eq!(
        replies_cell(&table, "receipts"),
        "orders.receipt (not in a declared stream)"
    );
}

#[tokio::test]
async fn check_says_which_outputs_the_servers_streams_store() {
    let server = NatsServer::start();
    let (_client, js) = connect_jetstream(&server).await;
    // The stream exists on the server; the app does not declare it.
    create_stream(&js, "ORDERS", ["orders.>"]).await;
    let done = app(&server.url(), false)
        .check(Env::new())
        .await
        .expect("every check passes");
    let all = done.join("\n");
    for line in [
        "outputs of registration `receipts` go to `orders.receipt`, stored in stream `ORDERS`: each publish waits for the stream's acknowledgement before the delivery is settled",
        "outputs of registration `alert` go to `alerts.sent`, which no stream stores: each is a Core publish that only a subscriber listening at that moment gets",
        "outputs of registration `place` go to `orders.{tenant}.placed`, stored in stream `ORDERS`",
    ] {
        assert!(all.contains(line), "missing: {line}\n{all}");
    }
}
