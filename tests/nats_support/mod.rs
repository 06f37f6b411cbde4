//! What the `nats_*` tests share: a real server, a client to ask it what it saw, and a handler
//! whose answers the test scripts.

#![allow(dead_code)]

use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, stream};
use ruststream::{Context, Handle, HandlerOutcome, Headers, NonZeroDuration};
use ruststream_nats::StreamSequence;
use serde::Deserialize;

pub use ruststream_test_server::NatsServer;

/// How long any wait in these tests may take before it fails.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// Installs logging when `RUST_LOG` asks for it (`RUST_LOG=ruststream_nats=debug` to see the
/// runtime).
pub fn logs() {
    if std::env::var_os("RUST_LOG").is_some() {
        ruststream::app::cli::install_tracing();
    }
}

/// A client for the test's own questions to the server.
pub async fn client(server: &NatsServer) -> async_nats::Client {
    async_nats::connect(server.url())
        .await
        .expect("the test client connects")
}

pub fn js(client: &async_nats::Client) -> jetstream::Context {
    jetstream::new(client.clone())
}

/// Creates a stream storing `subjects`.
pub async fn create_stream(js: &jetstream::Context, name: &str, subjects: &[&str]) {
    js.create_stream(stream::Config {
        name: name.to_owned(),
        subjects: subjects.iter().map(|s| (*s).to_owned()).collect(),
        ..Default::default()
    })
    .await
    .expect("the stream is created");
}

/// Publishes `payload` to a stream and returns its stream sequence.
pub async fn publish_stored(js: &jetstream::Context, subject: &str, payload: &str) -> u64 {
    js.publish(subject.to_owned(), payload.to_owned().into())
        .await
        .expect("the publish is sent")
        .await
        .expect("the stream stored the message")
        .sequence
}

/// The consumer's info, as the server reports it.
pub async fn consumer_info(js: &jetstream::Context, stream: &str, name: &str) -> consumer::Info {
    let stream = js.get_stream(stream).await.expect("the stream exists");
    stream
        .consumer_info(name)
        .await
        .expect("the consumer exists")
}

/// Polls `check` until it returns `Some`, failing after [`PATIENCE`].
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls the consumer until `check` holds, and returns its info.
pub async fn consumer_until(
    js: &jetstream::Context,
    stream: &str,
    name: &str,
    what: &str,
    check: impl Fn(&consumer::Info) -> bool,
) -> consumer::Info {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let info = consumer_info(js, stream, name).await;
        if check(&info) {
            return info;
        }
        if Instant::now() >= deadline {
            panic!("timed out waiting for the consumer: {what}; last info: {info:#?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn millis(ms: u64) -> NonZeroDuration {
    NonZeroDuration::new(Duration::from_millis(ms)).expect("not zero")
}

pub fn attempts(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).expect("not zero")
}

/// The payload every test publishes: `{"id": n}`.
#[derive(Debug, Clone, Deserialize)]
pub struct Order {
    pub id: u64,
}

pub fn order(id: u64) -> String {
    format!(r#"{{"id":{id}}}"#)
}

/// One delivery as the handler saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub id: u64,
    pub subject: String,
    pub delivered: Option<u64>,
    pub attempt: u32,
    pub stream_sequence: Option<u64>,
    pub headers: Headers,
    pub at: Instant,
}

type Script = dyn Fn(&Seen) -> Option<HandlerOutcome> + Send + Sync;
type Delay = dyn Fn(&Seen) -> Duration + Send + Sync;

/// A handler that records every delivery and answers what its script says (`None`: panic).
#[derive(Clone)]
pub struct Scripted {
    seen: Arc<Mutex<Vec<Seen>>>,
    script: Arc<Script>,
    delay: Arc<Delay>,
}

impl Scripted {
    pub fn new(script: impl Fn(&Seen) -> Option<HandlerOutcome> + Send + Sync + 'static) -> Self {
        Self {
            seen: Arc::default(),
            script: Arc::new(script),
            delay: Arc::new(|_| Duration::ZERO),
        }
    }

    /// Always answers `outcome`.
    pub fn always(outcome: HandlerOutcome) -> Self {
        Self::new(move |_| Some(outcome.clone()))
    }

    /// Takes `delay` before answering.
    pub fn slow(self, delay: Duration) -> Self {
        self.slow_when(move |_| delay)
    }

    /// Takes what `delay` says before answering each delivery.
    pub fn slow_when(mut self, delay: impl Fn(&Seen) -> Duration + Send + Sync + 'static) -> Self {
        self.delay = Arc::new(delay);
        self
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("not poisoned").clone()
    }

    /// Waits until the handler saw `n` deliveries, and returns them.
    pub async fn until_seen(&self, n: usize) -> Vec<Seen> {
        eventually(&format!("{n} deliveries"), || async {
            let seen = self.seen();
            (seen.len() >= n).then_some(seen)
        })
        .await
    }
}

impl Handle<Order> for Scripted {
    async fn handle(
        &self,
        order: &Order,
        _outs: &(),
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        let seen = Seen {
            id: order.id,
            subject: ctx.subject().to_owned(),
            delivered: ctx.delivered(),
            attempt: ctx.attempt().get(),
            stream_sequence: ctx.get::<StreamSequence>().ok().flatten(),
            headers: ctx.headers().clone(),
            at: Instant::now(),
        };
        self.seen.lock().expect("not poisoned").push(seen.clone());
        let delay = (self.delay)(&seen);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        match (self.script)(&seen) {
            Some(HandlerOutcome::Ack) => Ok(()),
            Some(outcome) => Err(outcome),
            None => panic!("the script panics on order {}", order.id),
        }
    }
}

/// Starts an app with one NATS broker and the registrations `mount` makes.
pub async fn start(
    broker: ruststream_nats::NatsBroker,
    mount: impl FnOnce(&mut ruststream::Scope<()>),
) -> Result<ruststream::RunningApp, ruststream::Error> {
    start_with(broker, ruststream::Env::new(), mount).await
}

/// The same, in `env`.
pub async fn start_with(
    broker: ruststream_nats::NatsBroker,
    env: ruststream::Env,
    mount: impl FnOnce(&mut ruststream::Scope<()>),
) -> Result<ruststream::RunningApp, ruststream::Error> {
    use ruststream::App as _;
    ruststream::RustStream::new(ruststream::AppInfo::new("nats-tests", "0.1.0"))
        .with_broker(broker, mount)
        .start(env)
        .await
}

/// Every message the server sends to a subject, as the test's own subscriber saw it.
#[derive(Clone)]
pub struct Wire {
    messages: Arc<Mutex<Vec<async_nats::Message>>>,
}

impl Wire {
    /// Subscribes to `subject` (registered on the server when this returns).
    pub async fn listen(client: &async_nats::Client, subject: &str) -> Self {
        use futures::StreamExt as _;
        let mut subscriber = client
            .subscribe(subject.to_owned())
            .await
            .expect("the test subscribes");
        round_trip(client).await;
        let messages: Arc<Mutex<Vec<async_nats::Message>>> = Arc::default();
        let sink = Arc::clone(&messages);
        tokio::spawn(async move {
            while let Some(message) = subscriber.next().await {
                sink.lock().expect("not poisoned").push(message);
            }
        });
        Self { messages }
    }

    pub fn messages(&self) -> Vec<async_nats::Message> {
        self.messages.lock().expect("not poisoned").clone()
    }

    /// Waits until `n` messages arrived, and returns them.
    pub async fn until(&self, n: usize) -> Vec<async_nats::Message> {
        eventually(&format!("{n} messages on the wire"), || async {
            let messages = self.messages();
            (messages.len() >= n).then_some(messages)
        })
        .await
    }
}

/// Waits until the server processed what `client` sent so far (a flush only says the bytes
/// left): a request nobody answers comes back once the server read everything before it.
pub async fn round_trip(client: &async_nats::Client) {
    let subject = format!("{}.ping", client.new_inbox());
    match client.request(subject, "".into()).await {
        Err(err) if err.kind() == async_nats::RequestErrorKind::NoResponders => {}
        other => panic!("expected no responders, got {other:?}"),
    }
}

/// Publishes a Core message with headers.
pub async fn publish_core(
    client: &async_nats::Client,
    subject: &str,
    headers: &[(&str, &str)],
    payload: &str,
) {
    let mut map = async_nats::HeaderMap::new();
    for (name, value) in headers {
        map.append(*name, *value);
    }
    client
        .publish_with_headers(subject.to_owned(), map, payload.to_owned().into())
        .await
        .expect("the publish is sent");
    client.flush().await.expect("flush");
}

/// Publishes to a stream with headers and returns the stream sequence.
pub async fn publish_stored_with(
    js: &jetstream::Context,
    subject: &str,
    headers: &[(&str, &str)],
    payload: &str,
) -> u64 {
    let mut map = async_nats::HeaderMap::new();
    for (name, value) in headers {
        map.append(*name, *value);
    }
    js.publish_with_headers(subject.to_owned(), map, payload.to_owned().into())
        .await
        .expect("the publish is sent")
        .await
        .expect("the stream stored the message")
        .sequence
}

/// Lets the runtime run for `d`: only to show that something does NOT happen.
pub async fn quiet_for(d: Duration) {
    tokio::time::sleep(d).await;
}
