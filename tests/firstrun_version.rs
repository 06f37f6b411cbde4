//! The server's version, read from its `INFO` at connect: below `MIN_SERVER_VERSION` the app
//! warns. No such old nats-server is installed, so a listener speaks the start of the protocol
//! as one would (`INFO` with version 2.8.4, `PONG` to every `PING`); async-nats connects to it
//! over a real TCP connection.

mod support;

use std::time::Duration;

use ruststream::{App, AppInfo, Env, RustStream};
use ruststream_nats::{MIN_SERVER_VERSION, NatsBroker};
use support::logs::Logs;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::TcpListener;

/// Accepts connections and answers as a nats-server of `version` would, up to `PONG`.
async fn old_server(version: &'static str) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let port = listener.local_addr().expect("its address").port();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (read, mut write) = socket.into_split();
                let info = format!(
                    "INFO {{\"server_id\":\"OLD\",\"server_name\":\"old\",\"version\":\"{version}\",\"proto\":1,\"host\":\"127.0.0.1\",\"port\":{port},\"headers\":true,\"max_payload\":1048576,\"jetstream\":true}}\r\n"
                );
                if write.write_all(info.as_bytes()).await.is_err() {
                    return;
                }
                let mut lines = BufReader::new(read).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if line.starts_with("PING") && write.write_all(b"PONG\r\n").await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

#[tokio::test(flavor = "current_thread")]
async fn a_server_older_than_the_minimum_is_warned_about_at_connect() {
    assert_eq!(MIN_SERVER_VERSION, (2, 9, 10));
    let captured = Logs::default();
    let _guard = captured.install_at(tracing::Level::WARN);

    let port = old_server("2.8.4").await;
    let app = RustStream::new(AppInfo::new("old", "0.1.0")).with_broker(
        NatsBroker::new(format!("nats://127.0.0.1:{port}"))
            .connection_timeout(Duration::from_secs(5)),
        |_| {},
    );
    // The listener is no server: what comes after the connect does not matter here.
    let started = tokio::time::timeout(Duration::from_secs(20), app.start(Env::new())).await;
    if let Ok(Ok(running)) = started {
        let _ = tokio::time::timeout(Duration::from_secs(5), running.stop()).await;
    }
    let logs = captured.text();
    assert!(
        logs.contains("nats-server 2.8.4 is older than 2.9.10, the oldest RustStream supports"),
        "{logs}"
    );
}
