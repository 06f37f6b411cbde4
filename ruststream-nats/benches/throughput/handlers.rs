//! The RustStream side: handlers doing the raw loops' work, the no-op middleware, the app.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use ruststream::middleware::{Middleware, Next};
use ruststream::registration::Handled;
use ruststream::{
    AppInfo, BatchContext, BatchOutcome, Context, Delivery, Handle, HandleBatch, HandlerOutcome,
    Publisher, RustStream,
};
use ruststream_nats::NatsBroker;

use crate::counter::Counter;
use crate::payload::{Order, Receipt};

/// Counts each order and acknowledges it, after `io` of simulated I/O when set.
pub struct CountAck {
    pub counter: Arc<Counter>,
    pub io: Option<Duration>,
}

impl Handle<Order> for CountAck {
    async fn handle(
        &self,
        order: &Order,
        _outs: &(),
        _ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        if let Some(io) = self.io {
            tokio::time::sleep(io).await;
        }
        self.counter.hit(order);
        Ok(())
    }
}

/// Publishes a receipt `R` for each order, then acknowledges it.
pub struct Reply<R> {
    counter: Arc<Counter>,
    receipt: PhantomData<fn() -> R>,
}

impl<R> Reply<R> {
    pub fn new(counter: Arc<Counter>) -> Self {
        Self {
            counter,
            receipt: PhantomData,
        }
    }
}

impl<R: Receipt> Handle<Order, Publisher<R>> for Reply<R> {
    async fn handle(
        &self,
        order: &Order,
        receipts: &Publisher<R>,
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        receipts
            .publish(ctx, &R::for_order(order))
            .await
            .map_err(|_| HandlerOutcome::retry())?;
        self.counter.hit(order);
        Ok(())
    }
}

/// Counts each order of a batch and acknowledges the whole batch.
pub struct CountBatch {
    pub counter: Arc<Counter>,
}

impl HandleBatch<Order> for CountBatch {
    async fn handle_batch(
        &self,
        orders: &[Order],
        _outs: &(),
        _ctx: &mut BatchContext<'_>,
    ) -> BatchOutcome {
        for order in orders {
            self.counter.hit(order);
        }
        BatchOutcome::All(HandlerOutcome::ack())
    }
}

/// A middleware that does nothing: the cost of one layer.
pub struct Noop;

impl Middleware for Noop {
    fn handle<'a>(&'a self, _delivery: &'a Delivery, next: Next<'a>) -> BoxFuture<'a, Handled> {
        next.run()
    }
}

/// `--subscription-capacity`, set once before the rounds; both sides read it.
pub static SUBSCRIPTION_CAPACITY: std::sync::OnceLock<usize> = std::sync::OnceLock::new();

/// `--raw-content-type`: the raw side's outputs carry the `content-type` RustStream's do.
pub static RAW_CONTENT_TYPE: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// A raw Core publish of an output: without headers, or with `--raw-content-type` with the
/// `content-type` RustStream's outputs carry ([`raw_labels`]).
pub async fn raw_publish(
    client: &async_nats::Client,
    subject: impl async_nats::subject::ToSubject,
    body: bytes::Bytes,
) -> Result<(), async_nats::client::PublishError> {
    match raw_labels() {
        None => client.publish(subject, body).await,
        Some(headers) => client.publish_with_headers(subject, headers, body).await,
    }
}

/// The headers the raw side sends with an output: none, or with `--raw-content-type` the
/// `content-type` RustStream's outputs carry (a map made per message, as a service would).
pub fn raw_labels() -> Option<async_nats::HeaderMap> {
    RAW_CONTENT_TYPE
        .load(std::sync::atomic::Ordering::Relaxed)
        .then(|| {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("content-type", "application/json");
            headers
        })
}

/// The raw side's connection: async-nats's defaults, but for `--subscription-capacity`.
pub async fn raw_client(url: &str) -> async_nats::Client {
    let mut options = async_nats::ConnectOptions::new();
    if let Some(capacity) = SUBSCRIPTION_CAPACITY.get() {
        options = options.subscription_capacity(*capacity);
    }
    options.connect(url).await.expect("connects")
}

/// The service: one NATS broker at `url` with what `mount` includes.
pub fn app(
    url: &str,
    mount: impl FnOnce(&mut ruststream::Scope<()>) + Send + 'static,
) -> impl ruststream::App<State = ()> {
    let mut broker = NatsBroker::new(url);
    if let Some(capacity) = SUBSCRIPTION_CAPACITY.get() {
        broker = broker.subscription_capacity(*capacity);
    }
    RustStream::new(AppInfo::new("bench", "0.1.0")).with_broker(broker, mount)
}
