//! What the `examples_*` tests share: an example's unchanged `app()` on a real nats-server, and
//! the questions a test asks that server (consumer info, stream contents, what was published
//! where, the acknowledgements on the wire) through async-nats (`ruststream_test_server::client`).
//!
//! The examples hard-code `nats://localhost:4222`. [`Live::start`] points the app at the test's
//! own server without touching its code: the app's `Env` carries a `TransportOverride` holding
//! a connection to that server, which every `NatsBroker` of the app uses instead of its URL.
//! Everything above the connection (consumers, settlement, copies, dead letters) is the
//! production runtime.
//!
//! In process, the same apps run on `ruststream_nats::testing::TestApp`.

// Each test crate uses a part of it.
#![allow(dead_code, unused_imports)]

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use ruststream::{App, Env, Observer, RunningApp};
use ruststream_nats::testing::{Recorder, streams_of};
use ruststream_nats::transport::TransportOverride;
use ruststream_nats::transport::nats::NatsTransport;
use ruststream_test_server::client;
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use ruststream_test_server::NatsServer;
pub use ruststream_test_server::client::{PATIENCE, nak_with};

/// How long a live test watches for something that should not happen.
pub const QUIET: Duration = Duration::from_millis(500);

/// An app running on a real nats-server, and a client to ask the server what it saw.
pub struct Live {
    /// The test's own connection.
    pub client: async_nats::Client,
    /// JetStream over the test's connection.
    pub js: jetstream::Context,
    recorder: Arc<Recorder>,
    wire: client::Recorder,
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
        let (client, js) = client::connect_jetstream(&server).await;
        let wire = client::Recorder::start(&client, [">"]).await;
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
            client::create_stream(&self.js, &spec.name, spec.subjects).await;
        }
    }

    /// Starts `app`, unchanged, on this server, recording every delivery its handlers take.
    pub async fn start(&mut self, app: impl App) {
        let connection = client::connect(&self.server).await;
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
        client::publish_stored(&self.js, subject, payload).await
    }

    /// Publishes `value` as JSON to Core subject `subject`.
    pub async fn publish<T: Serialize>(&self, subject: &str, value: &T) {
        let payload = serde_json::to_vec(value).expect("encode");
        client::publish_core(&self.client, subject, &[], payload).await;
    }

    /// Every message the server carried on a subject `pattern` matches, in order.
    pub fn messages(&self, pattern: &str) -> Vec<async_nats::Message> {
        self.wire.matching(pattern)
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
        self.wire.acks(stream, consumer)
    }

    /// The consumer's info, as the server reports it.
    pub async fn consumer(&self, stream: &str, name: &str) -> consumer::Info {
        client::consumer_info(&self.js, stream, name).await
    }

    /// Polls the consumer until `check` holds, and returns its info; fails after [`PATIENCE`].
    pub async fn consumer_until(
        &self,
        stream: &str,
        name: &str,
        what: &str,
        check: impl Fn(&consumer::Info) -> bool,
    ) -> consumer::Info {
        client::consumer_until(&self.js, stream, name, what, check).await
    }

    /// Every message `stream` stores, in sequence order.
    pub async fn stream_messages(&self, name: &str) -> Vec<jetstream::message::StreamMessage> {
        client::stream_messages(&self.js, name).await
    }

    /// Waits until `check` holds; fails after [`PATIENCE`].
    pub async fn until(&self, what: &str, check: impl Fn(&Self) -> bool) {
        self.until_within(PATIENCE, what, check).await;
    }

    /// Waits until `check` holds; fails after `within`.
    pub async fn until_within(&self, within: Duration, what: &str, check: impl Fn(&Self) -> bool) {
        client::wait_until(within, what, || check(self)).await;
    }

    /// Lets the app run for [`QUIET`]: only to show that something does NOT happen.
    pub async fn quiet(&self) {
        tokio::time::sleep(QUIET).await;
    }
}
