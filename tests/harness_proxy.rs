//! The fault proxy against a real `nats-server`: a cut closes the client's connection while the
//! server runs on, a stall holds bytes without closing anything, a heal lets the client back.

use std::time::Duration;

use async_nats::connection::State;
use futures::StreamExt;
use ruststream_test_server::NatsServer;
use ruststream_test_server::client::wait_until;
use ruststream_test_server::proxy::Proxy;

/// Generous bound for any single step, so a hang fails instead of stalling CI.
const STEP: Duration = Duration::from_secs(10);

async fn round_trip(client: &async_nats::Client, subject: &str) -> Result<(), String> {
    let mut subscriber = client
        .subscribe(subject.to_owned())
        .await
        .map_err(|e| e.to_string())?;
    client
        .publish(subject.to_owned(), "ping".into())
        .await
        .map_err(|e| e.to_string())?;
    match tokio::time::timeout(Duration::from_millis(500), subscriber.next()).await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err("the subscription closed".into()),
        Err(_) => Err("no answer within 500 ms".into()),
    }
}

#[tokio::test]
async fn a_cut_link_closes_the_connection_and_a_heal_lets_the_client_back() {
    eprintln!("running against {}", NatsServer::version());
    let mut server = NatsServer::start();
    let proxy = Proxy::start(server.port());
    let client = async_nats::ConnectOptions::new()
        .retry_on_initial_connect()
        .connect(proxy.url())
        .await
        .expect("the client connects through the proxy");
    round_trip(&client, "through.proxy")
        .await
        .expect("messages pass an open link");
    assert_eq!(proxy.connections(), 1);

    proxy.cut();
    wait_until(STEP, "the client sees the link cut", || {
        client.connection_state() != State::Connected
    })
    .await;
    // The server never stopped.
    assert!(server.is_running());
    // Reconnections are refused while the link is cut.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_ne!(client.connection_state(), State::Connected);

    proxy.heal();
    wait_until(STEP, "the client reconnects after the heal", || {
        client.connection_state() == State::Connected
    })
    .await;
    round_trip(&client, "after.heal")
        .await
        .expect("messages pass a healed link");
    assert!(proxy.connections() >= 2, "the client reconnected");
}

#[tokio::test]
async fn a_stalled_link_holds_bytes_without_closing_and_a_heal_releases_them() {
    let server = NatsServer::start();
    let proxy = Proxy::start(server.port());
    let client = async_nats::connect(proxy.url())
        .await
        .expect("the client connects through the proxy");
    let mut subscriber = client.subscribe("held").await.expect("subscribe");
    client.flush().await.expect("the subscription is sent");
    round_trip(&client, "warm.up").await.expect("an open link");

    proxy.stall();
    client
        .publish("held", "one".into())
        .await
        .expect("the publish is buffered");
    let held = tokio::time::timeout(Duration::from_millis(500), subscriber.next()).await;
    assert!(held.is_err(), "nothing passes a stalled link: {held:?}");
    assert_eq!(client.connection_state(), State::Connected);
    assert_eq!(proxy.connections(), 1, "the connection was not closed");

    proxy.heal();
    let released = tokio::time::timeout(STEP, subscriber.next())
        .await
        .expect("the held message arrives after the heal")
        .expect("the subscription is open");
    assert_eq!(&released.payload[..], b"one");
    assert_eq!(proxy.connections(), 1);
}
