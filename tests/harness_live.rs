//! Live tests of the test support against a real `nats-server`.

use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt;
use ruststream_test_server::NatsServer;
use ruststream_test_server::client::{self, Recorder};

/// Generous bound for any single network step, so a hang fails instead of stalling CI.
const STEP: Duration = Duration::from_secs(10);

/// Subscribes `client` to `subject`, publishes `payload` there, and returns what the subscriber
/// got.
async fn publish_and_receive(
    client: &async_nats::Client,
    subject: &'static str,
    payload: &'static str,
) -> async_nats::Message {
    let mut subscriber = client.subscribe(subject).await.expect("subscribe");
    client.flush().await.expect("flush the subscription");
    client
        .publish(subject, payload.into())
        .await
        .expect("publish");
    tokio::time::timeout(STEP, subscriber.next())
        .await
        .expect("a message within the deadline")
        .expect("subscription still open")
}

#[tokio::test]
async fn core_publish_reaches_a_subscriber() {
    eprintln!("running against {}", NatsServer::version());
    let server = NatsServer::start();
    assert!(server.url().ends_with(&format!(":{}", server.port())));

    let client = async_nats::connect(server.url()).await.expect("connect");
    let message = publish_and_receive(&client, "greetings", "hello").await;

    assert_eq!(message.subject.as_str(), "greetings");
    assert_eq!(&message.payload[..], b"hello");
}

#[tokio::test]
async fn jetstream_messages_survive_stop_and_restart_on_the_same_port() {
    let mut server = NatsServer::start();
    let port = server.port();

    let client = async_nats::connect(server.url()).await.expect("connect");
    let js = jetstream::new(client);
    js.create_stream(stream::Config {
        name: "ORDERS".to_owned(),
        subjects: vec!["orders.>".to_owned()],
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await
    .expect("create stream");
    let ack = tokio::time::timeout(
        STEP,
        js.publish("orders.created", "order-1".into())
            .await
            .expect("publish"),
    )
    .await
    .expect("publish ack within the deadline")
    .expect("publish ack");
    assert_eq!(ack.stream, "ORDERS");
    assert_eq!(ack.sequence, 1);
    drop(js);

    server.stop();
    assert!(!server.is_running());
    assert!(
        server.store_dir().join("jetstream").is_dir(),
        "store kept after stop: {}",
        server.store_dir().display()
    );

    server.restart();
    assert_eq!(server.port(), port, "restart keeps the port");

    let client = async_nats::connect(server.url()).await.expect("reconnect");
    let js = jetstream::new(client);
    let mut orders = js.get_stream("ORDERS").await.expect("stream after restart");
    let info = orders.info().await.expect("stream info");
    assert_eq!(info.state.messages, 1, "{}", server.log_tail());
    assert_eq!(info.config.storage, stream::StorageType::File);

    let message = orders
        .get_raw_message(ack.sequence)
        .await
        .expect("message by sequence");
    assert_eq!(message.sequence, 1);
    assert_eq!(message.subject.as_str(), "orders.created");
    assert_eq!(&message.payload[..], b"order-1");
}

#[tokio::test]
async fn config_file_requires_user_and_password() {
    let server = NatsServer::builder()
        .config(
            r#"
            authorization {
              user: alice
              password: "s3cret"
            }
            "#,
        )
        .start();

    let anonymous = async_nats::connect(server.url()).await;
    let error = anonymous.expect_err("connecting without credentials must fail");
    assert_eq!(
        error.kind(),
        async_nats::ConnectErrorKind::AuthorizationViolation,
        "{error}"
    );

    let wrong = async_nats::ConnectOptions::new()
        .user_and_password("alice".into(), "wrong".into())
        .connect(server.url())
        .await;
    assert!(wrong.is_err(), "a wrong password must fail");

    let client = async_nats::ConnectOptions::new()
        .user_and_password("alice".into(), "s3cret".into())
        .connect(server.url())
        .await
        .expect("connect with credentials");
    let message = publish_and_receive(&client, "secured", "ok").await;
    assert_eq!(&message.payload[..], b"ok");
}

#[test]
fn sync_tests_can_use_it_too_and_drop_removes_the_temp_dir() {
    let server = NatsServer::builder().jetstream(false).start();
    let store = server.store_dir().to_path_buf();
    let temp_dir = store.parent().expect("store inside temp dir").to_path_buf();
    assert!(temp_dir.is_dir());
    std::net::TcpStream::connect(("127.0.0.1", server.port())).expect("tcp connect");
    drop(server);
    assert!(!temp_dir.exists(), "temp dir removed on drop");
}

#[tokio::test]
async fn a_recorder_gets_what_its_subjects_get_from_when_it_starts() {
    let server = NatsServer::start();
    let client = client::connect(&server).await;
    client
        .publish("orders.early", "before".into())
        .await
        .expect("publish");
    let everything = Recorder::start(&client, [">"]).await;
    let orders = Recorder::start(&client, ["orders.*", "audit.>"]).await;

    client::publish_core(&client, "orders.created", &[], "one").await;
    client::publish_core(&client, "audit.eu.login", &[("who", "alice")], "two").await;
    client::publish_core(&client, "elsewhere", &[], "three").await;

    let got = orders.until(2).await;
    let got: Vec<(&str, &[u8])> = got
        .iter()
        .map(|m| (m.subject.as_str(), &m.payload[..]))
        .collect();
    assert_eq!(
        got,
        [("orders.created", &b"one"[..]), ("audit.eu.login", b"two")]
    );
    let audit = orders.matching("audit.*.login");
    let who = audit[0].headers.as_ref().and_then(|h| h.get("who"));
    assert_eq!(who.map(|v| v.as_str()), Some("alice"));

    // `>` gets everything after it started, but no recorder's start marker.
    let all = everything.until(3).await;
    let subjects: Vec<&str> = all.iter().map(|m| m.subject.as_str()).collect();
    assert_eq!(subjects, ["orders.created", "audit.eu.login", "elsewhere"]);
    assert_eq!(orders.messages().len(), 2, "`elsewhere` is not its");
}

#[tokio::test]
async fn streams_and_consumers_read_as_the_server_reports_them() {
    let server = NatsServer::start();
    let (_client, js) = client::connect_jetstream(&server).await;
    client::create_stream(&js, "ORDERS", ["orders.>"]).await;

    assert_eq!(
        client::publish_stored(&js, "orders.created", "one").await,
        1
    );
    let headers = [("trace-id", "t-2")];
    let second = client::publish_stored_with(&js, "orders.shipped", &headers, "two").await;
    assert_eq!(second, 2);
    let messages = client::stream_messages(&js, "ORDERS").await;
    let stored: Vec<(u64, &str, &[u8])> = messages
        .iter()
        .map(|m| (m.sequence, m.subject.as_str(), &m.payload[..]))
        .collect();
    assert_eq!(
        stored,
        [
            (1, "orders.created", &b"one"[..]),
            (2, "orders.shipped", b"two")
        ]
    );
    let trace = messages[1].headers.get("trace-id").map(|v| v.as_str());
    assert_eq!(trace, Some("t-2"));

    js.get_stream("ORDERS")
        .await
        .expect("the stream")
        .create_consumer(consumer::pull::Config {
            durable_name: Some("worker".to_owned()),
            ..Default::default()
        })
        .await
        .expect("the consumer is created");
    let info = client::consumer_info(&js, "ORDERS", "worker").await;
    assert_eq!((info.name.as_str(), info.num_pending), ("worker", 2));
    let info = client::consumer_until(&js, "ORDERS", "worker", "both pending", |i| {
        i.num_pending == 2 && i.num_ack_pending == 0
    })
    .await;
    assert_eq!(info.delivered.consumer_sequence, 0);
}

#[tokio::test]
async fn a_wait_returns_once_its_condition_holds() {
    let mut asked = 0;
    client::wait_until(STEP, "the third question", || {
        asked += 1;
        asked == 3
    })
    .await;
    assert_eq!(asked, 3);

    let mut asked = 0;
    let value = client::eventually(STEP, "an answer", || {
        asked += 1;
        let answer = (asked == 2).then_some("yes");
        async move { answer }
    })
    .await;
    assert_eq!((value, asked), ("yes", 2));
}

/// `try_start` says why a server did not start (the payments demo falls back to the embedded
/// NATS on it) instead of panicking; `start` panics with the same text.
#[test]
fn a_server_that_cannot_start_is_an_error() {
    let err = NatsServer::builder()
        .config_file("/nonexistent/nats-server.conf")
        .try_start()
        .expect_err("no such configuration file");
    assert!(
        err.to_string()
            .contains("config file /nonexistent/nats-server.conf does not exist"),
        "{err}"
    );

    // The binary runs and exits at once: the error says so, with the server's own words.
    let err = NatsServer::builder()
        .arg("--no-such-option")
        .try_start()
        .expect_err("nats-server refuses an unknown option");
    let text = err.to_string();
    assert!(text.contains("exited before it was ready"), "{text}");
    assert!(
        text.contains("flag provided but not defined: -no-such-option"),
        "{text}"
    );
}
