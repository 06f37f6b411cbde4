//! What the `nats_*` tests share: a real server, a client to ask it what it saw (the questions
//! are `ruststream_test_server::client`'s), an app started on that server, and a handler whose
//! answers the test scripts.

// Each test crate uses a part of it.
#![allow(dead_code, unused_imports)]

use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer};
use ruststream::{Context, Handle, HandlerOutcome, Headers, NonZeroDuration};
use ruststream_nats::{JetStreamSubject, StreamSequence};
use ruststream_test_server::client;
use serde::Deserialize;

pub use super::logs::Logs;
pub use ruststream_test_server::NatsServer;
pub use ruststream_test_server::client::{
    PATIENCE, Recorder, connect_jetstream, consumer_info, consumer_until, create_stream,
    eventually, publish_core, publish_stored, publish_stored_with,
};

/// The stream the JetStream tests read, storing `orders.>`.
pub const STREAM: &str = "ORDERS";

/// Installs logging when `RUST_LOG` asks for it (`RUST_LOG=ruststream_nats=debug` to see the
/// runtime).
pub fn logs() {
    if std::env::var_os("RUST_LOG").is_some() {
        ruststream::app::cli::install_tracing();
    }
}

/// A new server, and a client for the test's own questions to it.
pub async fn live_server() -> (NatsServer, async_nats::Client) {
    logs();
    let server = NatsServer::start();
    let client = client::connect(&server).await;
    (server, client)
}

/// A new server whose [`STREAM`] stores `orders.>`, a client, and JetStream over it.
pub async fn jetstream_server() -> (NatsServer, async_nats::Client, jetstream::Context) {
    logs();
    let server = NatsServer::start();
    let (client, js) = client::connect_jetstream(&server).await;
    create_stream(&js, STREAM, ["orders.>"]).await;
    (server, client, js)
}

/// `orders.created` from [`STREAM`], through the durable consumer `durable`.
pub fn created(durable: &str) -> JetStreamSubject {
    JetStreamSubject::new("orders.created", STREAM).durable(durable)
}

/// Waits until consumer `durable` of [`STREAM`] settled everything up to stream sequence `seq`
/// (nothing pending acknowledgement, the ack floor at `seq` or past it: a message the consumer's
/// filter skips, such as a dead letter stored in the same stream, moves the floor on), and
/// returns its info.
pub async fn until_settled(
    js: &jetstream::Context,
    durable: &str,
    seq: u64,
    what: &str,
) -> consumer::Info {
    consumer_until(js, STREAM, durable, what, |i| {
        i.num_ack_pending == 0 && i.ack_floor.stream_sequence >= seq
    })
    .await
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

/// What a script answers, given the delivery and how many times the handler saw its id so far
/// (this one included).
type Script = dyn Fn(&Seen, usize) -> Option<HandlerOutcome> + Send + Sync;
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
        Self::by_turn(move |seen, _| script(seen))
    }

    /// Answers what `script` says for the delivery and its turn: how many times the handler saw
    /// its order id so far, this one included (1 on the first), whichever consumer brought it.
    pub fn by_turn(
        script: impl Fn(&Seen, usize) -> Option<HandlerOutcome> + Send + Sync + 'static,
    ) -> Self {
        Self {
            seen: Arc::default(),
            script: Arc::new(script),
            delay: Arc::new(|_| Duration::ZERO),
        }
    }

    /// How many times the handler saw order `id`.
    pub fn times(&self, id: u64) -> usize {
        self.seen().iter().filter(|seen| seen.id == id).count()
    }

    /// Always answers `outcome`.
    pub fn always(outcome: HandlerOutcome) -> Self {
        Self::new(move |_| Some(outcome.clone()))
    }

    /// Answers `outcome` to a message's first delivery (JetStream: the server's delivered count
    /// is 1; Core: the first attempt), and acknowledges the deliveries after it.
    pub fn first_then_ack(outcome: HandlerOutcome) -> Self {
        Self::new(move |seen| {
            let first = seen
                .delivered
                .map_or(seen.attempt == 1, |delivered| delivered == 1);
            Some(if first {
                outcome.clone()
            } else {
                HandlerOutcome::ack()
            })
        })
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

    /// The server's delivery count of each delivery the handler saw, in order.
    pub fn delivered(&self) -> Vec<Option<u64>> {
        self.seen().iter().map(|s| s.delivered).collect()
    }

    /// Waits until the handler saw `n` deliveries, and returns them.
    pub async fn until_seen(&self, n: usize) -> Vec<Seen> {
        eventually(PATIENCE, &format!("{n} deliveries"), || async {
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
        let turn = {
            let mut all = self.seen.lock().expect("not poisoned");
            all.push(seen.clone());
            all.iter().filter(|s| s.id == seen.id).count()
        };
        let delay = (self.delay)(&seen);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        match (self.script)(&seen, turn) {
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

/// The same as [`start`], in `env`.
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

/// Starts an app on `server` with the registrations `mount` makes.
pub async fn start_on(
    server: &NatsServer,
    mount: impl FnOnce(&mut ruststream::Scope<()>),
) -> ruststream::RunningApp {
    start(ruststream_nats::NatsBroker::new(server.url()), mount)
        .await
        .expect("the app starts")
}

/// `handler` on durable `hung` of `orders.created` (ack_wait 1 s, two attempts, four at once,
/// then `orders.dead`): the registration of the poison-message tests, in process and live.
pub fn mount_capped(b: &mut ruststream::Scope<()>, handler: &Scripted) {
    b.include(
        JetStreamSubject::new("orders.created", STREAM)
            .durable("hung")
            .ack_wait(millis(1_000))
            .handler(handler.clone()),
    )
    .name("hung")
    .max_attempts(attempts(2))
    .concurrency(std::num::NonZeroUsize::new(4).expect("4"))
    .dead_letter("orders.dead");
}

/// Lets the runtime run for `d`: only to show that something does NOT happen.
pub async fn quiet_for(d: Duration) {
    tokio::time::sleep(d).await;
}

/// The consumer of `stream` whose filter is `filter`, as the server reports it; `None` while
/// there is none (an ephemeral consumer's name is the server's).
pub async fn consumer_reading(
    js: &jetstream::Context,
    stream: &str,
    filter: &str,
) -> Option<consumer::Info> {
    use futures::TryStreamExt as _;
    let stream = js.get_stream(stream).await.expect("the stream exists");
    let all: Vec<consumer::Info> = stream
        .consumers()
        .try_collect()
        .await
        .expect("the server lists the consumers");
    all.into_iter().find(|c| c.config.filter_subject == filter)
}
