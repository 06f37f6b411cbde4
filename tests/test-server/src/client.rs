//! The questions a test asks a live [`NatsServer`], through its own async-nats client: a
//! connection and JetStream, the streams and consumers as the server reports them, every message
//! sent to some subjects, and waits that poll until something holds.
//!
//! The integration tests in `tests/` and the benchmarks ask them; they live here so that
//! each is asked one way.
//!
//! ```no_run
//! use ruststream_test_server::NatsServer;
//! use ruststream_test_server::client::{self, Recorder};
//!
//! # async fn example() {
//! let server = NatsServer::start();
//! let (client, js) = client::connect_jetstream(&server).await;
//! client::create_stream(&js, "ORDERS", ["orders.>"]).await;
//! let dead = Recorder::start(&client, ["orders.dead"]).await;
//! // ... run something that dead-letters one message ...
//! let dead = dead.until(1).await;
//! let info = client::consumer_info(&js, "ORDERS", "worker").await;
//! # let _ = (dead, info);
//! # }
//! ```

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_nats::jetstream::{self, consumer, message::StreamMessage, stream};
use futures::StreamExt as _;
use tokio::time::Instant;

use crate::NatsServer;

/// How long a wait here takes before it fails, where the caller does not say.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// How often a wait asks again.
const POLL: Duration = Duration::from_millis(10);

/// The last token of the subject a [`Recorder`] publishes to when it starts.
const MARKER: &str = "recorder-started";

/// A client of `server`, for the test's own questions.
///
/// # Panics
///
/// If it cannot connect.
pub async fn connect(server: &NatsServer) -> async_nats::Client {
    async_nats::connect(server.url())
        .await
        .expect("the test client connects to the nats-server")
}

/// A client of `server`, and JetStream over it.
///
/// # Panics
///
/// If it cannot connect.
pub async fn connect_jetstream(server: &NatsServer) -> (async_nats::Client, jetstream::Context) {
    let client = connect(server).await;
    let js = jetstream::new(client.clone());
    (client, js)
}

/// Creates stream `name` storing `subjects`, with the server's defaults for the rest.
///
/// # Panics
///
/// If the server refuses it.
pub async fn create_stream(
    js: &jetstream::Context,
    name: &str,
    subjects: impl IntoIterator<Item = impl AsRef<str>>,
) {
    js.create_stream(stream::Config {
        name: name.to_owned(),
        subjects: subjects
            .into_iter()
            .map(|s| s.as_ref().to_owned())
            .collect(),
        ..Default::default()
    })
    .await
    .unwrap_or_else(|e| panic!("the stream {name} is created: {e}"));
}

/// Publishes `payload` with `headers` to Core subject `subject`, and flushes.
///
/// # Panics
///
/// If the publish fails.
pub async fn publish_core(
    client: &async_nats::Client,
    subject: &str,
    headers: &[(&str, &str)],
    payload: impl AsRef<[u8]>,
) {
    client
        .publish_with_headers(
            subject.to_owned(),
            header_map(headers),
            payload.as_ref().to_vec().into(),
        )
        .await
        .expect("the publish is sent");
    client.flush().await.expect("flush");
}

/// Publishes `payload` to stream subject `subject`, and returns its stream sequence once the
/// stream stored it.
///
/// # Panics
///
/// If the publish fails or no stream stores it.
pub async fn publish_stored(
    js: &jetstream::Context,
    subject: &str,
    payload: impl AsRef<[u8]>,
) -> u64 {
    publish_stored_with(js, subject, &[], payload).await
}

/// The same, with `headers`.
///
/// # Panics
///
/// If the publish fails or no stream stores it.
pub async fn publish_stored_with(
    js: &jetstream::Context,
    subject: &str,
    headers: &[(&str, &str)],
    payload: impl AsRef<[u8]>,
) -> u64 {
    js.publish_with_headers(
        subject.to_owned(),
        header_map(headers),
        payload.as_ref().to_vec().into(),
    )
    .await
    .expect("the publish is sent")
    .await
    .expect("the stream stored the message")
    .sequence
}

/// `headers` as async-nats sends them, in order (empty: a message without headers).
fn header_map(headers: &[(&str, &str)]) -> async_nats::HeaderMap {
    let mut map = async_nats::HeaderMap::new();
    for (name, value) in headers {
        map.append(*name, *value);
    }
    map
}

/// Every message stream `name` stores, in sequence order.
///
/// # Panics
///
/// If the stream does not exist.
pub async fn stream_messages(js: &jetstream::Context, name: &str) -> Vec<StreamMessage> {
    let mut stream = js.get_stream(name).await.expect("the stream exists");
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

/// The info of consumer `consumer` of `stream`, as the server reports it.
///
/// # Panics
///
/// If the stream or the consumer does not exist.
pub async fn consumer_info(
    js: &jetstream::Context,
    stream: &str,
    consumer: &str,
) -> consumer::Info {
    js.get_stream(stream)
        .await
        .expect("the stream exists")
        .consumer_info(consumer)
        .await
        .expect("the consumer exists")
}

/// Asks for the consumer's info until `check` holds, and returns it.
///
/// # Panics
///
/// After [`PATIENCE`], with `what` and the last info.
pub async fn consumer_until(
    js: &jetstream::Context,
    stream: &str,
    consumer: &str,
    what: &str,
    check: impl Fn(&consumer::Info) -> bool,
) -> consumer::Info {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let info = consumer_info(js, stream, consumer).await;
        if check(&info) {
            return info;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {PATIENCE:?} waiting for consumer {stream}/{consumer}: {what}; \
             last info: {info:#?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Polls `condition` until it holds.
///
/// It sleeps on tokio's clock, so a test with a paused clock lets the time pass.
///
/// # Panics
///
/// After `within`, with `what`.
pub async fn wait_until(within: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for: {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Polls `check` until it returns `Some`, and returns what it holds.
///
/// # Panics
///
/// After `within`, with `what`.
pub async fn eventually<T, Fut>(within: Duration, what: &str, mut check: impl FnMut() -> Fut) -> T
where
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for: {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Every message the server sends to some subjects, as the test's own subscriptions got it.
///
/// Clones share the record.
#[derive(Clone, Debug)]
pub struct Recorder {
    messages: Arc<Mutex<Vec<async_nats::Message>>>,
}

impl Recorder {
    /// Subscribes `client` to each of `subjects` and records every message they get from now on.
    ///
    /// The server has every subscription when this returns: the server handles what a
    /// connection sends in order, so a message this publishes after subscribing comes back only
    /// once they are in place (a flush only says the bytes left the client). No recorder records
    /// such a message (on `<a new inbox>.recorder-started`), its own or another's.
    ///
    /// # Panics
    ///
    /// If a subscription fails, or that message does not come back within [`PATIENCE`].
    pub async fn start(
        client: &async_nats::Client,
        subjects: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        let mut subscriptions = Vec::new();
        for subject in subjects {
            let subject: String = subject.into();
            let subscription = client
                .subscribe(subject.clone())
                .await
                .unwrap_or_else(|e| panic!("the test subscribes to {subject}: {e}"));
            subscriptions.push(subscription);
        }

        let marker = format!("{}.{MARKER}", client.new_inbox());
        let mut echo = client
            .subscribe(marker.clone())
            .await
            .expect("the test subscribes to its marker");
        client
            .publish(marker, "".into())
            .await
            .expect("the test publishes its marker");
        tokio::time::timeout(PATIENCE, echo.next())
            .await
            .expect("the server has the subscriptions within the patience")
            .expect("the marker's subscription is open");
        drop(echo);

        let messages: Arc<Mutex<Vec<async_nats::Message>>> = Arc::default();
        let sink = Arc::clone(&messages);
        let mut everything = futures::stream::select_all(subscriptions);
        tokio::spawn(async move {
            while let Some(message) = everything.next().await {
                // A subscription to `>` gets the markers too.
                if !is_marker(message.subject.as_str()) {
                    sink.lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(message);
                }
            }
        });
        Self { messages }
    }

    /// Every message recorded so far, in the order they arrived.
    pub fn messages(&self) -> Vec<async_nats::Message> {
        self.messages
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The messages recorded so far on a subject `pattern` matches (see [`matches()`]).
    pub fn matching(&self, pattern: &str) -> Vec<async_nats::Message> {
        self.messages
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|m| matches(pattern, m.subject.as_str()))
            .cloned()
            .collect()
    }

    /// The acknowledgements recorded for consumer `consumer` of `stream` (on
    /// `$JS.ACK.<stream>.<consumer>.>`), as their wire forms (`+ACK`, `-NAK`,
    /// `-NAK {"delay": ..}`, `+TERM`, ...), in order.
    pub fn acks(&self, stream: &str, consumer: &str) -> Vec<String> {
        self.matching(&format!("$JS.ACK.{stream}.{consumer}.>"))
            .iter()
            .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
            .collect()
    }

    /// Waits until `n` messages were recorded, and returns them.
    ///
    /// # Panics
    ///
    /// After [`PATIENCE`].
    pub async fn until(&self, n: usize) -> Vec<async_nats::Message> {
        let what = format!("{n} messages recorded");
        eventually(PATIENCE, &what, || async {
            let messages = self.messages();
            (messages.len() >= n).then_some(messages)
        })
        .await
    }
}

/// Whether `subject` is a [`Recorder`]'s start marker.
fn is_marker(subject: &str) -> bool {
    subject.rsplit('.').next() == Some(MARKER)
}

/// NATS subject matching: whether `pattern` matches the concrete `subject` (`*` one token, `>`
/// one or more to the end).
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

/// The wire form of a `-NAK` that asks the server to hold the message for `delay`: the text of
/// `ruststream::settle::AckKind`, its one home.
pub fn nak_with(delay: Duration) -> String {
    ruststream::settle::AckKind::NakAfter(delay).to_string()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{is_marker, matches, nak_with};

    // The table every NATS matcher of the project is tested against.
    include!("../../../ruststream-nats/src/subject/match_table.rs");

    #[test]
    fn patterns_match_as_nats_matches_them() {
        for &(pattern, subject, expected) in MATCH_TABLE {
            assert_eq!(
                matches(pattern, subject),
                expected,
                "{pattern:?} on {subject:?}"
            );
        }
    }

    #[test]
    fn only_start_markers_are_markers() {
        assert!(is_marker("_INBOX.x1y2.recorder-started"));
        assert!(!is_marker("orders.created"));
        assert!(!is_marker("recorder-started.orders"));
    }

    #[test]
    fn a_delayed_nak_carries_nanoseconds() {
        assert_eq!(
            nak_with(Duration::from_millis(300)),
            r#"-NAK {"delay": 300000000}"#
        );
    }
}
