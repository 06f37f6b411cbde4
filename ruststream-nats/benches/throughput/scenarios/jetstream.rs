//! JetStream: a fresh durable consumer reads orders from a stream, and each is handled per
//! [`Work`] and acknowledged. Raw: `consumer.messages()` with async-nats's defaults (pulls of
//! 200, refilled at half); RustStream: `JetStreamSubject::new(..).durable(..)` with its defaults.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, stream};
use bytes::Bytes;
use futures::StreamExt;
use ruststream::{App as _, Env, Outgoing};
use ruststream_nats::JetStreamSubject;

use crate::args::{Scenario, Side};
use crate::counter::{Counter, Record};
use crate::handlers::{CountAck, CountBatch, Reply, app, raw_labels, raw_publish};
use crate::payload::{
    CoreReceipt, Order, RECEIPTS_STREAM, Receipt, StoredReceipt, lane_key, payload,
};
use crate::publish::{self, fill_stream, fill_stream_with, unique};
use crate::report::{Row, by_side};
use crate::scenarios::{Bench, PATIENCE};

/// What a JetStream handler does besides decoding, counting and acknowledging.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// Nothing else.
    Ack,
    /// Publish a Core receipt first.
    Reply,
    /// Publish a receipt to a stream first (with a message id derived from the input), and wait
    /// for the stream's acknowledgement.
    StoredReply,
    /// Await 1 ms of simulated I/O first.
    Io,
    /// Take the messages in batches of up to this many (RustStream: a batch handler).
    Batch(NonZeroUsize),
    /// Claim the order's id in a key-value bucket (create if absent) before handling, and
    /// record it as handled once acknowledged (RustStream: `.idempotent_by(..)`).
    Idempotent,
    /// Await 1 ms of simulated I/O, each key's ([`lane_key`]) orders one at a time and in
    /// order, different keys in parallel. RustStream: `.concurrency(n).by_key(..)`; raw: what
    /// a service writes by hand, `n` worker tasks each owning the keys that hash to it, fed
    /// in order by the reading loop.
    Lanes,
}

/// The key-value bucket of an idempotent round's consumer `durable` (RustStream's default
/// name for the registration, which is named after its consumer).
fn bucket(durable: &str) -> String {
    ruststream::idempotency::default_bucket(durable)
}

/// The simulated I/O of [`Work::Io`] and [`Work::Lanes`].
pub const IO: Duration = Duration::from_millis(1);

/// One consumer's round.
pub struct Consume<'a> {
    pub stream: &'a str,
    pub subject: &'a str,
    pub durable: String,
    pub work: Work,
    /// Handlers in flight (raw: `for_each_concurrent` above 1).
    pub concurrency: usize,
}

/// One round: `side` reads `consume.stream` through a new consumer until `counter` is
/// complete; `publish` starts (on its own connection) once the consumer exists.
pub async fn round(
    url: &str,
    side: Side,
    consume: &Consume<'_>,
    counter: &Arc<Counter>,
    publish: impl FnOnce() -> Option<std::thread::JoinHandle<()>>,
) {
    let Consume {
        stream,
        subject,
        ref durable,
        work,
        concurrency,
    } = *consume;
    let publisher = match side {
        Side::Raw => {
            let client = async_nats::connect(url).await.expect("connects");
            let context = jetstream::new(client.clone());
            let consumer: consumer::PullConsumer = context
                .get_stream(stream)
                .await
                .expect("the stream exists")
                .create_consumer(consumer::pull::Config {
                    durable_name: Some(durable.clone()),
                    ack_policy: consumer::AckPolicy::Explicit,
                    ..Default::default()
                })
                .await
                .expect("the consumer is created");
            // async-nats's defaults: pulls of 200 messages, refilled at half.
            let messages = consumer.messages().await.expect("pulls");
            let kv = match work {
                Work::Idempotent => Some(raw_bucket(&context, &bucket(durable)).await),
                _ => None,
            };
            let raw = RawLoop {
                client: client.clone(),
                context,
                durable: durable.clone(),
                work,
                counter: Arc::clone(counter),
                kv,
                extra: crate::report::extra_ns(),
            };
            let task = tokio::spawn(raw.run(messages, concurrency));
            let publisher = publish();
            counter.wait("raw JetStream", PATIENCE).await;
            if concurrency > 1 || work == Work::Lanes {
                // The concurrent loop waits for a next message that may never come: stop it.
                task.abort();
            }
            let _ = task.await;
            client.flush().await.expect("flush");
            publisher
        }
        Side::Ours => {
            let descriptor = JetStreamSubject::new(subject, stream).durable(durable.clone());
            let counter_for_app = Arc::clone(counter);
            let name = durable.clone();
            let running = app(url, move |b| {
                let registration = match work {
                    Work::Reply => {
                        b.include(descriptor.handler(Reply::<CoreReceipt>::new(counter_for_app)))
                    }
                    Work::StoredReply => {
                        b.include(descriptor.handler(Reply::<StoredReceipt>::new(counter_for_app)))
                    }
                    Work::Ack | Work::Io => b.include(descriptor.handler(CountAck {
                        counter: counter_for_app,
                        io: (work == Work::Io).then_some(IO),
                    })),
                    Work::Lanes => {
                        let registration = b.include(descriptor.handler(CountAck {
                            counter: counter_for_app,
                            io: Some(IO),
                        }));
                        registration.by_key(|order: &Order| lane_key(order.id));
                        registration
                    }
                    Work::Idempotent => {
                        let registration = b.include(descriptor.handler(CountAck {
                            counter: counter_for_app,
                            io: None,
                        }));
                        registration.idempotent_by(|order: &Order| order.id);
                        registration
                    }
                    Work::Batch(size) => b.include(descriptor.batch(size).handler(CountBatch {
                        counter: counter_for_app,
                    })),
                };
                registration.concurrency(NonZeroUsize::new(concurrency).expect("not zero"));
                // Named after its consumer: each round's receipts get ids of their own.
                registration.name(name);
            })
            .start(Env::new())
            .await
            .expect("the app starts");
            let publisher = publish();
            counter.wait("RustStream JetStream", PATIENCE).await;
            running.stop().await.expect("a clean stop");
            publisher
        }
    };
    if let Some(publisher) = publisher {
        publish::join(publisher);
    }
}

/// A key-value bucket made as RustStream makes it: its stream created directly (async-nats's
/// `create_key_value` cannot read nats-server 2.9's answer), then opened as a bucket.
async fn raw_bucket(context: &jetstream::Context, bucket: &str) -> jetstream::kv::Store {
    context
        .get_or_create_stream(stream::Config {
            name: format!("KV_{bucket}"),
            subjects: vec![format!("$KV.{bucket}.>")],
            max_messages_per_subject: 1,
            max_age: Duration::from_secs(24 * 3600),
            allow_rollup: true,
            deny_delete: true,
            allow_direct: true,
            discard: stream::DiscardPolicy::New,
            num_replicas: 1,
            ..Default::default()
        })
        .await
        .expect("the bucket's stream is created");
    context
        .get_key_value(bucket)
        .await
        .expect("the bucket opens")
}

/// What the raw loop holds for its messages.
struct RawLoop {
    client: async_nats::Client,
    context: jetstream::Context,
    durable: String,
    work: Work,
    counter: Arc<Counter>,
    /// The idempotency bucket ([`Work::Idempotent`]).
    kv: Option<jetstream::kv::Store>,
    /// `--raw-extra-ns` in this round (the confirmed reply's calibration).
    extra: u64,
}

impl RawLoop {
    /// What one message costs besides the acknowledgement: decode, the work, count.
    async fn handle(&self, message: &jetstream::Message) {
        let order: Order = serde_json::from_slice(&message.payload).expect("decodes");
        match self.work {
            Work::Io => tokio::time::sleep(IO).await,
            Work::Reply => {
                let body = encode(&CoreReceipt::for_order(&order));
                raw_publish(&self.client, CoreReceipt::SUBJECT, body)
                    .await
                    .expect("the receipt is sent");
            }
            Work::StoredReply => {
                crate::report::extra_work(self.extra);
                // The same work as RustStream's: a message id derived from the input, a stored
                // publish, the stream's acknowledgement awaited.
                let info = message.info().expect("a JetStream message");
                let id = format!(
                    "{}:{}:{}:0",
                    info.stream, info.stream_sequence, self.durable
                );
                let mut headers = raw_labels().unwrap_or_default();
                headers.insert("Nats-Msg-Id", id.as_str());
                let body = encode(&StoredReceipt::for_order(&order));
                self.context
                    .publish_with_headers(StoredReceipt::SUBJECT, headers, body)
                    .await
                    .expect("the receipt is sent")
                    .await
                    .expect("the stream stored the receipt");
            }
            Work::Ack | Work::Batch(_) | Work::Idempotent | Work::Lanes => {}
        }
        self.counter.hit(&order);
    }

    /// Decode, the work, count, acknowledge; in batches, or `concurrency` at once.
    async fn run(self, messages: consumer::pull::Stream, concurrency: usize) {
        let c = &self.counter;
        match self.work {
            Work::Batch(size) => {
                let mut batches = messages.ready_chunks(size.get());
                while let Some(batch) = batches.next().await {
                    let batch: Vec<jetstream::Message> =
                        batch.into_iter().filter_map(raw_pulled).collect();
                    let orders: Vec<Order> = batch
                        .iter()
                        .map(|m| serde_json::from_slice(&m.payload).expect("decodes"))
                        .collect();
                    for order in &orders {
                        c.hit(order);
                    }
                    for message in batch {
                        message.ack().await.expect("the ack is sent");
                    }
                    if c.complete() {
                        break;
                    }
                }
            }
            Work::Idempotent => {
                // The same work as RustStream's: claim the key (created only when absent),
                // handle, acknowledge, record the key as handled at the claim's revision.
                let kv = self.kv.as_ref().expect("the bucket");
                let mut messages = messages;
                while let Some(message) = messages.next().await {
                    let Some(message) = raw_pulled(message) else {
                        continue;
                    };
                    let order: Order = serde_json::from_slice(&message.payload).expect("decodes");
                    let key = order.id.to_string();
                    let revision = kv
                        .create(&key, Bytes::from_static(b"claimed"))
                        .await
                        .expect("the key is new");
                    c.hit(&order);
                    message.ack().await.expect("the ack is sent");
                    kv.update(&key, Bytes::from_static(b"handled"), revision)
                        .await
                        .expect("the key is recorded");
                    if c.complete() {
                        break;
                    }
                }
            }
            Work::Lanes => super::lanes::raw(messages, concurrency, c).await,
            _ if concurrency == 1 => {
                let mut messages = messages;
                while let Some(message) = messages.next().await {
                    let Some(message) = raw_pulled(message) else {
                        continue;
                    };
                    self.handle(&message).await;
                    message.ack().await.expect("the ack is sent");
                    if c.complete() {
                        break;
                    }
                }
            }
            _ => {
                let this = &self;
                messages
                    .take_while(|_| std::future::ready(!c.complete()))
                    .for_each_concurrent(concurrency, |message| async move {
                        if let Some(message) = raw_pulled(message) {
                            this.handle(&message).await;
                            message.ack().await.expect("the ack is sent");
                        }
                    })
                    .await;
            }
        }
        self.client.flush().await.expect("flush");
    }
}

/// A message of raw's pull stream, or `None` for an error the stream reported, which is logged.
/// async-nats's `consumer.messages()` reports a missed idle heartbeat as an error item and goes
/// on pulling (after a stall: `transport/nats/pull.rs`), so a loop written by hand skips it, as
/// this one does, rather than ending the run.
pub fn raw_pulled<E: std::fmt::Display>(
    message: Result<jetstream::Message, E>,
) -> Option<jetstream::Message> {
    match message {
        Ok(message) => Some(message),
        Err(err) => {
            eprintln!("raw: the pull stream reported an error, skipped: {err}");
            None
        }
    }
}

fn encode(value: &impl serde::Serialize) -> Bytes {
    Bytes::from(serde_json::to_vec(value).expect("encodes"))
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

/// A stream of `n` stored orders read by a fresh consumer per round, raw and RustStream
/// interleaved; with `verify`, the server must then report every message acknowledged.
async fn stored_row(
    bench: &Bench<'_>,
    key: &str,
    title: String,
    n: u64,
    work: Work,
    concurrency: usize,
    verify: bool,
) -> Row {
    // Idempotency needs a key of its own per order, lanes keys that repeat in a known order:
    // the ids count up.
    let keyed = matches!(work, Work::Idempotent | Work::Lanes);
    let (stream, subject) = if keyed {
        (format!("BENCH_KEYED_{n}"), format!("bench.keyed.{n}"))
    } else {
        (format!("BENCH_ORDERS_{n}"), format!("bench.orders.{n}"))
    };
    eprintln!("{title}: the stream of {n} messages ...");
    if keyed {
        fill_stream_with(bench.js, &stream, &subject, n, |i| payload(i + 1, 0)).await;
    } else {
        fill_stream(bench.js, &stream, &subject, n).await;
    }
    eprintln!("{title} ...");
    let rounds = by_side(bench.args.rounds, &bench.args.sides(), |side, i| {
        let consume = Consume {
            stream: &stream,
            subject: &subject,
            durable: unique(&format!("{key}-{side:?}-{i}")),
            work,
            concurrency,
        };
        async move {
            let record = if work == Work::Lanes {
                Record::KeyOrder
            } else {
                Record::Window
            };
            let counter = Counter::new(n, record);
            round(bench.url, side, &consume, &counter, || None).await;
            assert_eq!(
                counter.out_of_order(),
                0,
                "{side:?}: orders of one key handled out of their published order"
            );
            if verify {
                verify_acked(bench.js, consume.stream, &consume.durable, n).await;
            }
            let js_stream = bench.js.get_stream(consume.stream).await;
            let _ = js_stream
                .expect("the stream exists")
                .delete_consumer(&consume.durable)
                .await;
            if keyed {
                let _ = bench.js.delete_key_value(bucket(&consume.durable)).await;
            }
            counter.result()
        }
    })
    .await;
    Row {
        scenario: format!("{title} ({n} msgs)"),
        rounds,
    }
}

/// Every JetStream throughput row the arguments ask for: ack, batches, reply, stored reply.
pub async fn throughput(bench: &Bench<'_>) -> Vec<Row> {
    let args = bench.args;
    let mut rows = Vec::new();
    if args.runs(Scenario::JsAck) {
        let n = args.messages(100_000);
        let title = "JetStream pull, ack each".to_owned();
        rows.push(stored_row(bench, "js-ack", title, n, Work::Ack, 1, true).await);
    }
    if args.runs(Scenario::JsBatch) {
        let n = args.messages(100_000);
        for size in [10, 100] {
            let title = format!("JetStream batches of {size}, ack each");
            let work = Work::Batch(NonZeroUsize::new(size).expect("not zero"));
            let key = format!("js-batch-{size}");
            rows.push(stored_row(bench, &key, title, n, work, 1, true).await);
        }
    }
    if args.runs(Scenario::JsReply) {
        let n = args.messages(100_000);
        let title = "JetStream consume and reply (1 Core publish each)".to_owned();
        rows.push(stored_row(bench, "js-reply", title, n, Work::Reply, 1, false).await);
    }
    if args.runs(Scenario::JsReplyStored) {
        let n = args.messages(20_000);
        let _ = bench.js.delete_stream(RECEIPTS_STREAM).await;
        bench
            .js
            .create_stream(stream::Config {
                name: RECEIPTS_STREAM.to_owned(),
                subjects: vec![StoredReceipt::SUBJECT.to_owned()],
                storage: stream::StorageType::Memory,
                ..Default::default()
            })
            .await
            .expect("the receipts stream is created");
        let title = "JetStream consume and reply to a stream (confirmed, deduplicated)".to_owned();
        let work = Work::StoredReply;
        rows.push(stored_row(bench, "js-reply-stored", title, n, work, 1, true).await);
    }
    if args.runs(Scenario::JsIdempotent) {
        let n = args.messages(20_000);
        let title = "JetStream idempotent (key claimed and recorded in a KV bucket)".to_owned();
        rows.push(stored_row(bench, "js-idempotent", title, n, Work::Idempotent, 1, true).await);
    }
    if args.runs(Scenario::JsLanes) {
        let n = args.messages(20_000);
        let concurrency = 16;
        let title = format!(
            "JetStream 1 ms I/O, ordering lanes: concurrency {concurrency}, {} keys",
            crate::payload::LANE_KEYS
        );
        rows.push(stored_row(bench, "js-lanes", title, n, Work::Lanes, concurrency, false).await);
    }
    rows
}

/// The 1 ms I/O rows: concurrency 1 (a tenth of the messages), then each `--concurrency`.
pub async fn io(bench: &Bench<'_>) -> Vec<(usize, Row)> {
    let many = bench.args.messages(20_000);
    let single = (many / 10).max(100);
    let mut levels = vec![1];
    levels.extend(bench.args.concurrency.iter().copied().filter(|&c| c > 1));
    let mut rows = Vec::new();
    for concurrency in levels {
        let n = if concurrency == 1 { single } else { many };
        let title = format!("JetStream 1 ms I/O, concurrency {concurrency}");
        let key = format!("io-{concurrency}");
        let row = stored_row(bench, &key, title, n, Work::Io, concurrency, false).await;
        rows.push((concurrency, row));
    }
    rows
}
