//! Live tests of the test support against a real `nats-server`.

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use futures::StreamExt;
use ruststream_test_server::NatsServer;

/// Generous bound for any single network step, so a hang fails instead of stalling CI.
const STEP: Duration = Duration::from_secs(10);

#[tokio::test]
async fn core_publish_reaches_a_subscriber() {
    eprintln!("running against {}", NatsServer::version());
    let server = NatsServer::start();
    assert!(server.url().ends_with(&format!(":{}", server.port())));

    let client = async_nats::connect(server.url()).await.expect("connect");
    let mut subscriber = client.subscribe("greetings").await.expect("subscribe");
    client.flush().await.expect("flush the subscription");

    client
        .publish("greetings", "hello".into())
        .await
        .expect("publish");
    let message = tokio::time::timeout(STEP, subscriber.next())
        .await
        .expect("a message within the deadline")
        .expect("subscription still open");

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
    let mut subscriber = client.subscribe("secured").await.expect("subscribe");
    client.flush().await.expect("flush");
    client
        .publish("secured", "ok".into())
        .await
        .expect("publish");
    let message = tokio::time::timeout(STEP, subscriber.next())
        .await
        .expect("a message within the deadline")
        .expect("subscription still open");
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
