//! Connection control, against a real nats-server: `NatsBroker::with_options` applies
//! async-nats's own `ConnectOptions` (the server's monitoring sees the name and the inbox
//! prefix) under the URL's credentials, and `NatsBroker::from_client` runs on a client the app
//! connected, leaving it open, and refuses settings it cannot apply.

mod support;

use std::time::Duration;

use ruststream::broker::BrokerUrl;
use ruststream::{Env, ErrorKind, HandlerOutcome};
use ruststream_nats::{CoreSubject, JetStreamSubject, NatsBroker};
use ruststream_test_server::client::{
    consumer_until, create_stream, eventually, publish_core, publish_stored,
};
use ruststream_test_server::cluster::{free_port, monitor_json};
use ruststream_test_server::{NatsServer, client};
use support::nats::{Scripted, start, start_with};
use support::security::{assert_never_shown, capture};

const TOKEN: &str = "s3cret-t0ken";

fn server_with_token() -> NatsServer {
    NatsServer::builder()
        .config(format!("authorization {{ token: \"{TOKEN}\" }}"))
        .start()
}

/// The app's Core handler on `notices.sent` receives a message a client with `TOKEN` sends.
async fn serves(server: &NatsServer, broker: NatsBroker) {
    let handler = Scripted::always(HandlerOutcome::ack());
    let app = start(broker, |b| {
        b.include(CoreSubject::new("notices.sent").handler(handler.clone()));
    })
    .await
    .unwrap_or_else(|err| panic!("the app starts: {err}"));
    let client = async_nats::ConnectOptions::with_token(TOKEN.into())
        .connect(server.url())
        .await
        .expect("the test client connects");
    publish_core(&client, "notices.sent", &[], r#"{"id":1}"#).await;
    assert_eq!(handler.until_seen(1).await[0].id, 1);
    app.stop().await.expect("the app stops");
}

#[tokio::test]
async fn the_clients_own_options_reach_the_server() {
    let monitor = free_port();
    let server = NatsServer::builder()
        .arg("-m")
        .arg(monitor.to_string())
        .start();
    let (_client, js) = client::connect_jetstream(&server).await;
    create_stream(&js, "ORDERS", &["orders.>"]).await;
    let handler = Scripted::always(HandlerOutcome::ack());
    let broker = NatsBroker::new(server.url()).with_options(
        async_nats::ConnectOptions::new()
            .name("orders-service")
            .custom_inbox_prefix("_ORDERS_INBOX")
            .ping_interval(Duration::from_secs(7)),
    );
    let app = start(broker, |b| {
        b.include(
            JetStreamSubject::new("orders.created", "ORDERS")
                .durable("worker")
                .handler(handler.clone()),
        );
    })
    .await
    .expect("the app starts");
    publish_stored(&js, "orders.created", r#"{"id":1}"#).await;
    assert_eq!(handler.until_seen(1).await[0].id, 1);
    consumer_until(&js, "ORDERS", "worker", "the order acknowledged", |info| {
        info.num_ack_pending == 0 && info.ack_floor.stream_sequence == 1
    })
    .await;
    // The server's view: a connection with the options' name, its pull requests answered on
    // the options' inbox prefix.
    let connz = eventually(Duration::from_secs(10), "the named connection", || async {
        let connz = monitor_json(monitor, "/connz?subs=1")?;
        let conn = connz["connections"]
            .as_array()?
            .iter()
            .find(|c| c["name"] == "orders-service")?
            .clone();
        Some(conn)
    })
    .await;
    let subs: Vec<&str> = connz["subscriptions_list"]
        .as_array()
        .expect("the connection's subscriptions")
        .iter()
        .filter_map(|s| s.as_str())
        .collect();
    assert!(
        subs.iter().any(|s| s.starts_with("_ORDERS_INBOX.")),
        "the pull consumer's inbox uses the options' prefix: {subs:?}"
    );
    app.stop().await.expect("the app stops");
}

#[tokio::test]
async fn the_options_credentials_authenticate_and_are_never_shown() {
    let captured = capture();
    let server = server_with_token();
    let broker = NatsBroker::new(server.url())
        .with_options(async_nats::ConnectOptions::with_token(TOKEN.into()));
    let debug = format!("{broker:?}");
    serves(&server, broker).await;
    assert_never_shown(&captured, TOKEN, &[("the broker's Debug", debug)]);
}

#[tokio::test]
async fn the_urls_credentials_replace_the_options() {
    let server = server_with_token();
    let url = format!("nats://{TOKEN}@127.0.0.1:{}", server.port());
    let broker =
        NatsBroker::new(url).with_options(async_nats::ConnectOptions::with_token("wrong".into()));
    serves(&server, broker).await;
}

#[tokio::test]
async fn refused_options_credentials_name_with_options() {
    let server = server_with_token();
    let broker = NatsBroker::new(server.url())
        .with_options(async_nats::ConnectOptions::with_token("wrong".into()));
    let err = start(broker, |b| {
        b.include(
            CoreSubject::new("notices.sent").handler(Scripted::always(HandlerOutcome::ack())),
        );
    })
    .await
    .expect_err("a wrong token is refused");
    let shown = format!("{err}");
    assert_eq!(err.kind(), ErrorKind::Connect, "{shown}");
    assert!(shown.contains(".with_options(..)"), "{shown}");
}

#[tokio::test]
async fn an_app_runs_on_a_client_it_connected_and_leaves_it_open() {
    let captured = capture();
    let server = NatsServer::start();
    let own = client::connect(&server).await;
    let handler = Scripted::always(HandlerOutcome::ack());
    // An operator's URL does not move a client the app connected: it warns.
    let env = Env::new().with(BrokerUrl {
        url: "nats://127.0.0.1:1".into(),
        from: "NATS_URL",
    });
    let app = start_with(NatsBroker::from_client(own.clone()), env, |b| {
        b.include(CoreSubject::new("notices.sent").handler(handler.clone()));
    })
    .await
    .expect("the app starts on the given client");
    let sender = client::connect(&server).await;
    publish_core(&sender, "notices.sent", &[], r#"{"id":7}"#).await;
    assert_eq!(handler.until_seen(1).await[0].id, 7);
    app.stop().await.expect("the app stops");
    assert!(
        !captured
            .lines_with(&["is not used", "NATS_URL", "from_client"])
            .is_empty(),
        "a warning says the URL is not used"
    );
    // Still the app's: it still carries messages after the app stopped.
    // One connection: the server takes its SUB before its PUB, and echoes the message back.
    let mut echo = own.subscribe("after.stop").await.unwrap();
    own.publish("after.stop", "still here".into())
        .await
        .unwrap();
    own.flush().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), futures::StreamExt::next(&mut echo))
        .await
        .expect("the message arrives")
        .expect("the subscription is open");
    assert_eq!(&got.payload[..], b"still here");
}

#[tokio::test]
async fn a_client_the_app_connected_takes_no_connection_settings() {
    let server = NatsServer::start();
    let own = client::connect(&server).await;
    let err = start(
        NatsBroker::from_client(own)
            .token("ignored")
            .connection_name("x"),
        |b| {
            b.include(
                CoreSubject::new("notices.sent").handler(Scripted::always(HandlerOutcome::ack())),
            );
        },
    )
    .await
    .expect_err("settings a connected client cannot take stop the start");
    let shown = format!("{err}");
    assert_eq!(err.kind(), ErrorKind::Config, "{shown}");
    assert!(
        shown.contains(".token(..)") && shown.contains(".connection_name(..)"),
        "{shown}"
    );
}

/// The same app, connection options and all, runs unchanged on the in-process NATS.
#[tokio::test(start_paused = true)]
async fn an_app_with_connection_options_runs_in_process() {
    use ruststream::App as _;
    use ruststream_nats::testing::TestApp;

    let handler = Scripted::always(HandlerOutcome::ack());
    let broker = NatsBroker::new("nats://nats.internal:4222").with_options(
        async_nats::ConnectOptions::new()
            .ping_interval(Duration::from_secs(10))
            .name("orders-service"),
    );
    let app = ruststream::RustStream::new(ruststream::AppInfo::new("orders", "0.1.0")).with_broker(
        broker,
        |b| {
            b.include(CoreSubject::new("notices.sent").handler(handler.clone()));
        },
    );
    assert_eq!(app.info().name(), "orders");
    let t = TestApp::start(app)
        .await
        .expect("the app starts in process");
    t.publish("notices.sent", &serde_json::json!({ "id": 3 }))
        .await
        .unwrap();
    t.settle().await;
    assert_eq!(handler.delivered().len(), 1);
    t.shutdown().await.expect("the app stops");
}
