//! Routers (issue 15): registrations grouped under a subject prefix with shared middleware,
//! nested, included into a broker; `describe` shows the full subjects; the server is asked
//! what the app subscribed and consumed (the JetStream consumer's filter subject). In process
//! and on a real nats-server.

mod support;

use std::sync::Mutex;

use futures::future::BoxFuture;
use ruststream::middleware::{Middleware, Next};
use ruststream::registration::Handled;
use ruststream::{AppInfo, Delivery, Router, RustStream, subscriber};
use ruststream_nats::{CoreSubject, JetStreamSubject, NatsBroker};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Order {
    id: u64,
}

static LOG: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn log(line: impl Into<String>) {
    LOG.lock().unwrap().push(line.into());
}

struct Tag(&'static str);

impl Middleware for Tag {
    fn handle<'a>(&'a self, _d: &'a Delivery, next: Next<'a>) -> BoxFuture<'a, Handled> {
        Box::pin(async move {
            log(self.0);
            next.run().await
        })
    }
}

#[subscriber("invoices.issued")]
async fn book(order: &Order, ctx: &mut ruststream::Context<'_>) {
    log(format!("book {} on {}", order.id, ctx.subject()));
}

#[subscriber(JetStreamSubject::new("orders.created", "SHOP").durable("shop_created"))]
async fn created(order: &Order, ctx: &mut ruststream::Context<'_>) {
    log(format!("created {} on {}", order.id, ctx.subject()));
}

#[subscriber(CoreSubject::new("orders.refunded"))]
async fn refunded(order: &Order, ctx: &mut ruststream::Context<'_>) {
    log(format!("refunded {} on {}", order.id, ctx.subject()));
}

fn app(broker: NatsBroker) -> impl ruststream::App<State = ()> {
    let mut billing = Router::new("billing");
    billing.layer(Tag("billing"));
    billing.include(book);

    let mut eu = Router::new("eu.");
    eu.layer(Tag("eu"));
    eu.include(refunded);
    let mut shop = Router::new("shop");
    shop.layer(Tag("shop"));
    shop.include(created);
    shop.include_router(eu);

    RustStream::new(AppInfo::new("routers", "0.1.0"))
        .layer(Tag("app"))
        .with_broker(broker, |b| {
            b.layer(Tag("broker"));
            b.include_router(billing);
            b.include_router(shop);
        })
}

#[test]
fn describe_shows_the_full_subjects() {
    use ruststream::App as _;
    let app = app(NatsBroker::new("nats://localhost:4222"));
    let subjects: Vec<_> = app
        .registrations()
        .into_iter()
        .map(|r| (r.name, r.descriptor.subject, r.middleware))
        .collect();
    assert_eq!(
        subjects,
        [
            (
                "book".to_owned(),
                "billing.invoices.issued".to_owned(),
                vec!["Tag".to_owned(); 3]
            ),
            (
                "created".to_owned(),
                "shop.orders.created".to_owned(),
                vec!["Tag".to_owned(); 3]
            ),
            (
                "refunded".to_owned(),
                "shop.eu.orders.refunded".to_owned(),
                vec!["Tag".to_owned(); 4]
            ),
        ]
    );
    let text = ruststream::app::cli::describe(&app);
    for subject in [
        "billing.invoices.issued",
        "shop.orders.created",
        "shop.eu.orders.refunded",
    ] {
        assert!(text.contains(subject), "{text}");
    }
}

fn json(id: u64) -> Vec<u8> {
    serde_json::to_vec(&Order { id }).unwrap()
}

fn expected() -> Vec<String> {
    [
        "app",
        "broker",
        "billing",
        "book 1 on billing.invoices.issued",
        "app",
        "broker",
        "shop",
        "created 2 on shop.orders.created",
        "app",
        "broker",
        "shop",
        "eu",
        "refunded 3 on shop.eu.orders.refunded",
    ]
    .map(str::to_owned)
    .to_vec()
}

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

mod in_process {
    use super::*;
    use ruststream::Headers;
    use ruststream_nats::testing::TestApp;

    #[tokio::test(start_paused = true)]
    async fn routed_registrations_read_their_prefixed_subjects() {
        let _serial = SERIAL.lock().await;
        LOG.lock().unwrap().clear();
        let t = TestApp::start(app(NatsBroker::new("nats://unused:4222")))
            .await
            .expect("the app starts");
        // The unprefixed subjects reach nobody.
        for subject in ["invoices.issued", "orders.refunded"] {
            t.publish_raw(subject, Headers::new(), json(9))
                .await
                .unwrap();
        }
        t.settle().await;
        assert!(LOG.lock().unwrap().is_empty());

        t.publish_raw("billing.invoices.issued", Headers::new(), json(1))
            .await
            .unwrap();
        t.settle().await;
        t.publish_raw("shop.orders.created", Headers::new(), json(2))
            .await
            .unwrap();
        t.settle().await;
        t.publish_raw("shop.eu.orders.refunded", Headers::new(), json(3))
            .await
            .unwrap();
        t.settle().await;
        assert_eq!(*LOG.lock().unwrap(), expected());
        let consumer = t
            .nats()
            .consumer_info("SHOP", "shop_created")
            .expect("the consumer exists");
        assert_eq!((consumer.delivered, consumer.ack_pending), (1, 0));
        assert_eq!(t.nats().acknowledgements("SHOP", "shop_created"), ["+ACK"]);
        t.shutdown().await.unwrap();
    }
}

mod live {
    use super::support::nats::{PATIENCE, connect_jetstream, consumer_info, create_stream};
    use super::*;
    use ruststream::App as _;
    use ruststream_test_server::NatsServer;
    use ruststream_test_server::client::{Recorder as Wire, eventually, wait_until};

    #[tokio::test]
    async fn routed_registrations_read_their_prefixed_subjects_on_the_wire() {
        let _serial = SERIAL.lock().await;
        LOG.lock().unwrap().clear();
        let server = NatsServer::start();
        let (client, js) = connect_jetstream(&server).await;
        create_stream(&js, "SHOP", ["shop.>"]).await;
        let wire = Wire::start(&client, ["$JS.ACK.>"]).await;
        let running = app(NatsBroker::new(server.url()))
            .start(ruststream::Env::new())
            .await
            .expect("the app starts");

        let info = consumer_info(&js, "SHOP", "shop_created").await;
        assert_eq!(info.config.filter_subject, "shop.orders.created");

        client
            .publish("billing.invoices.issued", json(1).into())
            .await
            .unwrap();
        client.flush().await.unwrap();
        wait_until(PATIENCE, "book ran", || LOG.lock().unwrap().len() >= 4).await;
        js.publish("shop.orders.created", json(2).into())
            .await
            .unwrap()
            .await
            .unwrap();
        eventually(PATIENCE, "created acknowledged", || async {
            (wire.acks("SHOP", "shop_created") == ["+ACK"]).then_some(())
        })
        .await;
        client
            .publish("shop.eu.orders.refunded", json(3).into())
            .await
            .unwrap();
        client.flush().await.unwrap();
        wait_until(PATIENCE, "refunded ran", || LOG.lock().unwrap().len() >= 13).await;
        assert_eq!(*LOG.lock().unwrap(), expected());
        running.stop().await.expect("a clean stop");
    }
}
