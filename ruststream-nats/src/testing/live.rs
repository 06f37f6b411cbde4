//! [`TestApp`](super::TestApp) against a real nats-server: the app on its own connection, every
//! message the server carries recorded from a second one, and the rule by which `settle` tells
//! that every message was handled to a final or a pending outcome.
//!
//! # When `settle` returns on a real server
//!
//! There is no paused clock to say that nothing can run, so `settle` asks what it can observe,
//! every [`LIVE_POLL`], until all of this holds at once (after a round trip on the app's
//! connection and a marker on the test's, so every message either sent is on the record):
//!
//! - every JetStream delivery the server sent the app has its settlement on the wire (`+ACK`,
//!   `-NAK`, `+TERM`; a `+WPI` does not count), and every durable consumer of the app has no
//!   stored message left to deliver (`num_pending` 0) and made no delivery the record lacks;
//! - every message carried on a Core registration's subject was handled by it;
//! - every dead letter the runtime decided is on its dead-letter subject, every Core retry copy
//!   due by now was published, and every `-NAK`ed JetStream message whose delay is over was
//!   delivered again (while the app runs).
//!
//! A message held by a `-NAK` delay or a Core copy waiting on its timer counts as settled, as in
//! process: only time moves them. After [`LIVE_PATIENCE`] it panics with what is still pending.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_nats::jetstream;
use bytes::Bytes;
use ruststream::registration::RegistrationInfo;
use ruststream::settle::{AckKind, DeliveryModel, Settle};
use ruststream::{Error, ErrorKind, Handling, Headers, Observer, PublishError, PublishErrorKind};
use tokio::time::Instant;

use super::Recorder;
use super::wire::{Wire, round_trip};
use crate::embedded::streams_of;
use crate::subject::matches;
use crate::transport::nats::{NatsTransport, from_header_map, to_header_map};
use crate::transport::{CorePubSub, JetStreamPublish, StreamAdmin};
use crate::transport::{RawMessage, Transport, TransportError, TransportErrorKind};
use crate::{JetStreamInfo, RETRY_COUNT_HEADER};

/// How long [`TestApp::settle`](super::TestApp::settle) waits on a real server before it panics
/// with what is still pending.
pub const LIVE_PATIENCE: Duration = Duration::from_secs(10);

/// How often a live `settle` asks again.
pub const LIVE_POLL: Duration = Duration::from_millis(10);

/// An app's connection, the test's own, and everything the server carried.
pub(super) struct Live {
    app_client: async_nats::Client,
    /// The test's connection: its publishes, its questions, the record of the wire.
    test: NatsTransport,
    js: jetstream::Context,
    wire: Wire,
    /// The streams an ephemeral consumer of the app reads.
    ephemeral: Vec<String>,
    watch: Arc<Watch>,
    /// The app's durable consumers, as (stream, consumer).
    durables: Vec<(String, String)>,
    /// The app's Core registrations, as (name, subject).
    core: Vec<(String, String)>,
    /// Streams made for the test, deleted at shutdown.
    created: Vec<String>,
}

impl Live {
    /// Connects the app and the test to `url`, starts recording everything the server
    /// carries, and makes the streams the app reads that the server lacks and the app does not
    /// declare (`declared`). Returns the app's transport with it.
    pub(super) async fn connect(
        url: &str,
        registrations: &[RegistrationInfo],
        declared: &[String],
        recorder: Arc<Recorder>,
    ) -> Result<(Self, Arc<dyn Transport>), Error> {
        let shown = crate::options::split_credentials(url).servers.join(",");
        let refused = |e: async_nats::ConnectError| {
            Error::new(
                ErrorKind::Connect,
                format!(
                    "a live TestApp cannot connect to the nats-server at {shown}: start one \
                     (`ruststream_nats::testing::NatsServer::start()`, or `nats-server -js`) or fix the URL"
                ),
            )
            .with_source(e)
        };
        let test_client = async_nats::connect(url).await.map_err(refused)?;
        let app_client = async_nats::connect(url).await.map_err(refused)?;
        let wire = Wire::start(test_client.clone())
            .await
            .map_err(|e| Error::new(ErrorKind::Connect, format!("a live TestApp: {e}")))?;
        let test = NatsTransport::new(test_client.clone());
        let js = jetstream::new(test_client);
        let mut created = Vec::new();
        for spec in streams_of(registrations) {
            let exists = test.stream_exists(&spec.name).await.map_err(|e| {
                Error::new(
                    ErrorKind::Broker,
                    format!("cannot ask for stream `{}`", spec.name),
                )
                .with_source(e)
            })?;
            if exists || declared.contains(&spec.name) {
                continue;
            }
            let name = spec.name.clone();
            test.declare_stream(spec).await.map_err(|e| {
                Error::new(ErrorKind::Broker, format!("cannot create stream `{name}`"))
                    .with_source(e)
            })?;
            created.push(name);
        }
        let durables = registrations
            .iter()
            .filter_map(|r| Some((r.descriptor.stream.clone()?, r.descriptor.consumer.clone()?)))
            .collect();
        let ephemeral = registrations
            .iter()
            .filter(|r| r.descriptor.consumer.is_none())
            .filter_map(|r| r.descriptor.stream.clone())
            .collect();
        let core = registrations
            .iter()
            .filter(|r| r.descriptor.model == DeliveryModel::Core)
            .map(|r| (r.name.clone(), r.descriptor.subject.clone()))
            .collect();
        let watch = Arc::new(Watch {
            recorder,
            dead_letters: registrations
                .iter()
                .filter_map(|r| Some((r.name.clone(), r.policy.dead_letter.clone()?)))
                .collect(),
            expected: Mutex::default(),
        });
        let transport: Arc<dyn Transport> = Arc::new(NatsTransport::new(app_client.clone()));
        let live = Self {
            app_client,
            test,
            js,
            wire,
            ephemeral,
            watch,
            durables,
            core,
            created,
        };
        Ok((live, transport))
    }

    /// The observer the app runs with: the recorder, and what each decision makes the wire owe.
    pub(super) fn observer(&self) -> Arc<dyn Observer> {
        Arc::clone(&self.watch) as Arc<dyn Observer>
    }

    /// The streams made for the test.
    pub(super) fn created(&self) -> &[String] {
        &self.created
    }

    /// The server has every subscription the app made once this round trip is back.
    pub(super) async fn app_ready(&self) {
        let _ = round_trip(&self.app_client).await;
    }

    /// Publishes as a client would: a stored publish, confirmed, when a stream stores
    /// `subject`, else a Core publish.
    pub(super) async fn publish(
        &self,
        subject: &str,
        headers: Headers,
        payload: Bytes,
    ) -> Result<(), PublishError> {
        let failed = |e: TransportError| {
            let kind = match e.kind {
                TransportErrorKind::Invalid => PublishErrorKind::InvalidSubject,
                _ => PublishErrorKind::Broker,
            };
            PublishError::new(kind, subject).with_source(e)
        };
        let stored = self.test.stream_by_subject(subject).await.map_err(failed)?;
        if stored.is_some() {
            self.test
                .publish_stored(Arc::from(subject), headers, payload)
                .await
                .map_err(failed)?;
        } else {
            // On the client itself, not through the transport's writer task: `settle`'s marker
            // follows it.
            let client = self.test.client();
            let headers = to_header_map(&headers).map_err(failed)?;
            let sent = client
                .publish_with_headers(subject.to_owned(), headers, payload)
                .await;
            sent.map_err(|e| PublishError::new(PublishErrorKind::Broker, subject).with_source(e))?;
            self.test.flush().await.map_err(failed)?;
        }
        Ok(())
    }

    /// The test's own client of the server, for requests.
    pub(super) fn test_transport(&self) -> Arc<dyn Transport> {
        Arc::new(self.test.clone())
    }

    /// Every message published to a subject `pattern` matches (JetStream deliveries left out),
    /// as the wire handed it over.
    pub(super) fn published(&self, pattern: &str) -> Vec<RawMessage> {
        self.wire
            .messages()
            .iter()
            .filter(|m| delivery(m).is_none() && matches(pattern, &m.subject))
            .map(raw)
            .collect()
    }

    /// Whether a JetStream delivery came from a consumer of the app.
    fn is_the_apps(&self, info: &JetStreamInfo) -> bool {
        self.ephemeral.iter().any(|s| **s == *info.stream)
            || self
                .durables
                .iter()
                .any(|(s, c)| **s == *info.stream && **c == *info.consumer)
    }

    /// The consumer's info, as the server reports it.
    pub(super) async fn consumer_info(
        &self,
        stream: &str,
        consumer: &str,
    ) -> Option<jetstream::consumer::Info> {
        let stream = self.js.get_stream(stream).await.ok()?;
        stream.consumer_info(consumer).await.ok()
    }

    /// Every message `stream` stores, in order.
    pub(super) async fn stream_messages(
        &self,
        stream: &str,
    ) -> Vec<jetstream::message::StreamMessage> {
        let Ok(mut stream) = self.js.get_stream(stream).await else {
            return Vec::new();
        };
        let Ok(info) = stream.info().await else {
            return Vec::new();
        };
        let (first, last) = (info.state.first_sequence.max(1), info.state.last_sequence);
        let mut out = Vec::new();
        for seq in first..=last {
            if let Ok(message) = stream.get_raw_message(seq).await {
                out.push(message);
            }
        }
        out
    }

    /// Deletes the streams made for the test.
    pub(super) async fn clean_up(&self) {
        for name in &self.created {
            let _ = self.js.delete_stream(name).await;
        }
    }

    /// Polls until nothing is pending (`Ok`), or returns what still is after `patience`.
    pub(super) async fn settle(&self, running: bool, patience: Duration) -> Result<(), String> {
        let deadline = Instant::now() + patience;
        loop {
            let pending = self.pending(running).await;
            if pending.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(pending.join("\n  "));
            }
            tokio::time::sleep(LIVE_POLL).await;
        }
    }

    /// What is still pending, one line each: nothing when the app settled.
    async fn pending(&self, running: bool) -> Vec<String> {
        // What the app said, taken before the flushes: all it sent by then is on the record after.
        let handled: BTreeMap<&str, usize> = self
            .core
            .iter()
            .map(|(name, _)| (name.as_str(), self.watch.recorder.handled(name).len()))
            .collect();
        let expected = self
            .watch
            .expected
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let now = Instant::now();
        let mut pending = Vec::new();
        if let Err(e) = round_trip(&self.app_client).await {
            pending.push(e);
        }
        let mut infos = Vec::new();
        if running {
            for (stream, consumer) in &self.durables {
                match self.consumer_info(stream, consumer).await {
                    Some(info) => infos.push(info),
                    None => pending.push(format!("consumer {stream}/{consumer} is not there yet")),
                }
            }
        }
        if let Err(e) = self.wire.sync().await {
            pending.push(e);
        }
        let wire = self.wire.messages();
        // A delivery shows on the wire with the subject the message was published to and its
        // acknowledgement subject as the reply.
        let deliveries: Vec<(&str, JetStreamInfo)> = wire
            .iter()
            .filter_map(delivery)
            .filter(|(_, info)| self.is_the_apps(info))
            .collect();
        let answered: HashSet<&str> = wire
            .iter()
            .filter(|m| m.subject.starts_with("$JS.ACK.") && &m.payload[..] != b"+WPI")
            .map(|m| m.subject.as_str())
            .collect();
        for (reply, info) in &deliveries {
            if !answered.contains(reply) {
                pending.push(format!(
                    "delivery {} of stream {} sequence {} to consumer {} has no settlement yet",
                    info.delivered, info.stream, info.stream_sequence, info.consumer
                ));
            }
        }
        for info in &infos {
            let seen = deliveries
                .iter()
                .filter(|(_, d)| *d.stream == info.stream_name && *d.consumer == info.name)
                .count() as u64;
            if info.num_pending > 0 || seen < info.delivered.consumer_sequence {
                pending.push(format!(
                    "consumer {}/{}: {} stored message(s) not delivered yet, {} of {} deliveries seen",
                    info.stream_name,
                    info.name,
                    info.num_pending,
                    seen,
                    info.delivered.consumer_sequence
                ));
            }
        }
        // A stopped app no longer subscribes: what reached its subjects since is not its.
        for (name, subject) in self.core.iter().filter(|_| running) {
            let carried = wire
                .iter()
                .filter(|m| delivery(m).is_none() && matches(subject, &m.subject))
                .count();
            let done = handled.get(name.as_str()).copied().unwrap_or(0);
            if done < carried {
                pending.push(format!(
                    "registration `{name}` handled {done} of the {carried} message(s) on `{subject}`"
                ));
            }
        }
        owed(&expected, &wire, &deliveries, now, running, &mut pending);
        pending
    }
}

/// What the decisions made the wire owe that it does not show yet: dead letters, copies due,
/// redeliveries due (while the app runs).
fn owed(
    expected: &[Expected],
    wire: &[async_nats::Message],
    deliveries: &[(&str, JetStreamInfo)],
    now: Instant,
    running: bool,
    pending: &mut Vec<String>,
) {
    let mut dead: BTreeMap<&str, usize> = BTreeMap::new();
    let mut copies = 0;
    for e in expected {
        match e {
            Expected::DeadLetter(subject) => *dead.entry(subject).or_default() += 1,
            Expected::Copy(due) if *due <= now => copies += 1,
            Expected::Copy(_) => {}
            Expected::Redelivery(info, due) if running && *due <= now => {
                let same = |d: &JetStreamInfo| {
                    d.stream == info.stream
                        && d.consumer == info.consumer
                        && d.stream_sequence == info.stream_sequence
                };
                let again = deliveries
                    .iter()
                    .any(|(_, d)| same(d) && d.delivered > info.delivered);
                // A retry in its lane runs again on the same delivery: its final settlement,
                // not a new delivery, is what the wire then shows.
                let settled = wire.iter().any(|m| {
                    JetStreamInfo::parse(&m.subject).is_some_and(|d| same(&d))
                        && (m.payload.starts_with(b"+ACK") || m.payload.starts_with(b"+TERM"))
                });
                if !again && !settled {
                    pending.push(format!(
                        "stream {} sequence {} was sent back to consumer {} and is not delivered again yet",
                        info.stream, info.stream_sequence, info.consumer
                    ));
                }
            }
            Expected::Redelivery(..) => {}
        }
    }
    for (subject, decided) in dead {
        let published = wire
            .iter()
            .filter(|m| delivery(m).is_none() && m.subject.as_str() == subject)
            .count();
        if published < decided {
            pending.push(format!(
                "{decided} dead letter(s) decided for `{subject}`, {published} published"
            ));
        }
    }
    let published = wire
        .iter()
        .filter(|m| delivery(m).is_none())
        .filter(|m| {
            m.headers
                .as_ref()
                .is_some_and(|h| h.get(RETRY_COUNT_HEADER).is_some())
        })
        .count();
    if published < copies {
        pending.push(format!(
            "{copies} Core retry copies due, {published} published"
        ));
    }
}

/// A JetStream delivery's acknowledgement subject and what it tells; `None` for a publish.
fn delivery(m: &async_nats::Message) -> Option<(&str, JetStreamInfo)> {
    let reply = m.reply.as_deref()?;
    Some((reply, JetStreamInfo::parse(reply)?))
}

/// A message of the wire as a transport hands it over.
fn raw(m: &async_nats::Message) -> RawMessage {
    RawMessage {
        subject: Arc::from(m.subject.as_str()),
        reply: m.reply.as_deref().map(|r| Arc::<str>::from(r).into()),
        headers: from_header_map(m.headers.as_ref()),
        payload: m.payload.clone(),
        jetstream: None,
    }
}

/// What a decision makes the wire owe.
#[derive(Debug, Clone)]
enum Expected {
    /// A message on this dead-letter subject.
    DeadLetter(String),
    /// A Core retry copy, published by then.
    Copy(Instant),
    /// A delivery of the same message with a higher count, by then.
    Redelivery(JetStreamInfo, Instant),
}

/// The app's observer on a real server: the recorder, and what each decision owes.
struct Watch {
    recorder: Arc<Recorder>,
    /// Each registration's dead-letter subject.
    dead_letters: BTreeMap<String, String>,
    expected: Mutex<Vec<Expected>>,
}

impl Observer for Watch {
    fn handled(&self, handling: &Handling<'_>) {
        Observer::handled(&*self.recorder, handling);
        let decision = handling.decision;
        let now = Instant::now();
        let mut owed = Vec::new();
        if decision.dead_letter
            && let Some(subject) = self.dead_letters.get(handling.registration)
        {
            owed.push(Expected::DeadLetter(subject.clone()));
        }
        if let Some(copy) = decision.copy {
            owed.push(Expected::Copy(now + copy.after));
        }
        let back = match decision.settle {
            Settle::Send(AckKind::Nak) => Some(Duration::ZERO),
            Settle::Send(AckKind::NakAfter(delay)) => Some(delay),
            _ => None,
        };
        if let Some(delay) = back
            && let Some(info) = handling.delivery.extension::<JetStreamInfo>()
        {
            owed.push(Expected::Redelivery(info.clone(), now + delay));
        }
        self.expected
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(owed);
    }
}
