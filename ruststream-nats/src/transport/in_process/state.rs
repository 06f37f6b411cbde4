//! The emulated server's state and every rule it follows. All of it is synchronous: the
//! transport methods, the feeds and the timer driver take the lock, act, and let go before any
//! await.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use ruststream::Headers;
use tokio::sync::mpsc::UnboundedSender;
use tokio::time::Instant;

use super::facts::{ConsumerFacts, StoredMessage, StreamLimits};
use super::subject::{matches, overlaps};
use crate::descriptor::DeliverPolicy;
use crate::transport::{
    ConsumerSpec, RawMessage, StoredAck, StreamSpec, TransportError, TransportErrorKind,
};

/// The header a stream deduplicates on.
const MSG_ID: &str = "Nats-Msg-Id";

/// The prefix of every acknowledgement subject.
const ACK_PREFIX: &str = "$JS.ACK.";

/// How many deliveries may wait for a settlement when the consumer sets no limit (the server's
/// default).
const DEFAULT_MAX_ACK_PENDING: usize = 1000;

/// The whole emulated server.
#[derive(Debug)]
pub(super) struct State {
    subscriptions: Vec<Subscription>,
    group_cursor: HashMap<String, usize>,
    streams: BTreeMap<String, Stream>,
    history: Vec<RawMessage>,
    /// Bumped by every change anyone could observe: a publish, a delivery, a settlement, a
    /// timer that fired, a feed that handed a message over.
    activity: u64,
    next_id: u64,
    clock: WallClock,
}

/// A Core subscription.
#[derive(Debug)]
struct Subscription {
    id: u64,
    pattern: String,
    group: Option<String>,
    tx: UnboundedSender<RawMessage>,
    /// Messages sent to the feed that its reader has not taken yet.
    queued: usize,
}

#[derive(Debug)]
struct Stream {
    subjects: Vec<String>,
    messages: BTreeMap<u64, Stored>,
    last_seq: u64,
    consumers: BTreeMap<String, Consumer>,
    limits: StreamLimits,
    /// The `Nats-Msg-Id`s seen within the duplicate window: sequence, when.
    ids: HashMap<String, (u64, Instant)>,
    /// The `Nats-Msg-Id` of the last message stored, if it had one.
    last_msg_id: Option<String>,
}

/// What a stream did with a message published to a subject it stores.
#[derive(Debug)]
pub(super) enum Storing {
    Stored(String, u64),
    /// Dropped: the stream stored a message with the same id within its duplicate window.
    Duplicate(String, u64),
    /// Refused, and why (the server's words).
    Refused(String, String),
    /// No stream stores the subject.
    Nowhere,
}

#[derive(Debug, Clone)]
struct Stored {
    subject: Arc<str>,
    headers: Headers,
    payload: Bytes,
    timestamp_ns: u128,
}

#[derive(Debug)]
struct Consumer {
    durable: bool,
    filter: String,
    ack_wait: Duration,
    max_ack_pending: usize,
    deliver_policy: DeliverPolicy,
    /// The next stream sequence to look at for a first delivery.
    next_seq: u64,
    /// Stream sequences to deliver before `next_seq` (the last message of each subject, for
    /// `LastPerSubject`).
    skip: VecDeque<u64>,
    /// The consumer sequence of the last delivery.
    dseq: u64,
    /// Delivered and not acknowledged or terminated, by stream sequence.
    pending: BTreeMap<u64, Pending>,
    /// Stream sequences due for a redelivery, in the order they became due.
    redeliver: VecDeque<u64>,
    pulls: Vec<Pull>,
    pull_cursor: usize,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    /// How many times the message was delivered.
    delivered: u64,
    state: PendingState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PendingState {
    /// Handed out; redelivered if no settlement comes by the deadline (ack_wait).
    Out { deadline: Instant },
    /// A `-NAK` with a delay: held until then.
    Held { until: Instant },
    /// Waiting on the redelivery queue for a pull.
    Due,
}

#[derive(Debug)]
struct Pull {
    id: u64,
    tx: UnboundedSender<RawMessage>,
    batch: usize,
    /// Messages sent to the feed that its reader has not taken yet.
    buffered: usize,
}

/// Nanoseconds since the epoch on tokio's clock, for the timestamps in acknowledgement subjects.
#[derive(Debug)]
struct WallClock {
    epoch_ns: u128,
    start: Instant,
}

impl WallClock {
    fn new() -> Self {
        Self {
            epoch_ns: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
            start: Instant::now(),
        }
    }

    fn now_ns(&self) -> u128 {
        self.epoch_ns
            + Instant::now()
                .saturating_duration_since(self.start)
                .as_nanos()
    }
}

/// What a feed reads from.
#[derive(Debug, Clone)]
pub(super) enum FeedKey {
    /// A Core subscription.
    Subscription(u64),
    /// A pull on a consumer.
    Pull {
        stream: String,
        consumer: String,
        id: u64,
    },
}

/// A settlement, as its wire form says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AckWire {
    Ack,
    Nak(Option<Duration>),
    Term,
    Progress,
}

impl AckWire {
    fn parse(payload: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(payload).ok()?.trim();
        if text.is_empty() || text.starts_with("+ACK") || text.starts_with("+NXT") {
            Some(Self::Ack)
        } else if let Some(rest) = text.strip_prefix("-NAK") {
            Some(Self::Nak(nak_delay(rest.trim())))
        } else if text.starts_with("+TERM") {
            Some(Self::Term)
        } else if text.starts_with("+WPI") {
            Some(Self::Progress)
        } else {
            None
        }
    }
}

/// The delay of `-NAK {"delay": ns}`; a delay that does not parse makes a plain `-NAK`, as on the
/// server. A negative delay is no delay.
fn nak_delay(arg: &str) -> Option<Duration> {
    #[derive(serde::Deserialize)]
    struct NakOptions {
        #[serde(default)]
        delay: i64,
    }
    if !arg.starts_with('{') {
        return None;
    }
    let options: NakOptions = serde_json::from_str(arg).ok()?;
    Some(Duration::from_nanos(
        u64::try_from(options.delay).unwrap_or(0),
    ))
}

/// The facts an acknowledgement subject carries:
/// `$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<ts>.<pending>`.
struct AckSubject<'a> {
    stream: &'a str,
    consumer: &'a str,
    stream_seq: u64,
}

impl<'a> AckSubject<'a> {
    fn parse(subject: &'a str) -> Option<Self> {
        let rest = subject.strip_prefix(ACK_PREFIX)?;
        let tokens: Vec<&str> = rest.split('.').collect();
        // v1: 7 tokens after the prefix; v2 adds a domain and an account hash in front (and may
        // add a random token at the end).
        let t: &[&str] = match tokens.len() {
            7 => &tokens,
            9 | 10 => &tokens[2..9],
            _ => return None,
        };
        Some(Self {
            stream: t[0],
            consumer: t[1],
            stream_seq: t[3].parse().ok()?,
        })
    }
}

impl Stream {
    /// The failed `Nats-Expected-*` check of `message`, in the server's words.
    fn expectation_failed(&self, name: &str, message: &RawMessage) -> Option<String> {
        let headers = &message.headers;
        if let Some(expected) = headers.get("Nats-Expected-Stream")
            && expected != name
        {
            return Some("expected stream does not match".to_owned());
        }
        if let Some(expected) = headers.get("Nats-Expected-Last-Sequence")
            && expected.trim().parse::<u64>().ok() != Some(self.last_seq)
        {
            return Some(format!("wrong last sequence: {}", self.last_seq));
        }
        if let Some(expected) = headers.get("Nats-Expected-Last-Subject-Sequence") {
            let last = self
                .messages
                .iter()
                .rev()
                .find(|(_, m)| m.subject == message.subject)
                .map_or(0, |(seq, _)| *seq);
            if expected.trim().parse::<u64>().ok() != Some(last) {
                return Some(format!("wrong last sequence: {last}"));
            }
        }
        if let Some(expected) = headers.get("Nats-Expected-Last-Msg-Id")
            && self.last_msg_id.as_deref().unwrap_or_default() != expected
        {
            return Some(format!(
                "wrong last msg ID: {}",
                self.last_msg_id.as_deref().unwrap_or_default()
            ));
        }
        None
    }
}

impl State {
    pub(super) fn new() -> Self {
        Self {
            subscriptions: Vec::new(),
            group_cursor: HashMap::new(),
            streams: BTreeMap::new(),
            history: Vec::new(),
            activity: 0,
            next_id: 0,
            clock: WallClock::new(),
        }
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    // ---- publishing -----------------------------------------------------------------------

    /// Publishes one message as the server takes it: an acknowledgement is acted on, a stream
    /// whose subjects match stores it, and every matching Core subscription (one member per
    /// queue group) gets it. Returns the stream and sequence it was stored under.
    pub(super) fn publish(
        &mut self,
        subject: Arc<str>,
        headers: Headers,
        payload: Bytes,
        now: Instant,
    ) -> Option<(String, u64)> {
        let message = RawMessage {
            subject,
            reply: None,
            headers,
            payload,
        };
        match self.publish_message(message, now) {
            Storing::Stored(stream, seq) => Some((stream, seq)),
            _ => None,
        }
    }

    /// Publishes `message` (with its reply subject) and says what a stream did with it.
    pub(super) fn publish_message(&mut self, message: RawMessage, now: Instant) -> Storing {
        self.history.push(message.clone());
        self.activity += 1;
        if message.subject.starts_with(ACK_PREFIX) {
            self.acknowledge(&message.subject, &message.payload, now);
        }
        let stored = self.store(&message, now);
        self.route(&message);
        stored
    }

    /// Publishes to a stream, as a JetStream publish does: stored and routed like any publish
    /// when a stream stores the subject. Without one, the server has no responder: `NoStream`
    /// when no one is subscribed (and nothing happened), else the subscribers got it and no
    /// stream acknowledged it (a real client times out waiting).
    pub(super) fn publish_stored(
        &mut self,
        subject: Arc<str>,
        headers: Headers,
        payload: Bytes,
        now: Instant,
    ) -> Result<u64, TransportError> {
        self.publish_confirmed(subject, headers, payload, now)
            .map(|ack| ack.sequence)
    }

    /// [`State::publish_stored`] with the whole acknowledgement: a refusal (limits with
    /// `discard: new`, a failed `Nats-Expected-*` check) is `Refused`, a message id seen within
    /// the duplicate window is acknowledged as a duplicate and not stored again.
    pub(super) fn publish_confirmed(
        &mut self,
        subject: Arc<str>,
        headers: Headers,
        payload: Bytes,
        now: Instant,
    ) -> Result<StoredAck, TransportError> {
        let message = RawMessage {
            subject: Arc::clone(&subject),
            reply: None,
            headers,
            payload,
        };
        if self.stream_storing(&subject).is_some() {
            match self.publish_message(message, now) {
                Storing::Stored(stream, sequence) => {
                    return Ok(StoredAck {
                        stream,
                        sequence,
                        duplicate: false,
                    });
                }
                Storing::Duplicate(stream, sequence) => {
                    return Ok(StoredAck {
                        stream,
                        sequence,
                        duplicate: true,
                    });
                }
                Storing::Refused(stream, why) => {
                    return Err(TransportError::new(
                        TransportErrorKind::Refused,
                        format!("stored publish to `{subject}` failed: stream `{stream}`: {why}"),
                    ));
                }
                Storing::Nowhere => {
                    return Err(TransportError::new(
                        TransportErrorKind::NoStream,
                        format!("no stream stores `{subject}`: declare a stream with this subject"),
                    ));
                }
            }
        }
        if !self.has_subscriber(&subject) {
            return Err(TransportError::new(
                TransportErrorKind::NoStream,
                format!("no stream stores `{subject}`: declare a stream with this subject"),
            ));
        }
        self.publish_message(message, now);
        Err(TransportError::new(
            TransportErrorKind::Other,
            format!(
                "no stream stores `{subject}`: its Core subscribers got the message, and no stream acknowledged it"
            ),
        ))
    }

    /// Whether a Core subscription matches `subject`.
    pub(super) fn has_subscriber(&self, subject: &str) -> bool {
        self.subscriptions
            .iter()
            .any(|s| !s.tx.is_closed() && matches(&s.pattern, subject))
    }

    /// A fresh inbox subject for a request.
    pub(super) fn new_inbox(&mut self) -> String {
        format!("_INBOX.inprocess.{}", self.id())
    }

    /// The stream whose subjects match `subject` (or overlap it, for a pattern).
    pub(super) fn stream_storing(&self, subject: &str) -> Option<String> {
        self.streams
            .iter()
            .find(|(_, s)| s.subjects.iter().any(|p| overlaps(p, subject)))
            .map(|(name, _)| name.clone())
    }

    fn store(&mut self, message: &RawMessage, now: Instant) -> Storing {
        let timestamp_ns = self.clock.now_ns();
        let Some((name, stream)) = self
            .streams
            .iter_mut()
            .find(|(_, s)| s.subjects.iter().any(|p| matches(p, &message.subject)))
        else {
            return Storing::Nowhere;
        };
        let name = name.clone();
        let window = stream.limits.duplicate_window;
        stream
            .ids
            .retain(|_, (_, at)| now.duration_since(*at) < window);
        let msg_id = message.headers.get(MSG_ID).map(str::to_owned);
        if let Some(id) = &msg_id
            && let Some((seq, _)) = stream.ids.get(id)
        {
            return Storing::Duplicate(name, *seq);
        }
        if let Some(why) = stream.expectation_failed(&name, message) {
            return Storing::Refused(name, why);
        }
        if let Some(max) = stream.limits.max_msgs
            && u64::try_from(stream.messages.len()).unwrap_or(u64::MAX) >= max
        {
            if stream.limits.discard_new {
                return Storing::Refused(name, "maximum messages exceeded".to_owned());
            }
            stream.messages.pop_first();
        }
        stream.last_seq += 1;
        let seq = stream.last_seq;
        stream.messages.insert(
            seq,
            Stored {
                subject: Arc::clone(&message.subject),
                headers: message.headers.clone(),
                payload: message.payload.clone(),
                timestamp_ns,
            },
        );
        if let Some(id) = &msg_id {
            stream.ids.insert(id.clone(), (seq, now));
        }
        stream.last_msg_id = msg_id;
        self.pump_stream(&name);
        Storing::Stored(name, seq)
    }

    /// Sets the limits of stream `name`; false without such a stream.
    pub(super) fn set_limits(&mut self, name: &str, limits: StreamLimits) -> bool {
        self.activity += 1;
        match self.streams.get_mut(name) {
            Some(stream) => {
                stream.limits = limits;
                true
            }
            None => false,
        }
    }

    /// Every stream with its subjects.
    pub(super) fn streams(&self) -> Vec<StreamSpec> {
        self.streams
            .iter()
            .map(|(name, s)| StreamSpec {
                name: name.clone(),
                subjects: s.subjects.clone(),
            })
            .collect()
    }

    /// Hands a Core message to every matching subscription, one member per queue group.
    fn route(&mut self, message: &RawMessage) {
        self.subscriptions.retain(|s| !s.tx.is_closed());
        let mut groups: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        let mut chosen = Vec::new();
        for (i, sub) in self.subscriptions.iter().enumerate() {
            if !matches(&sub.pattern, &message.subject) {
                continue;
            }
            match &sub.group {
                Some(group) => groups.entry(group.clone()).or_default().push(i),
                None => chosen.push(i),
            }
        }
        for (group, members) in groups {
            let cursor = self.group_cursor.entry(group).or_insert(0);
            chosen.push(members[*cursor % members.len()]);
            *cursor = cursor.wrapping_add(1);
        }
        chosen.sort_unstable();
        for i in chosen {
            let sub = &mut self.subscriptions[i];
            if sub.tx.send(message.clone()).is_ok() {
                sub.queued += 1;
                self.activity += 1;
            }
        }
    }

    // ---- Core subscriptions -------------------------------------------------------------------

    pub(super) fn subscribe(
        &mut self,
        pattern: String,
        group: Option<String>,
        tx: UnboundedSender<RawMessage>,
    ) -> u64 {
        let id = self.id();
        self.subscriptions.push(Subscription {
            id,
            pattern,
            group,
            tx,
            queued: 0,
        });
        self.activity += 1;
        id
    }

    // ---- streams --------------------------------------------------------------------------

    pub(super) fn declare_stream(&mut self, spec: StreamSpec) -> Result<(), TransportError> {
        for (name, other) in &self.streams {
            if *name == spec.name {
                continue;
            }
            for mine in &spec.subjects {
                if let Some(theirs) = other.subjects.iter().find(|s| overlaps(s, mine)) {
                    return Err(TransportError::new(
                        TransportErrorKind::Other,
                        format!(
                            "stream `{}`: subject `{mine}` overlaps `{theirs}` of stream `{name}`; a subject is stored by one stream",
                            spec.name
                        ),
                    ));
                }
            }
        }
        self.activity += 1;
        match self.streams.get_mut(&spec.name) {
            Some(stream) => stream.subjects = spec.subjects,
            None => {
                self.streams.insert(
                    spec.name,
                    Stream {
                        subjects: spec.subjects,
                        messages: BTreeMap::new(),
                        last_seq: 0,
                        consumers: BTreeMap::new(),
                        limits: StreamLimits::default(),
                        ids: HashMap::new(),
                        last_msg_id: None,
                    },
                );
            }
        }
        Ok(())
    }

    pub(super) fn stream_exists(&self, name: &str) -> bool {
        self.streams.contains_key(name)
    }

    pub(super) fn stream_names(&self) -> Vec<String> {
        self.streams.keys().cloned().collect()
    }

    pub(super) fn stream_subjects(&self, name: &str) -> Option<Vec<String>> {
        self.streams.get(name).map(|s| s.subjects.clone())
    }

    pub(super) fn stream_messages(&self, name: &str) -> Vec<StoredMessage> {
        self.streams.get(name).map_or_else(Vec::new, |stream| {
            stream
                .messages
                .iter()
                .map(|(seq, m)| {
                    StoredMessage::new(
                        *seq,
                        Arc::clone(&m.subject),
                        m.headers.clone(),
                        m.payload.clone(),
                    )
                })
                .collect()
        })
    }

    // ---- consumers ------------------------------------------------------------------------

    /// Gets or creates the consumer of `spec` and adds a pull to it; returns the consumer's
    /// name and the pull's id.
    pub(super) fn consume(
        &mut self,
        spec: &ConsumerSpec,
        tx: UnboundedSender<RawMessage>,
    ) -> Result<(String, u64), TransportError> {
        let name = match &spec.durable {
            Some(name) => name.clone(),
            None => {
                let n = self.id();
                format!("EPHEMERAL{n:06}")
            }
        };
        let id = self.id();
        let Some(stream) = self.streams.get_mut(&spec.stream) else {
            return Err(TransportError::new(
                TransportErrorKind::StreamNotFound,
                format!(
                    "no stream `{}`: declare it before reading `{}` from it",
                    spec.stream, spec.filter_subject
                ),
            ));
        };
        if !stream
            .subjects
            .iter()
            .any(|s| overlaps(s, &spec.filter_subject))
        {
            return Err(TransportError::new(
                TransportErrorKind::Invalid,
                format!(
                    "consumer `{name}`: filter subject `{}` is not stored by stream `{}` (its subjects: {})",
                    spec.filter_subject,
                    spec.stream,
                    stream.subjects.join(", ")
                ),
            ));
        }
        let max_ack_pending = match spec.max_ack_pending {
            Some(n) if n > 0 => usize::try_from(n).unwrap_or(usize::MAX),
            _ => DEFAULT_MAX_ACK_PENDING,
        };
        match stream.consumers.get_mut(&name) {
            Some(consumer) => {
                if consumer.deliver_policy != spec.deliver_policy
                    || consumer.filter != spec.filter_subject
                {
                    return Err(TransportError::new(
                        TransportErrorKind::ConsumerConflict,
                        format!(
                            "consumer `{name}` of stream `{}` exists with filter `{}` and {:?}; it cannot change to `{}` and {:?}: delete it or use another durable name",
                            spec.stream,
                            consumer.filter,
                            consumer.deliver_policy,
                            spec.filter_subject,
                            spec.deliver_policy
                        ),
                    ));
                }
                consumer.ack_wait = spec.ack_wait;
                consumer.max_ack_pending = max_ack_pending;
            }
            None => {
                let consumer = Consumer::new(stream, spec, max_ack_pending);
                stream.consumers.insert(name.clone(), consumer);
            }
        }
        if let Some(consumer) = stream.consumers.get_mut(&name) {
            consumer.durable = spec.durable.is_some();
            consumer.pulls.push(Pull {
                id,
                tx,
                batch: spec.batch.max(1),
                buffered: 0,
            });
        }
        self.activity += 1;
        let stream_name = spec.stream.clone();
        self.pump_stream(&stream_name);
        Ok((name, id))
    }

    pub(super) fn consumer_info(&self, stream: &str, consumer: &str) -> Option<ConsumerFacts> {
        let s = self.streams.get(stream)?;
        let c = s.consumers.get(consumer)?;
        Some(ConsumerFacts::new(
            c.dseq,
            c.next_seq.saturating_sub(1),
            c.pending.len(),
            c.pending.values().filter(|p| p.delivered > 1).count(),
            c.num_pending(&s.messages),
        ))
    }

    pub(super) fn consumer_names(&self, stream: &str) -> Vec<String> {
        self.streams
            .get(stream)
            .map_or_else(Vec::new, |s| s.consumers.keys().cloned().collect())
    }

    // ---- feeds ----------------------------------------------------------------------------

    /// A feed's reader took one message: it leaves the count of queued messages, and a pull
    /// has room for another.
    pub(super) fn taken(&mut self, key: &FeedKey) {
        self.activity += 1;
        match key {
            FeedKey::Subscription(id) => {
                if let Some(sub) = self.subscriptions.iter_mut().find(|s| s.id == *id) {
                    sub.queued = sub.queued.saturating_sub(1);
                }
            }
            FeedKey::Pull {
                stream,
                consumer,
                id,
            } => {
                if let Some(pull) = self
                    .streams
                    .get_mut(stream)
                    .and_then(|s| s.consumers.get_mut(consumer))
                    .and_then(|c| c.pulls.iter_mut().find(|p| p.id == *id))
                {
                    pull.buffered = pull.buffered.saturating_sub(1);
                }
                let stream = stream.clone();
                self.pump_stream(&stream);
            }
        }
    }

    /// Stops a feed: no new message goes to it (its sender is dropped, so its reader ends after
    /// the messages already queued).
    pub(super) fn stop(&mut self, key: &FeedKey) {
        self.activity += 1;
        match key {
            FeedKey::Subscription(id) => self.subscriptions.retain(|s| s.id != *id),
            FeedKey::Pull {
                stream,
                consumer,
                id,
            } => {
                if let Some(s) = self.streams.get_mut(stream) {
                    let now_unused = s.consumers.get_mut(consumer).is_some_and(|c| {
                        c.pulls.retain(|p| p.id != *id);
                        c.pulls.is_empty() && !c.durable
                    });
                    // An ephemeral consumer goes away with its last reader.
                    if now_unused {
                        s.consumers.remove(consumer);
                    }
                }
            }
        }
    }

    // ---- settlement and timers ------------------------------------------------------------

    fn acknowledge(&mut self, subject: &str, payload: &[u8], now: Instant) {
        let Some(ack) = AckSubject::parse(subject) else {
            return;
        };
        let Some(kind) = AckWire::parse(payload) else {
            return;
        };
        let stream_name = ack.stream.to_owned();
        let Some(consumer) = self
            .streams
            .get_mut(ack.stream)
            .and_then(|s| s.consumers.get_mut(ack.consumer))
        else {
            return;
        };
        let seq = ack.stream_seq;
        let Some(pending) = consumer.pending.get_mut(&seq) else {
            return;
        };
        match kind {
            AckWire::Ack | AckWire::Term => {
                consumer.pending.remove(&seq);
                consumer.redeliver.retain(|s| *s != seq);
            }
            AckWire::Nak(Some(delay)) => {
                pending.state = PendingState::Held { until: now + delay };
                consumer.redeliver.retain(|s| *s != seq);
            }
            AckWire::Nak(None) => {
                if pending.state != PendingState::Due {
                    pending.state = PendingState::Due;
                    consumer.redeliver.push_back(seq);
                }
            }
            AckWire::Progress => {
                if let PendingState::Out { .. } = pending.state {
                    pending.state = PendingState::Out {
                        deadline: now + consumer.ack_wait,
                    };
                }
            }
        }
        self.pump_stream(&stream_name);
    }

    /// Moves every delivery whose ack_wait ran out, or whose `-NAK` delay is over, to the
    /// redelivery queue, and delivers what can be delivered.
    pub(super) fn fire_timers(&mut self, now: Instant) {
        let mut fired = 0;
        for stream in self.streams.values_mut() {
            for consumer in stream.consumers.values_mut() {
                for (seq, pending) in &mut consumer.pending {
                    let due = match pending.state {
                        PendingState::Out { deadline } => deadline <= now,
                        PendingState::Held { until } => until <= now,
                        PendingState::Due => false,
                    };
                    if due {
                        pending.state = PendingState::Due;
                        consumer.redeliver.push_back(*seq);
                        fired += 1;
                    }
                }
            }
        }
        if fired > 0 {
            self.activity += 1;
            let names: Vec<String> = self.streams.keys().cloned().collect();
            for name in names {
                self.pump_stream(&name);
            }
        }
    }

    /// The earliest deadline of any delivery (ack_wait or a `-NAK` delay).
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.streams
            .values()
            .flat_map(|s| s.consumers.values())
            .flat_map(|c| c.pending.values())
            .filter_map(|p| match p.state {
                PendingState::Out { deadline } => Some(deadline),
                PendingState::Held { until } => Some(until),
                PendingState::Due => None,
            })
            .min()
    }

    /// Messages handed to a reader and not yet taken by it, plus deliveries handed out and not
    /// yet settled.
    pub(super) fn in_flight(&self) -> usize {
        let core: usize = self.subscriptions.iter().map(|s| s.queued).sum();
        let out = self
            .streams
            .values()
            .flat_map(|s| s.consumers.values())
            .flat_map(|c| c.pending.values())
            .filter(|p| matches!(p.state, PendingState::Out { .. }))
            .count();
        core + out
    }

    pub(super) fn activity(&self) -> u64 {
        self.activity
    }

    pub(super) fn published(&self, pattern: &str) -> Vec<RawMessage> {
        self.history
            .iter()
            .filter(|m| matches(pattern, &m.subject))
            .cloned()
            .collect()
    }

    // ---- delivery -------------------------------------------------------------------------

    /// Delivers what every consumer of stream `name` can deliver now.
    fn pump_stream(&mut self, name: &str) {
        let now = Instant::now();
        let Some(stream) = self.streams.get_mut(name) else {
            return;
        };
        let mut delivered = 0;
        for (consumer_name, consumer) in &mut stream.consumers {
            delivered += consumer.pump(name, consumer_name, &stream.messages, now);
        }
        self.activity += delivered;
    }
}

impl Consumer {
    fn new(stream: &Stream, spec: &ConsumerSpec, max_ack_pending: usize) -> Self {
        let filter = spec.filter_subject.clone();
        let matching = |seq: &&u64| {
            stream
                .messages
                .get(seq)
                .is_some_and(|m| matches(&filter, &m.subject))
        };
        let mut skip = VecDeque::new();
        let next_seq = match spec.deliver_policy {
            DeliverPolicy::New => stream.last_seq + 1,
            DeliverPolicy::Last => stream
                .messages
                .keys()
                .rev()
                .find(matching)
                .copied()
                .unwrap_or(stream.last_seq + 1),
            DeliverPolicy::LastPerSubject => {
                let mut last: BTreeMap<&str, u64> = BTreeMap::new();
                for (seq, m) in &stream.messages {
                    if matches(&filter, &m.subject) {
                        last.insert(&m.subject, *seq);
                    }
                }
                let mut seqs: Vec<u64> = last.into_values().collect();
                seqs.sort_unstable();
                skip.extend(seqs);
                stream.last_seq + 1
            }
            DeliverPolicy::ByStartSequence(seq) => seq.max(1),
            _ => 1,
        };
        Self {
            durable: spec.durable.is_some(),
            filter,
            ack_wait: spec.ack_wait,
            max_ack_pending,
            deliver_policy: spec.deliver_policy,
            next_seq,
            skip,
            dseq: 0,
            pending: BTreeMap::new(),
            redeliver: VecDeque::new(),
            pulls: Vec::new(),
            pull_cursor: 0,
        }
    }

    /// Messages matching the filter that the consumer has not delivered yet.
    fn num_pending(&self, messages: &BTreeMap<u64, Stored>) -> u64 {
        let ahead = messages
            .range(self.next_seq..)
            .filter(|(_, m)| matches(&self.filter, &m.subject))
            .count();
        (ahead + self.skip.len()) as u64
    }

    /// The next message to deliver and how many times it will have been delivered: a
    /// redelivery first, then (below max_ack_pending) the next new message.
    fn next_message(&mut self, messages: &BTreeMap<u64, Stored>) -> Option<(u64, u64)> {
        while let Some(seq) = self.redeliver.pop_front() {
            if let Some(p) = self.pending.get(&seq) {
                return Some((seq, p.delivered + 1));
            }
        }
        if self.pending.len() >= self.max_ack_pending {
            return None;
        }
        if let Some(seq) = self.skip.pop_front() {
            return Some((seq, 1));
        }
        let (seq, _) = messages
            .range(self.next_seq..)
            .find(|(_, m)| matches(&self.filter, &m.subject))?;
        let seq = *seq;
        self.next_seq = seq + 1;
        Some((seq, 1))
    }

    /// Delivers to the pulls with room until nothing more can go; returns how many went.
    fn pump(
        &mut self,
        stream: &str,
        name: &str,
        messages: &BTreeMap<u64, Stored>,
        now: Instant,
    ) -> u64 {
        let mut sent = 0;
        loop {
            self.pulls.retain(|p| !p.tx.is_closed());
            let n = self.pulls.len();
            let Some(slot) = (0..n)
                .map(|i| (self.pull_cursor + i) % n.max(1))
                .find(|&i| self.pulls[i].buffered < self.pulls[i].batch)
            else {
                return sent;
            };
            let Some((seq, delivered)) = self.next_message(messages) else {
                return sent;
            };
            let Some(stored) = messages.get(&seq) else {
                // Gone from the stream: nothing to deliver again.
                self.pending.remove(&seq);
                continue;
            };
            self.dseq += 1;
            self.pending.insert(
                seq,
                Pending {
                    delivered,
                    state: PendingState::Out {
                        deadline: now + self.ack_wait,
                    },
                },
            );
            let reply = format!(
                "{ACK_PREFIX}{stream}.{name}.{delivered}.{seq}.{}.{}.{}",
                self.dseq,
                stored.timestamp_ns,
                self.num_pending(messages),
            );
            let message = RawMessage {
                subject: Arc::clone(&stored.subject),
                reply: Some(Arc::from(reply)),
                headers: stored.headers.clone(),
                payload: stored.payload.clone(),
            };
            let pull = &mut self.pulls[slot];
            if pull.tx.send(message).is_ok() {
                pull.buffered += 1;
            }
            self.pull_cursor = (slot + 1) % n;
            sent += 1;
        }
    }
}
