//! Credentials as users write them, against a real nats-server configured for them: in the URL
//! (`nats://user:password@host`, `nats://TOKEN@host`, several servers), never shown anywhere.
//! Every log line of every target is captured at TRACE and searched for the secret, on a
//! successful connect, a refused one and an unreachable server; so are `describe`, the broker's
//! `Debug` and the errors' `Display` and `Debug`.

mod support;

use ruststream::broker::BrokerUrl;
use ruststream::{AppInfo, Env, ErrorKind, HandlerOutcome, RustStream};
use ruststream_nats::{CoreSubject, NatsBroker};
use ruststream_test_server::NatsServer;
use ruststream_test_server::client::publish_core;
use support::nats::{Scripted, start, start_with};
use support::security::{Captured, assert_never_shown, capture};

/// A password with what a URL parser trips on: unencoded `/`, `?`, `:` and `#`.
const PASSWORD: &str = "Pw/9x?q:z#Lm2";

/// A server asking for `alice` and [`PASSWORD`] (or `password` when given).
fn server_with_password(password: &str) -> NatsServer {
    NatsServer::builder()
        .config(format!(
            "authorization {{ user: alice, password: \"{password}\" }}"
        ))
        .start()
}

fn with_credentials(server: &NatsServer, userinfo: &str) -> String {
    format!("nats://{userinfo}@127.0.0.1:{}", server.port())
}

/// The broker's `describe` line and `Debug`, where a secret could show.
fn shown(broker: &NatsBroker) -> Vec<(&'static str, String)> {
    let app = RustStream::new(AppInfo::new("security", "0.1.0")).with_broker(broker.clone(), |b| {
        b.include(
            CoreSubject::new("notices.sent").handler(Scripted::always(HandlerOutcome::ack())),
        );
    });
    vec![
        ("describe", ruststream::app::cli::describe(&app)),
        ("the broker's Debug", format!("{broker:?}")),
        ("the broker's address", ruststream::Broker::address(broker)),
    ]
}

/// Starts an app reading `notices.sent` with `broker`, proves a message gets through (the
/// credentials authenticated), and stops it.
async fn serves(server: &NatsServer, broker: NatsBroker, client_auth: async_nats::ConnectOptions) {
    let handler = Scripted::always(HandlerOutcome::ack());
    let app = start(broker, |b| {
        b.include(CoreSubject::new("notices.sent").handler(handler.clone()));
    })
    .await
    .unwrap_or_else(|err| panic!("the app starts with the URL's credentials: {err}"));
    let client = client_auth
        .connect(server.url())
        .await
        .expect("the test client connects");
    publish_core(&client, "notices.sent", &[], r#"{"id":1}"#).await;
    let seen = handler.until_seen(1).await;
    assert_eq!(seen[0].id, 1);
    app.stop().await.expect("the app stops");
}

#[tokio::test]
async fn a_password_in_the_url_authenticates_and_is_never_shown() {
    let captured = capture();
    let server = server_with_password(PASSWORD);
    let broker = NatsBroker::new(with_credentials(&server, &format!("alice:{PASSWORD}")));
    let texts = shown(&broker);
    assert!(
        texts[0].1.contains(&format!("127.0.0.1:{}", server.port())),
        "describe names the server: {}",
        texts[0].1
    );
    serves(
        &server,
        broker,
        async_nats::ConnectOptions::with_user_and_password("alice".into(), PASSWORD.into()),
    )
    .await;
    assert_connected_at_trace(&captured);
    assert_never_shown(&captured, PASSWORD, &texts);
}

#[tokio::test]
async fn a_password_in_nats_url_authenticates_and_is_never_shown() {
    let captured = capture();
    let server = server_with_password(PASSWORD);
    // The code's URL has no credentials; `NATS_URL` (or `run --url`) brings them.
    let given = BrokerUrl {
        url: with_credentials(&server, &format!("alice:{PASSWORD}")),
        from: "NATS_URL",
    };
    let env = Env::new().with(given.clone());
    let given_debug = format!("{given:?}");
    assert!(
        given_debug.contains(&format!("127.0.0.1:{}", server.port())),
        "the given URL's Debug names the server: {given_debug}"
    );
    let mut texts = shown(&NatsBroker::new(server.url()));
    texts.push(("the given URL's Debug", given_debug));
    texts.push(("the environment's Debug", format!("{env:?}")));
    let handler = Scripted::always(HandlerOutcome::ack());
    let app = start_with(NatsBroker::new(server.url()), env, |b| {
        b.include(CoreSubject::new("notices.sent").handler(handler.clone()));
    })
    .await
    .unwrap_or_else(|err| panic!("the app starts with NATS_URL's credentials: {err}"));
    texts.push(("the running app's Debug", format!("{app:?}")));
    let client =
        async_nats::ConnectOptions::with_user_and_password("alice".into(), PASSWORD.into())
            .connect(server.url())
            .await
            .expect("the test client connects");
    publish_core(&client, "notices.sent", &[], r#"{"id":1}"#).await;
    assert_eq!(handler.until_seen(1).await[0].id, 1);
    app.stop().await.expect("the app stops");
    assert_connected_at_trace(&captured);
    assert_never_shown(&captured, PASSWORD, &texts);
}

#[tokio::test]
async fn a_percent_encoded_password_authenticates() {
    let _captured = capture();
    let password = "p@ss,w%rd";
    let server = server_with_password(password);
    let broker = NatsBroker::new(with_credentials(&server, "alice:p%40ss%2Cw%25rd"));
    serves(
        &server,
        broker,
        async_nats::ConnectOptions::with_user_and_password("alice".into(), password.into()),
    )
    .await;
}

#[tokio::test]
async fn a_token_in_the_url_authenticates_and_is_never_shown() {
    let captured = capture();
    let token = "T0k3n-in-the-url-7f1c";
    let server = NatsServer::builder()
        .config(format!("authorization {{ token: \"{token}\" }}"))
        .start();
    let broker = NatsBroker::new(with_credentials(&server, token));
    let texts = shown(&broker);
    serves(
        &server,
        broker,
        async_nats::ConnectOptions::with_token(token.into()),
    )
    .await;
    assert_never_shown(&captured, token, &texts);
}

#[tokio::test]
async fn several_servers_in_one_url_share_the_credentials() {
    let captured = capture();
    let password = "several-Servers/Pw?1";
    let server = server_with_password(password);
    // The first server is unreachable: the client moves on to the second.
    let nobody = closed_port();
    let url = format!(
        "nats://alice:{password}@127.0.0.1:{nobody}, nats://alice:{password}@127.0.0.1:{}",
        server.port()
    );
    let broker = NatsBroker::new(url);
    let texts = shown(&broker);
    assert!(
        texts[0].1.contains(&format!(
            "nats://127.0.0.1:{nobody},nats://127.0.0.1:{}",
            server.port()
        )),
        "describe lists both servers: {}",
        texts[0].1
    );
    serves(
        &server,
        broker,
        async_nats::ConnectOptions::with_user_and_password("alice".into(), password.into()),
    )
    .await;
    assert_never_shown(&captured, password, &texts);
}

#[tokio::test]
async fn servers_with_different_credentials_refuse_to_start() {
    let captured = capture();
    let server = server_with_password(PASSWORD);
    let url = format!(
        "nats://alice:firstSecret@127.0.0.1:{port},nats://alice:secondSecret@127.0.0.1:{port}",
        port = server.port()
    );
    let err = start(NatsBroker::new(url), |b| {
        b.include(
            CoreSubject::new("notices.sent").handler(Scripted::always(HandlerOutcome::ack())),
        );
    })
    .await
    .expect_err("two credentials for one connection are refused");
    assert_eq!(err.kind(), ErrorKind::Config);
    let message = err.to_string();
    assert!(message.contains("same credentials"), "{message}");
    for secret in ["firstSecret", "secondSecret"] {
        assert_never_shown(
            &captured,
            secret,
            &[("Display", message.clone()), ("Debug", format!("{err:?}"))],
        );
    }
}

#[tokio::test]
async fn a_wrong_password_stops_the_app_at_startup_without_showing_it() {
    let captured = capture();
    let server = server_with_password(PASSWORD);
    let wrong = "Wrong/Pass?word-55";
    let broker = NatsBroker::new(with_credentials(&server, &format!("alice:{wrong}")));
    let texts = shown(&broker);
    let err = start(broker, |b| {
        b.include(
            CoreSubject::new("notices.sent").handler(Scripted::always(HandlerOutcome::ack())),
        );
    })
    .await
    .expect_err("the server refuses the password");
    assert_eq!(err.kind(), ErrorKind::Connect);
    let message = err.to_string();
    assert!(
        message.contains(&format!("nats://127.0.0.1:{}", server.port())),
        "the error names the server: {message}"
    );
    assert!(
        message.contains("refused the user and password"),
        "the error says what went wrong and what to check: {message}"
    );
    let mut all = texts;
    all.push(("the error's Display", message));
    all.push(("the error's Debug", format!("{err:?}")));
    assert_never_shown(&captured, wrong, &all);
}

#[tokio::test]
async fn no_credentials_for_a_server_that_asks_says_how_to_give_them() {
    let _captured = capture();
    let server = server_with_password(PASSWORD);
    let err = start(NatsBroker::new(server.url()), |b| {
        b.include(
            CoreSubject::new("notices.sent").handler(Scripted::always(HandlerOutcome::ack())),
        );
    })
    .await
    .expect_err("the server asks for credentials");
    assert_eq!(err.kind(), ErrorKind::Connect);
    let message = err.to_string();
    assert!(message.contains(&server.url()), "{message}");
    assert!(message.contains("gives none"), "{message}");
    assert!(message.contains(".user_and_password(..)"), "{message}");
}

#[tokio::test]
async fn an_unreachable_server_is_named_without_the_secret() {
    let captured = capture();
    let secret = "Unreachable/Secret?77";
    let port = closed_port();
    let broker = NatsBroker::new(format!("nats://alice:{secret}@127.0.0.1:{port}"));
    let texts = shown(&broker);
    let err = start(broker, |b| {
        b.include(
            CoreSubject::new("notices.sent").handler(Scripted::always(HandlerOutcome::ack())),
        );
    })
    .await
    .expect_err("nothing listens there");
    assert_eq!(err.kind(), ErrorKind::Connect);
    let message = err.to_string();
    assert!(
        message.contains(&format!("nats://127.0.0.1:{port}")),
        "{message}"
    );
    assert!(message.contains("nats-server runs there"), "{message}");
    let mut all = texts;
    all.push(("the error's Display", message));
    all.push(("the error's Debug", format!("{err:?}")));
    assert_never_shown(&captured, secret, &all);
}

/// The capture really runs at TRACE for async-nats: its connect is logged there.
fn assert_connected_at_trace(captured: &Captured) {
    let lines = captured.lines_with(&["TRACE", "async_nats", "CONNECT"]);
    assert!(
        !lines.is_empty(),
        "async-nats's CONNECT was not captured at TRACE:\n{}",
        captured.text()
    );
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let port = listener.local_addr().expect("its address").port();
    drop(listener);
    port
}
