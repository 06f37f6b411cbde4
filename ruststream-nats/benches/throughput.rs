//! What RustStream costs over raw async-nats, measured side by side.
//!
//! ```text
//! cargo bench -p ruststream-nats --bench throughput
//! cargo bench -p ruststream-nats --bench throughput -- --rounds 5 --messages 100000
//! cargo bench -p ruststream-nats --bench throughput -- --quick
//! cargo bench -p ruststream-nats --bench throughput -- --scenario js-ack --side ours
//! cargo bench -p ruststream-nats --bench throughput -- --telemetry      # spans and metrics on
//! cargo bench -p ruststream-nats --bench throughput -- --metrics-only   # metrics on, no spans
//! ```
//!
//! The program starts its own nats-server (`ruststream_test_server`), and for each scenario
//! runs the raw async-nats loop and the RustStream service doing the same work (decode a
//! 512-byte JSON payload into the same struct, count it, settle it), interleaved round by round
//! (raw, ours, raw, ours, ...). It prints a markdown table: messages per second (median of the
//! rounds, and the spread min–max), the ratio RustStream / raw of the medians, and the heap
//! allocations per message in the measured window (a counting global allocator; the publisher
//! runs on a thread whose allocations are not counted).
//!
//! `docs/benchmarks.md` says what each number covers and shows a run.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, stream};
use bytes::Bytes;
use futures::StreamExt;
use ruststream::{
    App as _, AppInfo, Context, Env, Handle, HandlerOutcome, Outgoing, Publisher, RustStream,
};
use ruststream_nats::{CoreSubject, DeliverPolicy, JetStreamSubject, NatsBroker};
use ruststream_test_server::NatsServer;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

// ---------------------------------------------------------------------------------------------
// Counting allocator

/// Counts every allocation (`alloc`, `alloc_zeroed`, `realloc`) of the process, except on
/// threads that opt out (the publisher's).
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static UNCOUNTED: Cell<bool> = const { Cell::new(false) };
}

fn count() {
    if !UNCOUNTED.with(Cell::get) {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every call is forwarded to `System` unchanged; counting has no effect on memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.load(Ordering::Relaxed)
}

// ---------------------------------------------------------------------------------------------
// Payload

/// The message every scenario publishes: 512 bytes of JSON, decoded into this struct by the raw
/// loop and by the RustStream handler alike.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Order {
    id: u64,
    /// When it was published, in nanoseconds since the program started (latency scenarios).
    sent_ns: u64,
    customer: String,
    email: String,
    currency: String,
    amount_cents: u64,
    items: Vec<Item>,
    note: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Item {
    sku: String,
    quantity: u32,
    price_cents: u64,
}

const PAYLOAD_BYTES: usize = 512;

fn order(id: u64, sent_ns: u64) -> Order {
    Order {
        id,
        sent_ns,
        customer: "Ada Lovelace".to_owned(),
        email: "ada.lovelace@example.com".to_owned(),
        currency: "EUR".to_owned(),
        amount_cents: 129_900,
        items: vec![
            Item {
                sku: "ANALYTICAL-ENGINE-001".to_owned(),
                quantity: 1,
                price_cents: 99_900,
            },
            Item {
                sku: "PUNCHED-CARDS-500".to_owned(),
                quantity: 3,
                price_cents: 10_000,
            },
        ],
        note: String::new(),
    }
}

/// `order(id, sent_ns)` as exactly [`PAYLOAD_BYTES`] of JSON (the note pads it).
fn payload(id: u64, sent_ns: u64) -> Bytes {
    let mut value = order(id, sent_ns);
    let bare = serde_json::to_vec(&value).expect("encodes").len();
    value.note = "x".repeat(PAYLOAD_BYTES.saturating_sub(bare));
    let bytes = serde_json::to_vec(&value).expect("encodes");
    debug_assert_eq!(bytes.len(), PAYLOAD_BYTES);
    Bytes::from(bytes)
}

/// What the reply scenario publishes per delivery.
#[derive(Debug, Serialize)]
struct Receipt {
    id: u64,
    accepted: bool,
}

impl Outgoing for Receipt {
    const SUBJECT: &'static str = "bench.receipts";
}

/// What the confirmed reply scenario publishes per delivery: a stream stores its subject.
#[derive(Debug, Serialize)]
struct StoredReceipt {
    id: u64,
    accepted: bool,
}

impl Outgoing for StoredReceipt {
    const SUBJECT: &'static str = "bench.stored-receipts";
}

/// The stream storing [`StoredReceipt`]s.
const RECEIPTS_STREAM: &str = "BENCH_RECEIPTS";

/// What the request/reply responder publishes as an event besides the response.
#[derive(Debug, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "bench.rpc.answered")]
struct Answered {
    id: u64,
    accepted: bool,
}

/// The request/reply responder: answers each order's request with a receipt.
#[ruststream::subscriber("bench.rpc", reply)]
async fn answer(order: &Order) -> Result<Answered, HandlerOutcome> {
    Ok(Answered {
        id: order.id,
        accepted: true,
    })
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn now_ns() -> u64 {
    u64::try_from(epoch().elapsed().as_nanos()).unwrap_or(u64::MAX)
}

// ---------------------------------------------------------------------------------------------
// The counter both sides call once per handled message

/// Counts handled messages; records the measured window (first to `target`-th message) and,
/// in latency mode, each message's publish-to-handler latency.
struct Counter {
    target: u64,
    seen: AtomicU64,
    first: OnceLock<(Instant, u64)>,
    last: OnceLock<(Instant, u64)>,
    done: Notify,
    /// Woken every [`PROGRESS_EVERY`] messages, for the Core publisher's window.
    progress: Notify,
    latencies: Option<Mutex<Vec<u64>>>,
    finished: AtomicBool,
}

const PROGRESS_EVERY: u64 = 256;

impl Counter {
    fn new(target: u64, latency: bool) -> Arc<Self> {
        Arc::new(Self {
            target,
            seen: AtomicU64::new(0),
            first: OnceLock::new(),
            last: OnceLock::new(),
            done: Notify::new(),
            progress: Notify::new(),
            latencies: latency
                .then(|| Mutex::new(Vec::with_capacity(usize::try_from(target).unwrap_or(0)))),
            finished: AtomicBool::new(false),
        })
    }

    fn hit(&self, order: &Order) {
        if let Some(latencies) = &self.latencies {
            let latency = now_ns().saturating_sub(order.sent_ns);
            latencies.lock().expect("not poisoned").push(latency);
        }
        let n = self.seen.fetch_add(1, Ordering::AcqRel) + 1;
        if n == 1 {
            let _ = self.first.set((Instant::now(), allocations()));
        }
        if n == self.target {
            let _ = self.last.set((Instant::now(), allocations()));
            self.finished.store(true, Ordering::Release);
            self.done.notify_one();
        }
        if n.is_multiple_of(PROGRESS_EVERY) {
            self.progress.notify_one();
        }
    }

    fn seen(&self) -> u64 {
        self.seen.load(Ordering::Acquire)
    }

    fn is_done(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }

    async fn wait(&self, what: &str, patience: Duration) {
        let deadline = tokio::time::Instant::now() + patience;
        while !self.is_done() {
            if tokio::time::timeout_at(deadline, self.done.notified())
                .await
                .is_err()
                && !self.is_done()
            {
                panic!(
                    "{what}: only {} of {} messages arrived within {patience:?}",
                    self.seen(),
                    self.target
                );
            }
        }
    }

    /// Messages per second over the window, and allocations per message.
    fn result(&self) -> Sample {
        let (t0, a0) = *self.first.get().expect("a first message");
        let (t1, a1) = *self.last.get().expect("a last message");
        let intervals = (self.target - 1).max(1) as f64;
        let secs = t1.duration_since(t0).as_secs_f64().max(1e-9);
        Sample {
            rate: intervals / secs,
            allocs: (a1 - a0) as f64 / intervals,
        }
    }

    fn latencies(&self) -> Vec<u64> {
        let mut v = self
            .latencies
            .as_ref()
            .map(|l| l.lock().expect("not poisoned").clone())
            .unwrap_or_default();
        v.sort_unstable();
        v
    }
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    rate: f64,
    allocs: f64,
}

// ---------------------------------------------------------------------------------------------
// RustStream handlers

/// Counts each order and acknowledges it, after `io` of simulated I/O when set.
struct CountAck {
    counter: Arc<Counter>,
    io: Option<Duration>,
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

/// Publishes a receipt for each order, then acknowledges it.
struct Reply {
    counter: Arc<Counter>,
}

impl Handle<Order, Publisher<Receipt>> for Reply {
    async fn handle(
        &self,
        order: &Order,
        receipts: &Publisher<Receipt>,
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        let receipt = Receipt {
            id: order.id,
            accepted: true,
        };
        receipts
            .publish(ctx, &receipt)
            .await
            .map_err(|_| HandlerOutcome::retry())?;
        self.counter.hit(order);
        Ok(())
    }
}

/// Publishes a receipt to a stream for each order (confirmed, with its message id), then
/// acknowledges it.
struct StoredReply {
    counter: Arc<Counter>,
}

impl Handle<Order, Publisher<StoredReceipt>> for StoredReply {
    async fn handle(
        &self,
        order: &Order,
        receipts: &Publisher<StoredReceipt>,
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        let receipt = StoredReceipt {
            id: order.id,
            accepted: true,
        };
        receipts
            .publish(ctx, &receipt)
            .await
            .map_err(|_| HandlerOutcome::retry())?;
        self.counter.hit(order);
        Ok(())
    }
}

fn app(
    url: &str,
    mount: impl FnOnce(&mut ruststream::Scope<()>) + Send + 'static,
) -> impl ruststream::App<State = ()> {
    RustStream::new(AppInfo::new("bench", "0.1.0")).with_broker(NatsBroker::new(url), mount)
}

fn nonzero(n: usize) -> NonZeroUsize {
    NonZeroUsize::new(n).expect("not zero")
}

// ---------------------------------------------------------------------------------------------
// Publishers (on their own thread and connection; their allocations are not counted)

/// Runs `work` on a new thread with its own single-threaded runtime, uncounted.
fn off_the_books<F, Fut>(work: F) -> std::thread::JoinHandle<()>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    std::thread::spawn(move || {
        UNCOUNTED.with(|u| u.set(true));
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(work());
    })
}

/// How many Core messages may be published and not yet handled: well under the subscriber's
/// buffer (async-nats: 65 536 messages) and the server's slow-consumer limit (64 MiB), so
/// neither side drops a message; the same for raw and RustStream.
const CORE_WINDOW: u64 = 4096;

/// Publishes `n` Core orders to `subject`, never more than [`CORE_WINDOW`] ahead of `counter`.
fn publish_core_windowed(
    url: String,
    subject: &'static str,
    n: u64,
    counter: Arc<Counter>,
) -> std::thread::JoinHandle<()> {
    off_the_books(move || async move {
        let client = async_nats::connect(url)
            .await
            .expect("the publisher connects");
        let body = payload(0, 0);
        for i in 0..n {
            while i.saturating_sub(counter.seen()) >= CORE_WINDOW {
                client.flush().await.expect("flush");
                let _ = tokio::time::timeout(Duration::from_millis(5), counter.progress.notified())
                    .await;
            }
            client
                .publish(subject, body.clone())
                .await
                .expect("the publish is sent");
        }
        // Closing a connection the server has not read to the end can lose what it holds.
        round_trip(&client).await;
    })
}

/// Publishes `n` orders to `subject` at `rate` per second, each stamped with its publish time.
fn publish_paced(
    url: String,
    subject: &'static str,
    n: u64,
    rate: u64,
) -> std::thread::JoinHandle<()> {
    off_the_books(move || async move {
        let client = async_nats::connect(url)
            .await
            .expect("the publisher connects");
        let start = tokio::time::Instant::now();
        for i in 0..n {
            let due = start + Duration::from_secs_f64(i as f64 / rate as f64);
            tokio::time::sleep_until(due).await;
            client
                .publish(subject, payload(i, now_ns()))
                .await
                .expect("the publish is sent");
            client.flush().await.expect("flush");
        }
        round_trip(&client).await;
    })
}

/// Stores `n` orders in `stream` (created fresh, in memory, storing `subject`), unless it
/// already holds exactly that (a server given with `--url`, reused between runs).
async fn fill_stream(js: &jetstream::Context, name: &str, subject: &str, n: u64) {
    if let Ok(mut existing) = js.get_stream(name).await
        && let Ok(info) = existing.info().await
        && info.state.messages == n
        && info.config.subjects == [subject]
    {
        return;
    }
    let _ = js.delete_stream(name).await;
    js.create_stream(stream::Config {
        name: name.to_owned(),
        subjects: vec![subject.to_owned()],
        storage: stream::StorageType::Memory,
        ..Default::default()
    })
    .await
    .expect("the stream is created");
    let body = payload(0, 0);
    let mut acks = Vec::with_capacity(1024);
    for _ in 0..n {
        acks.push(
            js.publish(subject.to_owned(), body.clone())
                .await
                .expect("the publish is sent"),
        );
        if acks.len() == 1024 {
            for ack in acks.drain(..) {
                ack.await.expect("stored");
            }
        }
    }
    for ack in acks.drain(..) {
        ack.await.expect("stored");
    }
}

/// An empty stream storing `subject`, for the latency scenario.
async fn empty_stream(js: &jetstream::Context, name: &str, subject: &str) {
    fill_stream(js, name, subject, 0).await;
}

// ---------------------------------------------------------------------------------------------
// Scenarios

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Raw,
    Ours,
}

const PATIENCE: Duration = Duration::from_secs(120);

/// Core: a publisher on a second connection publishes `n` orders; the subscriber decodes,
/// counts and "acks" each (a Core ack settles nothing).
async fn core_throughput(side: Side, url: &str, n: u64) -> Sample {
    const SUBJECT: &str = "bench.core";
    let counter = Counter::new(n, false);
    match side {
        Side::Raw => {
            let client = async_nats::connect(url).await.expect("connects");
            let mut subscriber = client.subscribe(SUBJECT).await.expect("subscribes");
            client.flush().await.expect("flush");
            round_trip(&client).await;
            let c = Arc::clone(&counter);
            let task = tokio::spawn(async move {
                while let Some(message) = subscriber.next().await {
                    let order: Order = serde_json::from_slice(&message.payload).expect("decodes");
                    c.hit(&order);
                    if c.is_done() {
                        break;
                    }
                }
            });
            let publisher = publish_core_windowed(url.to_owned(), SUBJECT, n, Arc::clone(&counter));
            counter.wait("raw Core", PATIENCE).await;
            task.await.expect("the raw loop ends");
            join(publisher);
        }
        Side::Ours => {
            let handler = CountAck {
                counter: Arc::clone(&counter),
                io: None,
            };
            let running = app(url, move |b| {
                b.include(CoreSubject::new(SUBJECT).handler(handler));
            })
            .start(Env::new())
            .await
            .expect("the app starts");
            let publisher = publish_core_windowed(url.to_owned(), SUBJECT, n, Arc::clone(&counter));
            counter.wait("RustStream Core", PATIENCE).await;
            running.stop().await.expect("a clean stop");
            join(publisher);
        }
    }
    counter.result()
}

/// What a JetStream handler does besides decoding and counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Work {
    /// Acknowledge.
    Ack,
    /// Publish a Core receipt, then acknowledge.
    Reply,
    /// Publish a receipt to a stream, wait for the stream's acknowledgement, then acknowledge.
    StoredReply,
    /// Await 1 ms of simulated I/O, then acknowledge.
    Io,
}

const IO: Duration = Duration::from_millis(1);

/// JetStream: a fresh durable consumer reads `n` orders already stored in `stream`, and each is
/// handled per `work` and acknowledged. With `verify`, the server must then report every one
/// acknowledged (ack floor at `n`, nothing pending).
#[allow(clippy::too_many_arguments)]
async fn jetstream_throughput(
    side: Side,
    url: &str,
    js: &jetstream::Context,
    stream_name: &str,
    subject: &str,
    durable: &str,
    n: u64,
    work: Work,
    concurrency: usize,
    verify: bool,
) -> Sample {
    let counter = Counter::new(n, false);
    let io = (work == Work::Io).then_some(IO);
    match side {
        Side::Raw => {
            let client = async_nats::connect(url).await.expect("connects");
            let context = jetstream::new(client.clone());
            let consumer: consumer::PullConsumer = context
                .get_stream(stream_name)
                .await
                .expect("the stream exists")
                .create_consumer(consumer::pull::Config {
                    durable_name: Some(durable.to_owned()),
                    ack_policy: consumer::AckPolicy::Explicit,
                    ..Default::default()
                })
                .await
                .expect("the consumer is created");
            // async-nats's defaults: pulls of 200 messages, refilled at half.
            let messages = consumer.messages().await.expect("pulls");
            let c = Arc::clone(&counter);
            let outside = client.clone();
            let durable_name = durable.to_owned();
            let task = tokio::spawn(async move {
                let c = &c;
                let client = &client;
                let context = &context;
                let durable_name = &durable_name;
                // What one message costs: decode, the work, count, acknowledge.
                let handle = |message: jetstream::Message| async move {
                    let order: Order = serde_json::from_slice(&message.payload).expect("decodes");
                    if let Some(io) = io {
                        tokio::time::sleep(io).await;
                    }
                    if work == Work::Reply {
                        let receipt = Receipt {
                            id: order.id,
                            accepted: true,
                        };
                        let body = Bytes::from(serde_json::to_vec(&receipt).expect("encodes"));
                        client
                            .publish(Receipt::SUBJECT, body)
                            .await
                            .expect("the receipt is sent");
                    }
                    if work == Work::StoredReply {
                        // The same work as RustStream's: a message id derived from the input,
                        // a stored publish, the stream's acknowledgement awaited.
                        let info = message.info().expect("a JetStream message");
                        let id = format!(
                            "{}:{}:{}:0",
                            info.stream, info.stream_sequence, durable_name
                        );
                        let receipt = StoredReceipt {
                            id: order.id,
                            accepted: true,
                        };
                        let body = Bytes::from(serde_json::to_vec(&receipt).expect("encodes"));
                        let mut headers = async_nats::HeaderMap::new();
                        headers.insert("Nats-Msg-Id", id.as_str());
                        context
                            .publish_with_headers(StoredReceipt::SUBJECT, headers, body)
                            .await
                            .expect("the receipt is sent")
                            .await
                            .expect("the stream stored the receipt");
                    }
                    c.hit(&order);
                    message.ack().await.expect("the ack is sent");
                };
                if concurrency == 1 {
                    let mut messages = messages;
                    while let Some(message) = messages.next().await {
                        handle(message.expect("a message")).await;
                        if c.is_done() {
                            break;
                        }
                    }
                } else {
                    messages
                        .take_while(|_| std::future::ready(!c.is_done()))
                        .for_each_concurrent(concurrency, |message| async move {
                            if let Ok(message) = message {
                                handle(message).await;
                            }
                        })
                        .await;
                }
                client.flush().await.expect("flush");
            });
            counter.wait("raw JetStream", PATIENCE).await;
            if concurrency > 1 {
                // The concurrent loop waits for a next message that may never come: stop it.
                task.abort();
            }
            let _ = task.await;
            outside.flush().await.expect("flush");
        }
        Side::Ours => {
            let descriptor = JetStreamSubject::new(subject, stream_name).durable(durable);
            let counter_for_app = Arc::clone(&counter);
            let registration_name = durable.to_owned();
            let running = app(url, move |b| {
                let registration = match work {
                    Work::Reply => b.include(descriptor.handler(Reply {
                        counter: counter_for_app,
                    })),
                    Work::StoredReply => b.include(descriptor.handler(StoredReply {
                        counter: counter_for_app,
                    })),
                    Work::Ack | Work::Io => b.include(descriptor.handler(CountAck {
                        counter: counter_for_app,
                        io,
                    })),
                };
                registration.concurrency(nonzero(concurrency));
                // Named after its consumer: each round's receipts get ids of their own.
                registration.name(registration_name);
            })
            .start(Env::new())
            .await
            .expect("the app starts");
            counter.wait("RustStream JetStream", PATIENCE).await;
            running.stop().await.expect("a clean stop");
        }
    }
    let sample = counter.result();
    if verify {
        verify_acked(js, stream_name, durable, n).await;
    }
    let stream = js.get_stream(stream_name).await.expect("the stream exists");
    let _ = stream.delete_consumer(durable).await;
    sample
}

/// The server saw every one of the `n` messages acknowledged.
async fn verify_acked(js: &jetstream::Context, stream_name: &str, durable: &str, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut stream = js.get_stream(stream_name).await.expect("the stream exists");
        let _ = stream.info().await;
        let info = stream
            .consumer_info(durable)
            .await
            .expect("the consumer exists");
        if info.num_ack_pending == 0 && info.ack_floor.stream_sequence == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "consumer `{durable}`: ack pending {}, ack floor {} (want 0 and {n})",
            info.num_ack_pending,
            info.ack_floor.stream_sequence
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Latency: `n` orders at `rate` per second, each stamped when published; the handler records
/// the time to reach it. Core, or JetStream through a consumer on `stream`.
async fn latency(
    side: Side,
    url: &str,
    js: &jetstream::Context,
    jetstream_model: bool,
    n: u64,
    rate: u64,
    round: usize,
) -> Vec<u64> {
    const CORE: &str = "bench.latency";
    const STREAM: &str = "BENCH_LATENCY";
    const JS_SUBJECT: &str = "bench.js.latency";
    let counter = Counter::new(n, true);
    let subject = if jetstream_model { JS_SUBJECT } else { CORE };
    let durable = unique(&format!("latency-{side:?}-{round}"));
    if jetstream_model {
        empty_stream(js, STREAM, JS_SUBJECT).await;
    }
    match side {
        Side::Raw => {
            let client = async_nats::connect(url).await.expect("connects");
            let c = Arc::clone(&counter);
            let task = if jetstream_model {
                let consumer: consumer::PullConsumer = jetstream::new(client.clone())
                    .get_stream(STREAM)
                    .await
                    .expect("the stream exists")
                    .create_consumer(consumer::pull::Config {
                        durable_name: Some(durable.clone()),
                        ack_policy: consumer::AckPolicy::Explicit,
                        ..Default::default()
                    })
                    .await
                    .expect("the consumer is created");
                let mut messages = consumer.messages().await.expect("pulls");
                tokio::spawn(async move {
                    while let Some(Ok(message)) = messages.next().await {
                        let order: Order =
                            serde_json::from_slice(&message.payload).expect("decodes");
                        c.hit(&order);
                        message.ack().await.expect("the ack is sent");
                        if c.is_done() {
                            break;
                        }
                    }
                })
            } else {
                let mut subscriber = client.subscribe(CORE).await.expect("subscribes");
                round_trip(&client).await;
                tokio::spawn(async move {
                    while let Some(message) = subscriber.next().await {
                        let order: Order =
                            serde_json::from_slice(&message.payload).expect("decodes");
                        c.hit(&order);
                        if c.is_done() {
                            break;
                        }
                    }
                })
            };
            let publisher = publish_paced(url.to_owned(), subject, n, rate);
            counter.wait("raw latency", PATIENCE).await;
            task.await.expect("the raw loop ends");
            join(publisher);
        }
        Side::Ours => {
            let handler = CountAck {
                counter: Arc::clone(&counter),
                io: None,
            };
            let durable = durable.clone();
            let running = app(url, move |b| {
                if jetstream_model {
                    b.include(
                        JetStreamSubject::new(JS_SUBJECT, STREAM)
                            .durable(durable)
                            .deliver_policy(DeliverPolicy::All)
                            .handler(handler),
                    );
                } else {
                    b.include(CoreSubject::new(CORE).handler(handler));
                }
            })
            .start(Env::new())
            .await
            .expect("the app starts");
            let publisher = publish_paced(url.to_owned(), subject, n, rate);
            counter.wait("RustStream latency", PATIENCE).await;
            running.stop().await.expect("a clean stop");
            join(publisher);
        }
    }
    counter.latencies()
}

/// Request/reply: a requester on a second connection sends `n` requests one after the other
/// (each a 512-byte order); the responder decodes the order, publishes an event and answers
/// with a receipt. Raw: an async-nats subscriber doing that; RustStream: a
/// `#[subscriber("bench.rpc", reply)]` handler. Counts answered requests per second.
async fn request_reply(side: Side, url: &str, n: u64) -> Sample {
    let counter = Counter::new(n, false);
    let responder = async_nats::connect(url).await.expect("connects");
    let (task, running) = match side {
        Side::Raw => {
            let mut requests = responder.subscribe("bench.rpc").await.expect("subscribed");
            round_trip(&responder).await;
            let client = responder.clone();
            let task = tokio::spawn(async move {
                while let Some(request) = requests.next().await {
                    let order: Order = serde_json::from_slice(&request.payload).expect("decodes");
                    let answered = Answered {
                        id: order.id,
                        accepted: true,
                    };
                    let body = Bytes::from(serde_json::to_vec(&answered).expect("encodes"));
                    client
                        .publish(Answered::SUBJECT, body.clone())
                        .await
                        .expect("the event is sent");
                    if let Some(inbox) = request.reply {
                        client.publish(inbox, body).await.expect("answered");
                    }
                }
            });
            (Some(task), None)
        }
        Side::Ours => {
            let running = app(url, |b| {
                b.include(answer);
            })
            .start(Env::new())
            .await
            .expect("the app starts");
            (None, Some(running))
        }
    };
    let c = Arc::clone(&counter);
    let requester = off_the_books({
        let url = url.to_owned();
        move || async move {
            let client = async_nats::connect(url)
                .await
                .expect("the requester connects");
            let body = payload(0, 0);
            let order = order(0, 0);
            for _ in 0..n {
                let response = client
                    .request("bench.rpc", body.clone())
                    .await
                    .expect("answered");
                debug_assert!(!response.payload.is_empty());
                c.hit(&order);
            }
        }
    });
    counter.wait("request/reply", PATIENCE).await;
    join(requester);
    if let Some(task) = task {
        task.abort();
    }
    if let Some(running) = running {
        running.stop().await.expect("a clean stop");
    }
    counter.result()
}

async fn round_trip(client: &async_nats::Client) {
    let subject = format!("{}.ping", client.new_inbox());
    let _ = client.request(subject, Bytes::new()).await;
}

/// A consumer name of this run (a server given with `--url` may hold earlier runs' consumers).
fn unique(name: &str) -> String {
    format!("{}-{}", name.to_lowercase(), std::process::id())
}

fn join(publisher: std::thread::JoinHandle<()>) {
    publisher.join().expect("the publisher finished");
}

// ---------------------------------------------------------------------------------------------
// Statistics and the table

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn rate(r: f64) -> String {
    if r >= 10_000.0 {
        format!("{:.1} k", r / 1000.0)
    } else {
        format!("{r:.0}")
    }
}

fn micros(ns: f64) -> String {
    format!("{:.0} µs", ns / 1000.0)
}

/// One row of the throughput table: the rounds of both sides.
struct Row {
    scenario: String,
    raw: Vec<Sample>,
    ours: Vec<Sample>,
}

impl Row {
    fn stats(samples: &[Sample]) -> (f64, f64, f64, f64) {
        let rates: Vec<f64> = samples.iter().map(|s| s.rate).collect();
        let allocs: Vec<f64> = samples.iter().map(|s| s.allocs).collect();
        let min = rates.iter().copied().fold(f64::INFINITY, f64::min);
        let max = rates.iter().copied().fold(0.0, f64::max);
        (median(&rates), min, max, median(&allocs))
    }

    fn print(&self) {
        let (raw, raw_min, raw_max, raw_allocs) = Self::stats(&self.raw);
        let (ours, ours_min, ours_max, ours_allocs) = Self::stats(&self.ours);
        println!(
            "| {} | {} ({}–{}) | {} ({}–{}) | {:.2} | {:.1} | {:.1} |",
            self.scenario,
            rate(raw),
            rate(raw_min),
            rate(raw_max),
            rate(ours),
            rate(ours_min),
            rate(ours_max),
            ours / raw,
            raw_allocs,
            ours_allocs,
        );
    }

    fn ours_median(&self) -> f64 {
        Self::stats(&self.ours).0
    }
}

// ---------------------------------------------------------------------------------------------
// Command line

#[derive(Debug, Clone)]
struct Options {
    rounds: usize,
    messages: Option<u64>,
    quick: bool,
    scenarios: Vec<String>,
    sides: Vec<Side>,
    url: Option<String>,
    concurrencies: Vec<usize>,
    /// Spans (a subscriber at INFO formatting them, writing to nowhere) and metrics (the
    /// Prometheus recorder) on, as `run --metrics-addr` and a log subscriber have them.
    telemetry: bool,
    /// With `--telemetry`: the metrics only, no span subscriber.
    metrics_only: bool,
}

impl Options {
    fn parse() -> Self {
        let mut options = Self {
            rounds: 3,
            messages: None,
            quick: false,
            scenarios: Vec::new(),
            sides: vec![Side::Raw, Side::Ours],
            url: None,
            concurrencies: vec![16, 32, 64],
            telemetry: false,
            metrics_only: false,
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--rounds" => options.rounds = number(args.next(), "--rounds"),
                "--messages" => options.messages = Some(number(args.next(), "--messages")),
                "--quick" => options.quick = true,
                "--telemetry" => options.telemetry = true,
                "--metrics-only" => {
                    options.telemetry = true;
                    options.metrics_only = true;
                }
                "--scenario" => options
                    .scenarios
                    .push(args.next().expect("--scenario NAME")),
                "--url" => options.url = Some(args.next().expect("--url nats://host:port")),
                "--side" => {
                    options.sides = match args.next().as_deref() {
                        Some("raw") => vec![Side::Raw],
                        Some("ours") => vec![Side::Ours],
                        other => panic!("--side raw|ours, not {other:?}"),
                    }
                }
                "--concurrency" => {
                    options.concurrencies = args
                        .next()
                        .expect("--concurrency 16,32,64")
                        .split(',')
                        .map(|n| n.parse().expect("a number"))
                        .collect();
                }
                // `cargo bench` passes `--bench` to every bench target.
                "--bench" => {}
                "--help" | "-h" => {
                    println!(
                        "throughput [--rounds N] [--messages M] [--quick] [--scenario core|js-ack|js-reply|js-reply-stored|request|js-io|latency]... [--side raw|ours] [--concurrency 16,32,64] [--url nats://127.0.0.1:4222] [--telemetry | --metrics-only]"
                    );
                    std::process::exit(0);
                }
                other => panic!("unknown argument `{other}` (try --help)"),
            }
        }
        assert!(options.rounds >= 1, "--rounds must be at least 1");
        options
    }

    fn runs(&self, scenario: &str) -> bool {
        self.scenarios.is_empty() || self.scenarios.iter().any(|s| s == scenario)
    }

    /// `default` messages, or `--messages`, a tenth with `--quick`.
    fn messages(&self, default: u64) -> u64 {
        let n = self.messages.unwrap_or(default);
        if self.quick { (n / 10).max(100) } else { n }
    }
}

fn number<T: std::str::FromStr>(value: Option<String>, flag: &str) -> T {
    value
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{flag} takes a number"))
}

/// Runs `round` for each side, `rounds` times, interleaved: raw, ours, raw, ours, ...
async fn interleaved<F, Fut, T>(options: &Options, mut round: F) -> (Vec<T>, Vec<T>)
where
    F: FnMut(Side, usize) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let mut raw = Vec::new();
    let mut ours = Vec::new();
    for i in 0..options.rounds {
        for &side in &options.sides {
            let result = round(side, i).await;
            match side {
                Side::Raw => raw.push(result),
                Side::Ours => ours.push(result),
            }
        }
    }
    (raw, ours)
}

fn main() {
    let options = Options::parse();
    let _ = epoch();
    // Logs only when asked (`RUST_LOG=ruststream_nats=debug`): a subscriber costs per message.
    if std::env::var_os("RUST_LOG").is_some() {
        ruststream::app::cli::install_tracing();
    } else if options.telemetry && !options.metrics_only {
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_writer(std::io::sink)
            .init();
    }
    if options.telemetry {
        ruststream::telemetry::install_prometheus().expect("the recorder installs");
        eprintln!("telemetry on: a span per delivery at INFO, metrics in the Prometheus recorder");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(run(options));
}

async fn run(options: Options) {
    // A server of our own, unless one is given (profiling reuses its streams between runs).
    let server = options.url.is_none().then(NatsServer::start);
    let url = options
        .url
        .clone()
        .or_else(|| server.as_ref().map(NatsServer::url))
        .expect("a server");
    let client = async_nats::connect(&url).await.expect("connects");
    let js = jetstream::new(client.clone());
    let both = options.sides.len() == 2;

    eprintln!(
        "{}; {} rounds per side, interleaved; {} CPUs",
        NatsServer::version(),
        options.rounds,
        std::thread::available_parallelism().map_or(0, NonZeroUsize::get)
    );
    let mut rows: Vec<Row> = Vec::new();

    if options.runs("core") {
        let n = options.messages(200_000);
        eprintln!("Core subscribe, {n} messages ...");
        let (raw, ours) = interleaved(&options, |side, _| core_throughput(side, &url, n)).await;
        rows.push(Row {
            scenario: format!("Core subscribe, handler acks ({n} msgs)"),
            raw,
            ours,
        });
    }

    let js_scenarios = [
        ("js-ack", "JetStream pull, ack each", Work::Ack, 100_000),
        (
            "js-reply",
            "JetStream consume and reply (1 Core publish each)",
            Work::Reply,
            100_000,
        ),
    ];
    for (key, title, work, default) in js_scenarios {
        if !options.runs(key) {
            continue;
        }
        let n = options.messages(default);
        let stream_name = format!("BENCH_{}_{n}", key.replace('-', "_").to_uppercase());
        let subject = format!("bench.{key}.{n}");
        eprintln!("{title}, {n} messages: filling the stream ...");
        fill_stream(&js, &stream_name, &subject, n).await;
        eprintln!("{title} ...");
        let (raw, ours) = interleaved(&options, |side, i| {
            let durable = unique(&format!("{key}-{side:?}-{i}"));
            let (url, js, stream_name, subject) = (&url, &js, &stream_name, &subject);
            async move {
                jetstream_throughput(
                    side,
                    url,
                    js,
                    stream_name,
                    subject,
                    &durable,
                    n,
                    work,
                    1,
                    work == Work::Ack,
                )
                .await
            }
        })
        .await;
        rows.push(Row {
            scenario: format!("{title} ({n} msgs)"),
            raw,
            ours,
        });
    }

    if options.runs("js-reply-stored") {
        let key = "js-reply-stored";
        let title = "JetStream consume and reply to a stream (confirmed, deduplicated)";
        let n = options.messages(20_000);
        let stream_name = format!("BENCH_REPLY_STORED_{n}");
        let subject = format!("bench.{key}.{n}");
        eprintln!("{title}, {n} messages: filling the stream ...");
        fill_stream(&js, &stream_name, &subject, n).await;
        let _ = js.delete_stream(RECEIPTS_STREAM).await;
        js.create_stream(stream::Config {
            name: RECEIPTS_STREAM.to_owned(),
            subjects: vec![StoredReceipt::SUBJECT.to_owned()],
            storage: stream::StorageType::Memory,
            ..Default::default()
        })
        .await
        .expect("the receipts stream is created");
        eprintln!("{title} ...");
        let (raw, ours) = interleaved(&options, |side, i| {
            let durable = unique(&format!("{key}-{side:?}-{i}"));
            let (url, js, stream_name, subject) = (&url, &js, &stream_name, &subject);
            async move {
                jetstream_throughput(
                    side,
                    url,
                    js,
                    stream_name,
                    subject,
                    &durable,
                    n,
                    Work::StoredReply,
                    1,
                    true,
                )
                .await
            }
        })
        .await;
        rows.push(Row {
            scenario: format!("{title} ({n} msgs)"),
            raw,
            ours,
        });
    }

    if options.runs("request") {
        let n = options.messages(20_000);
        eprintln!("request/reply round trip, {n} requests ...");
        let (raw, ours) = interleaved(&options, |side, _| request_reply(side, &url, n)).await;
        rows.push(Row {
            scenario: format!("Request/reply round trip, one at a time ({n} requests)"),
            raw,
            ours,
        });
    }

    let mut io_rows: Vec<(usize, Row)> = Vec::new();
    if options.runs("js-io") {
        let many = options.messages(20_000);
        let single = (many / 10).max(100);
        let stream_name = "BENCH_IO";
        let subject = "bench.js-io";
        eprintln!("JetStream 1 ms I/O: filling the stream with {many} messages ...");
        fill_stream(&js, stream_name, subject, many.max(single)).await;
        let mut levels = vec![1];
        levels.extend(options.concurrencies.iter().copied().filter(|&c| c > 1));
        for concurrency in levels {
            let n = if concurrency == 1 { single } else { many };
            eprintln!("JetStream 1 ms I/O, concurrency {concurrency}, {n} messages ...");
            let (raw, ours) = interleaved(&options, |side, i| {
                let durable = unique(&format!("io-{concurrency}-{side:?}-{i}"));
                let (url, js) = (&url, &js);
                async move {
                    jetstream_throughput(
                        side,
                        url,
                        js,
                        stream_name,
                        subject,
                        &durable,
                        n,
                        Work::Io,
                        concurrency,
                        false,
                    )
                    .await
                }
            })
            .await;
            io_rows.push((
                concurrency,
                Row {
                    scenario: format!("JetStream 1 ms I/O, concurrency {concurrency} ({n} msgs)"),
                    raw,
                    ours,
                },
            ));
        }
    }

    let mut latency_rows = Vec::new();
    if options.runs("latency") {
        let rate = 2_000;
        let n = options
            .messages(6_000)
            .min(if options.quick { 1_000 } else { u64::MAX });
        for (jetstream_model, name) in [(false, "Core"), (true, "JetStream")] {
            eprintln!("latency, {name}, {n} messages at {rate}/s ...");
            let (raw, ours) = interleaved(&options, |side, i| {
                let (url, js) = (&url, &js);
                async move { latency(side, url, js, jetstream_model, n, rate, i).await }
            })
            .await;
            latency_rows.push((name, n, rate, raw, ours));
        }
    }

    drop(client);

    println!();
    if !rows.is_empty() || !io_rows.is_empty() {
        println!(
            "| scenario | raw async-nats msg/s, median (min–max) | RustStream msg/s, median (min–max) | RustStream / raw | raw allocs/msg | RustStream allocs/msg |"
        );
        println!("|---|---|---|---|---|---|");
        for row in &rows {
            print_row(row, both);
        }
        for (_, row) in &io_rows {
            print_row(row, both);
        }
    }
    if let Some((_, single)) = io_rows.iter().find(|(c, _)| *c == 1)
        && let Some((best_c, best)) = io_rows
            .iter()
            .filter(|(c, _)| *c > 1)
            .max_by(|a, b| a.1.ours_median().total_cmp(&b.1.ours_median()))
        && !single.ours.is_empty()
    {
        println!();
        println!(
            "1 ms I/O: the best concurrency is {best_c}: {:.1}× the single-flight rate.",
            best.ours_median() / single.ours_median()
        );
    }
    if !latency_rows.is_empty() {
        println!();
        println!(
            "| latency, publish → handler | rate | raw p50 | raw p99 | RustStream p50 | RustStream p99 |"
        );
        println!("|---|---|---|---|---|---|");
        for (name, n, rate, raw, ours) in &latency_rows {
            let p = |rounds: &Vec<Vec<u64>>, q: f64| {
                let per_round: Vec<f64> = rounds.iter().map(|r| percentile(r, q) as f64).collect();
                if per_round.is_empty() {
                    "—".to_owned()
                } else {
                    micros(median(&per_round))
                }
            };
            println!(
                "| {name} ({n} msgs) | {rate}/s | {} | {} | {} | {} |",
                p(raw, 50.0),
                p(raw, 99.0),
                p(ours, 50.0),
                p(ours, 99.0),
            );
        }
    }
    drop(server);
}

fn print_row(row: &Row, both: bool) {
    if both {
        row.print();
    } else {
        // One side only (profiling): print what there is.
        for (side, samples) in [("raw", &row.raw), ("RustStream", &row.ours)] {
            if samples.is_empty() {
                continue;
            }
            let (median, min, max, allocs) = Row::stats(samples);
            println!(
                "| {} [{side}] | {} ({}–{}) | allocs/msg {allocs:.1} |",
                row.scenario,
                rate(median),
                rate(min),
                rate(max)
            );
        }
    }
}
