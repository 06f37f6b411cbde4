//! What the `examples_*` tests share: an example's unchanged `app()` on a real nats-server, and
//! the questions a test asks that server (consumer info, stream contents, what was published
//! where, the acknowledgements on the wire) through async-nats.
//!
//! The examples hard-code `nats://localhost:4222`. [`Live::start`] points the app at the test's
//! own server without touching its code: the app's `Env` carries a `TransportOverride` holding
//! a connection to that server, which every `NatsBroker` of the app uses instead of its URL.
//! Everything above the connection (consumers, settlement, copies, dead letters) is the
//! production runtime.
//!
//! In process, the same apps run on `ruststream_nats::testing::TestApp`.

#![allow(dead_code)]

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt as _;
use ruststream::{App, Env, Observer, RunningApp};
use ruststream_nats::testing::{Recorder, streams_of};
use ruststream_nats::transport::TransportOverride;
use ruststream_nats::transport::nats::NatsTransport;
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use ruststream_test_server::NatsServer;

/// How long a live test waits for something that should happen.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// How long a live test watches for something that should not happen.
pub const QUIET: Duration = Duration::from_millis(500);

/// An app running on a real nats-server, and a client to ask the server what it saw.
pub struct Live {
    /// The test's own connection.
    pub client: async_nats::Client,
    /// JetStream over the test's connection.
    pub js: jetstream::Context,
    recorder: Arc<Recorder>,
    wire: Arc<Mutex<Vec<async_nats::Message>>>,
    running: Option<RunningApp>,
    // Last: killed after everything else let go of it.
    server: NatsServer,
}

impl Live {
    /// A new nats-server with JetStream on a random port; every message published on it is
    /// recorded from now on (a subscription to `>`).
    pub async fn server() -> Self {
        // The runtime's logs, when asked for: `RUST_LOG=ruststream_nats=debug cargo test ..`.
        if std::env::var_os("RUST_LOG").is_some() {
            ruststream::app::cli::install_tracing();
        }
        let server = NatsServer::start();
        let client = async_nats::connect(server.url())
            .await
            .expect("the test client connects");
        let js = jetstream::new(client.clone());
        let wire: Arc<Mutex<Vec<async_nats::Message>>> = Arc::default();
        let mut everything = client.subscribe(">").await.expect("subscribe to >");
        client.flush().await.expect("flush");
        let sink = Arc::clone(&wire);
        tokio::spawn(async move {
            while let Some(message) = everything.next().await {
                sink.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(message);
            }
        });
        Self {
            client,
            js,
            recorder: Arc::new(Recorder::new()),
            wire,
            running: None,
            server,
        }
    }

    /// A new server, the streams `app` reads created on it, and `app` started there.
    pub async fn run(app: impl App) -> Self {
        let mut live = Self::server().await;
        live.create_streams(&app).await;
        live.start(app).await;
        live
    }

    /// Creates the streams the app's JetStream descriptors read, each storing the subjects they
    /// read, as an operator would before the service starts.
    pub async fn create_streams(&self, app: &impl App) {
        for spec in streams_of(&app.registrations()) {
            self.js
                .create_stream(stream::Config {
                    name: spec.name,
                    subjects: spec.subjects,
                    ..Default::default()
                })
                .await
                .expect("the stream is created");
        }
    }

    /// Starts `app`, unchanged, on this server, recording every delivery its handlers take.
    pub async fn start(&mut self, app: impl App) {
        let connection = async_nats::connect(self.server.url())
            .await
            .expect("the app's connection");
        let observer: Arc<dyn Observer> = Arc::clone(&self.recorder) as Arc<dyn Observer>;
        let env = Env::new()
            .with(TransportOverride(Arc::new(NatsTransport::new(
                connection.clone(),
            ))))
            .with_observer(observer);
        let running = app
            .start(env)
            .await
            .expect("the app starts on the live server");
        // The server has every subscription of the app once this round trip is back.
        connection.flush().await.expect("flush");
        self.running = Some(running);
    }

    /// Drains the app (stops taking deliveries, lets handlers finish and settle).
    pub async fn stop(&mut self) {
        if let Some(running) = self.running.take() {
            running.stop().await.expect("a clean stop");
        }
    }

    /// The server's URL.
    pub fn url(&self) -> String {
        self.server.url()
    }

    /// Every delivery the app's handlers took.
    pub fn recorder(&self) -> &Recorder {
        &self.recorder
    }

    /// Publishes `value` as JSON to stream subject `subject`; returns its stream sequence.
    pub async fn publish_stored<T: Serialize>(&self, subject: &str, value: &T) -> u64 {
        let payload = serde_json::to_vec(value).expect("encode");
        self.js
            .publish(subject.to_owned(), payload.into())
            .await
            .expect("the publish is sent")
            .await
            .expect("the stream stored the message")
            .sequence
    }

    /// Publishes `value` as JSON to Core subject `subject`.
    pub async fn publish<T: Serialize>(&self, subject: &str, value: &T) {
        let payload = serde_json::to_vec(value).expect("encode");
        self.client
            .publish(subject.to_owned(), payload.into())
            .await
            .expect("the publish is sent");
        self.client.flush().await.expect("flush");
    }

    /// Every message the server carried on a subject `pattern` matches, in order.
    pub fn messages(&self, pattern: &str) -> Vec<async_nats::Message> {
        self.wire
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|m| matches(pattern, m.subject.as_str()))
            .cloned()
            .collect()
    }

    /// Every message on `pattern` that decodes as `T`.
    pub fn published<T: DeserializeOwned>(&self, pattern: &str) -> Vec<T> {
        self.messages(pattern)
            .iter()
            .filter_map(|m| serde_json::from_slice(&m.payload).ok())
            .collect()
    }

    /// The acknowledgements sent for `consumer` of `stream`, as their wire forms (`+ACK`,
    /// `-NAK`, `-NAK {"delay": ..}`, `+TERM`), in order.
    pub fn acks(&self, stream: &str, consumer: &str) -> Vec<String> {
        self.messages(&format!("$JS.ACK.{stream}.{consumer}.>"))
            .iter()
            .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
            .collect()
    }

    /// The consumer's info, as the server reports it.
    pub async fn consumer(&self, stream: &str, name: &str) -> consumer::Info {
        self.js
            .get_stream(stream)
            .await
            .expect("the stream exists")
            .consumer_info(name)
            .await
            .expect("the consumer exists")
    }

    /// Polls the consumer until `check` holds, and returns its info; fails after [`PATIENCE`].
    pub async fn consumer_until(
        &self,
        stream: &str,
        name: &str,
        what: &str,
        check: impl Fn(&consumer::Info) -> bool,
    ) -> consumer::Info {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let info = self.consumer(stream, name).await;
            if check(&info) {
                return info;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for consumer {stream}/{name}: {what}; last info: {info:#?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Every message `stream` stores, in sequence order.
    pub async fn stream_messages(&self, name: &str) -> Vec<jetstream::message::StreamMessage> {
        let mut stream = self.js.get_stream(name).await.expect("the stream exists");
        let state = stream
            .info()
            .await
            .expect("the stream's info")
            .state
            .clone();
        let mut out = Vec::new();
        for seq in state.first_sequence.max(1)..=state.last_sequence {
            if let Ok(message) = stream.get_raw_message(seq).await {
                out.push(message);
            }
        }
        out
    }

    /// Waits until `check` holds; fails after [`PATIENCE`].
    pub async fn until(&self, what: &str, check: impl Fn(&Self) -> bool) {
        self.until_within(PATIENCE, what, check).await;
    }

    /// Waits until `check` holds; fails after `within`.
    pub async fn until_within(&self, within: Duration, what: &str, check: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + within;
        while !check(self) {
            assert!(
                Instant::now() < deadline,
                "timed out after {within:?} waiting for: {what}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Lets the app run for [`QUIET`]: only to show that something does NOT happen.
    pub async fn quiet(&self) {
        tokio::time::sleep(QUIET).await;
    }
}

/// NATS subject matching: `*` one token, `>` the rest.
pub fn matches(pattern: &str, subject: &str) -> bool {
    let mut p = pattern.split('.');
    let mut s = subject.split('.');
    loop {
        match (p.next(), s.next()) {
            (Some(">"), Some(_)) => return true,
            (Some("*"), Some(_)) => {}
            (Some(a), Some(b)) if a == b => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// The wire form of `-NAK` with `delay`.
pub fn nak_with(delay: Duration) -> String {
    format!("-NAK {{\"delay\": {}}}", delay.as_nanos())
}
