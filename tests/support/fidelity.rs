//! One test body, two servers: the NATS emulated in the process, and a real nats-server.
//!
//! A scenario takes a [`Server`] and talks to it only through the [`Transport`] trait (what the
//! runtime uses) and the questions a test asks a server ([`Server::consumer_info`],
//! [`Server::stream_messages`], [`Server::record`]). In process it runs under a paused clock;
//! live, against `ruststream_test_server::NatsServer` with the real clock and short delays. Any
//! difference between the two is a bug in the emulation.
#![allow(dead_code)]

pub mod app;
pub mod orders;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use ruststream::Headers;
use ruststream_nats::DeliverPolicy;
use ruststream_nats::testing::{ConsumerFacts, InProcessNats, StoredMessage};
use ruststream_nats::transport::nats::NatsTransport;
use ruststream_nats::transport::{
    ConsumerSpec, MessageStream, RawMessage, StreamSpec, Transport, Unsubscribe,
};
use ruststream_test_server::{NatsServer, client};

/// How long a live server waits for a settlement in these scenarios.
pub const ACK_WAIT: Duration = Duration::from_secs(1);
/// The `-NAK` delay the scenarios ask for.
pub const DELAY: Duration = Duration::from_millis(300);
/// How long a scenario waits for something that should happen (live: real time).
pub const PATIENCE: Duration = Duration::from_secs(5);
/// How long a scenario watches for something that should not happen.
pub const QUIET: Duration = Duration::from_millis(150);

/// A server the scenarios run against.
pub struct Server {
    transport: Arc<dyn Transport>,
    backend: Backend,
}

enum Backend {
    InProcess(InProcessNats),
    Live(Box<LiveBackend>),
}

struct LiveBackend {
    jetstream: async_nats::jetstream::Context,
    // Kept alive for the test; killed on drop.
    _server: NatsServer,
}

impl Server {
    /// The NATS emulated in the process.
    pub fn in_process() -> Self {
        let nats = InProcessNats::new();
        Self {
            transport: Arc::new(nats.clone()),
            backend: Backend::InProcess(nats),
        }
    }

    /// A real nats-server with JetStream, on a random port.
    pub async fn live() -> Self {
        let server = NatsServer::start();
        let (client, jetstream) = client::connect_jetstream(&server).await;
        Self {
            transport: Arc::new(NatsTransport::new(client)),
            backend: Backend::Live(Box::new(LiveBackend {
                jetstream,
                _server: server,
            })),
        }
    }

    /// The wire, as the runtime uses it.
    pub fn wire(&self) -> &dyn Transport {
        &*self.transport
    }

    /// The wire, shareable.
    pub fn transport(&self) -> Arc<dyn Transport> {
        Arc::clone(&self.transport)
    }

    /// Whether this is a real server.
    pub fn is_live(&self) -> bool {
        matches!(self.backend, Backend::Live(_))
    }

    /// The emulation, when this is one.
    pub fn in_process_nats(&self) -> Option<&InProcessNats> {
        match &self.backend {
            Backend::InProcess(nats) => Some(nats),
            Backend::Live(_) => None,
        }
    }

    /// Declares stream `name` storing `subjects`.
    pub async fn stream(&self, name: &str, subjects: &[&str]) {
        self.wire()
            .declare_stream(StreamSpec {
                name: name.into(),
                subjects: subjects.iter().map(|s| (*s).to_owned()).collect(),
            })
            .await
            .expect("declare the stream");
    }

    /// Publishes `payload` to `subject` on Core (a stream whose subjects match stores it).
    pub async fn publish(&self, subject: &str, payload: &str) {
        self.wire()
            .publish(
                Arc::from(subject),
                Headers::new(),
                payload.to_owned().into(),
            )
            .await
            .expect("publish");
        self.wire().flush().await.expect("flush");
    }

    /// Publishes `payload` to stream subject `subject`; returns its stream sequence.
    pub async fn publish_stored(&self, subject: &str, payload: &str) -> u64 {
        self.wire()
            .publish_stored(
                Arc::from(subject),
                Headers::new(),
                payload.to_owned().into(),
            )
            .await
            .expect("stored publish")
    }

    /// Sends the acknowledgement `wire` (`+ACK`, `-NAK`, ...) for `message`, as the runtime does.
    pub async fn settle(&self, message: &RawMessage, wire: &str) {
        let reply = message
            .reply
            .as_ref()
            .expect("a JetStream delivery has a reply subject");
        self.wire()
            .acknowledge(reply, wire.to_owned().into())
            .await
            .expect("send the acknowledgement");
        self.wire().flush().await.expect("flush");
    }

    /// Opens a pull on durable `durable` of `stream`, reading `filter`.
    pub async fn pull(&self, stream: &str, durable: &str, filter: &str) -> Pull {
        self.pull_with(consumer(stream, Some(durable), filter))
            .await
    }

    /// Opens a pull on the consumer `spec` describes.
    pub async fn pull_with(&self, spec: ConsumerSpec) -> Pull {
        let (messages, stop) = self.wire().consume(spec).await.expect("consume");
        Pull { messages, stop }
    }

    /// The counters of `consumer` on `stream`, as the server reports them.
    pub async fn consumer_info(&self, stream: &str, consumer: &str) -> ConsumerFacts {
        match &self.backend {
            Backend::InProcess(nats) => nats
                .consumer_info(stream, consumer)
                .expect("the consumer exists"),
            Backend::Live(live) => {
                ConsumerFacts::from(&client::consumer_info(&live.jetstream, stream, consumer).await)
            }
        }
    }

    /// Every message `stream` stores, in order.
    pub async fn stream_messages(&self, name: &str) -> Vec<StoredMessage> {
        match &self.backend {
            Backend::InProcess(nats) => nats.stream_messages(name),
            Backend::Live(live) => client::stream_messages(&live.jetstream, name)
                .await
                .into_iter()
                .map(StoredMessage::from)
                .collect(),
        }
    }

    /// Starts recording every message published to `subject` from now on, through a Core
    /// subscription.
    pub async fn record(&self, subject: &str) -> Recording {
        self.record_in(subject, None).await
    }

    /// Records what one member of queue group `group` on `subject` gets.
    pub async fn record_in(&self, subject: &str, group: Option<&str>) -> Recording {
        let (mut messages, stop) = self
            .wire()
            .subscribe(subject.to_owned(), group.map(str::to_owned))
            .await
            .expect("subscribe");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Some(Ok(m)) = messages.next().await {
                sink.lock().unwrap_or_else(PoisonError::into_inner).push(m);
            }
        });
        Recording { seen, stop }
    }
}

/// A pull consumer's feed.
pub struct Pull {
    messages: MessageStream,
    stop: Box<dyn Unsubscribe>,
}

impl Pull {
    /// The next delivery, or `None` when none comes within `within`.
    pub async fn next_within(&mut self, within: Duration) -> Option<RawMessage> {
        match tokio::time::timeout(within, self.messages.next()).await {
            Ok(Some(Ok(m))) => Some(m),
            Ok(Some(Err(e))) => panic!("the pull failed: {e}"),
            Ok(None) | Err(_) => None,
        }
    }

    /// The next delivery; panics when none comes within [`PATIENCE`].
    pub async fn next(&mut self) -> RawMessage {
        self.next_within(PATIENCE)
            .await
            .expect("a delivery within the patience")
    }

    /// Asserts that nothing is delivered within `within`.
    pub async fn nothing_within(&mut self, within: Duration) {
        if let Some(m) = self.next_within(within).await {
            panic!(
                "expected no delivery within {within:?}, got one on `{}` ({:?})",
                m.subject, m.reply
            );
        }
    }

    /// Stops the pull.
    pub async fn stop(&self) {
        self.stop.stop().await;
    }
}

/// Messages a Core subscription got.
pub struct Recording {
    seen: Arc<Mutex<Vec<RawMessage>>>,
    stop: Box<dyn Unsubscribe>,
}

impl Recording {
    /// What it got so far.
    pub fn messages(&self) -> Vec<RawMessage> {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The payloads it got so far, as text.
    pub fn payloads(&self) -> Vec<String> {
        self.messages()
            .iter()
            .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
            .collect()
    }

    /// Waits until it got `n` messages (or the patience runs out), then a moment more for any
    /// extra; returns the payloads.
    pub async fn wait_for(&self, n: usize) -> Vec<String> {
        let what = format!("{n} messages recorded");
        client::wait_until(PATIENCE, &what, || self.messages().len() >= n).await;
        tokio::time::sleep(QUIET).await;
        self.payloads()
    }

    /// Stops recording.
    pub async fn stop(&self) {
        self.stop.stop().await;
    }
}

/// A durable (or ephemeral) consumer reading `filter` from `stream`, with [`ACK_WAIT`].
pub fn consumer(stream: &str, durable: Option<&str>, filter: &str) -> ConsumerSpec {
    ConsumerSpec {
        stream: stream.into(),
        durable: durable.map(str::to_owned),
        filter_subject: filter.into(),
        ack_wait: ACK_WAIT,
        max_ack_pending: None,
        deliver_policy: DeliverPolicy::All,
        batch: 16,
        expires: Duration::from_secs(5),
    }
}

/// The facts of a delivery's acknowledgement subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub stream: String,
    pub consumer: String,
    pub delivered: u64,
    pub stream_seq: u64,
    pub consumer_seq: u64,
    pub pending: u64,
}

impl Reply {
    /// Reads `$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<ts>.<pending>` (or the v2
    /// form with a domain and an account hash).
    pub fn of(message: &RawMessage) -> Self {
        Self::of_subject(message.reply.as_deref().expect("a reply subject"))
    }

    /// [`Reply::of`] an acknowledgement subject.
    pub fn of_subject(reply: &str) -> Self {
        let tokens: Vec<&str> = reply.split('.').collect();
        assert!(
            tokens.len() >= 9 && tokens[0] == "$JS" && tokens[1] == "ACK",
            "not an acknowledgement subject: {reply}"
        );
        let t = if tokens.len() == 9 {
            &tokens[2..]
        } else {
            &tokens[4..11]
        };
        let n = |s: &str| s.parse::<u64>().expect("a number in the ack subject");
        Self {
            stream: t[0].to_owned(),
            consumer: t[1].to_owned(),
            delivered: n(t[2]),
            stream_seq: n(t[3]),
            consumer_seq: n(t[4]),
            pending: n(t[6]),
        }
    }

    /// `(delivered, stream seq, consumer seq)`.
    pub fn counts(&self) -> (u64, u64, u64) {
        (self.delivered, self.stream_seq, self.consumer_seq)
    }
}

/// The text of a payload.
pub fn text(message: &RawMessage) -> String {
    String::from_utf8_lossy(&message.payload).into_owned()
}
