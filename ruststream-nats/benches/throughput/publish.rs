//! Publishers (on their own thread and connection; their allocations are not counted), and
//! the streams the JetStream scenarios read.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use bytes::Bytes;

use crate::alloc::uncounted;
use crate::counter::Counter;
use crate::payload::{SENTINEL_ID, now_ns, payload};

/// Runs `work` on a new thread with its own single-threaded runtime, uncounted.
pub fn off_the_books<F, Fut>(work: F) -> std::thread::JoinHandle<()>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    std::thread::spawn(move || {
        uncounted();
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

/// How a Core publisher paces itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// Never more than [`CORE_WINDOW`] messages ahead of the counter: no side loses one.
    Windowed,
    /// As fast as the connection takes them; then an end marker (see [`core`]).
    Unthrottled,
}

/// How often the burst's end marker is sent again until the subscriber has it (it may be lost
/// like any other message of the burst).
const SENTINEL_EVERY: Duration = Duration::from_millis(100);

/// Publishes `n` Core orders to `subject` at `pace`. Unthrottled, it then publishes an end
/// marker (an order with [`SENTINEL_ID`]) until `counter` has one: NATS keeps the order of one
/// publisher's messages to one subscriber, so once the marker arrived, every order of the burst
/// has been handled or lost.
pub fn core(
    url: String,
    subject: &'static str,
    n: u64,
    pace: Pace,
    counter: Arc<Counter>,
) -> std::thread::JoinHandle<()> {
    off_the_books(move || async move {
        let client = async_nats::connect(url)
            .await
            .expect("the publisher connects");
        let body = payload(0, 0);
        for i in 0..n {
            while pace == Pace::Windowed && i.saturating_sub(counter.seen()) >= CORE_WINDOW {
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
        if pace == Pace::Unthrottled {
            let marker = payload(SENTINEL_ID, 0);
            while !counter.has_ended() {
                client
                    .publish(subject, marker.clone())
                    .await
                    .expect("the end marker is sent");
                client.flush().await.expect("flush");
                tokio::time::sleep(SENTINEL_EVERY).await;
            }
            round_trip(&client).await;
        }
    })
}

/// Publishes `n` orders to `subject` at `rate` per second, each stamped with its publish time.
pub fn paced(url: String, subject: &'static str, n: u64, rate: u64) -> std::thread::JoinHandle<()> {
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
pub async fn fill_stream(js: &jetstream::Context, name: &str, subject: &str, n: u64) {
    fill_stream_with(js, name, subject, n, |_| payload(0, 0)).await;
}

/// [`fill_stream`] with the `i`-th order (from 0) made by `order`: orders of ids of their own
/// for the idempotency scenario.
pub async fn fill_stream_with(
    js: &jetstream::Context,
    name: &str,
    subject: &str,
    n: u64,
    order: impl Fn(u64) -> Bytes,
) {
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
    let mut acks = Vec::with_capacity(1024);
    for i in 0..n {
        acks.push(
            js.publish(subject.to_owned(), order(i))
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

/// A request the server answers with "no responders": once it is back, the server has read
/// everything the client sent before it.
pub async fn round_trip(client: &async_nats::Client) {
    let subject = format!("{}.ping", client.new_inbox());
    let _ = client.request(subject, Bytes::new()).await;
}

/// A consumer name of this run (a server given with `--url` may hold earlier runs' consumers).
pub fn unique(name: &str) -> String {
    format!("{}-{}", name.to_lowercase(), std::process::id())
}

pub fn join(publisher: std::thread::JoinHandle<()>) {
    publisher.join().expect("the publisher finished");
}
