//! The interpreter: runs a case on a [`Server`] and writes down, a line per fact, what a client
//! could observe: each operation's answer (PubAcks, deliveries with their counts, settlement
//! and key-value answers, errors by kind), then the stream's and each consumer's info.
//!
//! Time: the in-process NATS runs on a paused clock, the real server on the real one, which
//! also counts the time the operations take. The interpreter never lets an operation race a
//! timer, so that both servers see each timer run out between the same two operations:
//!
//! - it keeps its own clock, the time the case waited on purpose (a fetch's expiry, the waits
//!   below), the same on both servers, and decides on it alone;
//! - before an operation that comes within [`GUARD`] of an ack_wait the case started (a fetch
//!   that delivered, a `+WPI`), it waits until that ack_wait ran out, plus [`MARGIN`];
//! - before a fetch it waits until every `-NAK` delay it asked for is over, plus [`MARGIN`];
//! - "wait past ack_wait" waits until every ack_wait it started ran out, plus [`MARGIN`].
//!
//! A delivery due again is not observable before the next pull (`consumer info` shows it only
//! once it is redelivered), so these waits are on the deadlines the case itself set.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ruststream::Headers;

use super::server::{Delivery, Server, spec};
use super::{ACK_WAIT, Case, Expect, FETCH_EXPIRES, How, MARGIN, Op, consumer_name};
use crate::support::fidelity::Reply;

/// Names of one case: its stream `DIFF<n>` storing `diff<n>.a` and `diff<n>.b`, its bucket
/// `diff<n>`. The same `n` on both servers, so that the logs compare as they are.
pub struct Names {
    pub stream: String,
    pub prefix: String,
    pub bucket: String,
}

impl Names {
    pub fn new(n: u64) -> Self {
        Self {
            stream: format!("DIFF{n}"),
            prefix: format!("diff{n}"),
            bucket: format!("diff{n}"),
        }
    }

    fn filter(&self, consumer: u8) -> String {
        if consumer == 0 {
            format!("{}.>", self.prefix)
        } else {
            format!("{}.a", self.prefix)
        }
    }
}

const KEYS: u8 = 3;

/// How close to an ack_wait running out no operation starts: longer than a fetch's expiry
/// plus what the operations of a case take on the real clock.
pub const GUARD: Duration = Duration::from_millis(500);

struct Interpreter<'a> {
    server: &'a Server,
    names: Names,
    log: Vec<String>,
    /// Deliveries each consumer's fetches handed over and nothing settled for good yet.
    hands: [Vec<Delivery>; 2],
    /// The last revision each key was seen at.
    revisions: BTreeMap<u8, u64>,
    /// The time the case waited on purpose, the same on both servers.
    clock: Duration,
    /// When each ack_wait the case started runs out, at the earliest and at the latest (a
    /// fetch delivers somewhere within its expiry), on [`Interpreter::clock`].
    deadlines: Vec<(Duration, Duration)>,
    /// When each `-NAK` delay ends, on [`Interpreter::clock`].
    delays: Vec<Duration>,
}

/// Runs `case` on `server` under `names`; the observations, a line each.
pub async fn run(server: &Server, names: Names, case: &Case) -> Vec<String> {
    let mut it = Interpreter {
        server,
        names,
        log: Vec::new(),
        hands: [Vec::new(), Vec::new()],
        revisions: BTreeMap::new(),
        clock: Duration::ZERO,
        deadlines: Vec::new(),
        delays: Vec::new(),
    };
    it.setup().await;
    for (i, op) in case.0.iter().enumerate() {
        it.log.push(format!("{i:>2}. {op}"));
        if matches!(op, Op::Fetch { .. })
            && let Some(end) = it.delays.drain(..).max()
        {
            it.pass(end + MARGIN).await;
        }
        it.clear_of_deadlines().await;
        it.step(i, op).await;
        it.snapshot().await;
    }
    it.log
}

impl Interpreter<'_> {
    fn note(&mut self, line: String) {
        self.log.push(format!("    {line}"));
    }

    /// Waits until the interpreter's clock reads `to`.
    async fn pass(&mut self, to: Duration) {
        if to > self.clock {
            tokio::time::sleep(to - self.clock).await;
            self.clock = to;
        }
    }

    /// Waits past every ack_wait that would run out within [`GUARD`] from now.
    async fn clear_of_deadlines(&mut self) {
        loop {
            let clock = self.clock;
            let near = self
                .deadlines
                .iter()
                .filter(|(earliest, _)| clock + GUARD >= *earliest)
                .map(|(_, latest)| *latest + MARGIN)
                .max();
            let Some(to) = near else {
                return;
            };
            self.pass(to).await;
            let clock = self.clock;
            self.deadlines
                .retain(|(_, latest)| *latest + MARGIN > clock);
        }
    }

    async fn setup(&mut self) {
        let wire = self.server.wire();
        wire.declare_stream(ruststream_nats::transport::StreamSpec {
            name: self.names.stream.clone(),
            subjects: vec![
                format!("{}.a", self.names.prefix),
                format!("{}.b", self.names.prefix),
            ],
        })
        .await
        .expect("declare the case's stream");
        wire.kv_bucket(
            self.names.bucket.clone(),
            std::time::Duration::from_secs(3600),
        )
        .await
        .expect("declare the case's bucket");
        for c in 0..2 {
            self.create(c).await;
        }
    }

    async fn create(&mut self, c: u8) {
        let spec = spec(&self.names.stream, consumer_name(c), &self.names.filter(c));
        let created = self.server.create_consumer(&spec).await;
        self.note(format!("-> {}", outcome(&created)));
    }

    async fn step(&mut self, i: usize, op: &Op) {
        match *op {
            Op::Publish {
                subject,
                id,
                expect,
            } => self.publish(i, subject.token(), id, expect).await,
            Op::Fetch { consumer, batch } => self.fetch(consumer, batch).await,
            Op::Settle {
                consumer,
                pick,
                how,
            } => self.settle(consumer, pick, how).await,
            Op::WaitAckWait => {
                if let Some(latest) = self.deadlines.drain(..).map(|(_, l)| l).max() {
                    self.pass(latest + MARGIN).await;
                }
            }
            Op::CreateConsumer { consumer } => self.create(consumer).await,
            Op::DeleteConsumer { consumer } => {
                let existed = self
                    .server
                    .delete_consumer(&self.names.stream, consumer_name(consumer))
                    .await;
                // Its deliveries cannot be settled any more: nobody answers their subjects.
                self.hands[usize::from(consumer)].clear();
                self.note(format!("-> existed: {existed}"));
            }
            Op::KvCreate { key, value } => {
                let created = self
                    .server
                    .wire()
                    .kv_create(
                        self.names.bucket.clone(),
                        format!("k{key}"),
                        value_of(value),
                    )
                    .await;
                self.kv_answer(key, created.map_err(|e| format!("{:?}", e.kind)))
                    .await;
            }
            Op::KvUpdate { key, value, offset } => {
                let last = self.revisions.get(&key).copied().unwrap_or(0);
                let revision = last.saturating_add_signed(i64::from(offset));
                let updated = self
                    .server
                    .wire()
                    .kv_update(
                        self.names.bucket.clone(),
                        format!("k{key}"),
                        value_of(value),
                        revision,
                    )
                    .await;
                self.note(format!("(expected revision {revision})"));
                self.kv_answer(key, updated.map_err(|e| format!("{:?}", e.kind)))
                    .await;
            }
            Op::KvDelete { key } => {
                let deleted = self
                    .server
                    .wire()
                    .kv_delete(self.names.bucket.clone(), format!("k{key}"))
                    .await;
                self.note(format!(
                    "-> {}",
                    outcome(&deleted.map_err(|e| format!("{:?}", e.kind)))
                ));
                self.kv_values().await;
            }
        }
    }

    async fn publish(&mut self, i: usize, token: &str, id: Option<u8>, expect: Expect) {
        let mut headers = Headers::new();
        if let Some(id) = id {
            headers.insert("Nats-Msg-Id", format!("m{id}"));
        }
        match expect {
            Expect::Nothing => {}
            Expect::Stream { right } => {
                let name = if right {
                    self.names.stream.clone()
                } else {
                    "ELSEWHERE".to_owned()
                };
                headers.insert("Nats-Expected-Stream", name);
            }
            Expect::LastSeq(n) => headers.insert("Nats-Expected-Last-Sequence", n.to_string()),
            Expect::LastMsgId(id) => headers.insert(
                "Nats-Expected-Last-Msg-Id",
                id.map(|id| format!("m{id}")).unwrap_or_default(),
            ),
        }
        let subject = format!("{}.{token}", self.names.prefix);
        let answer = self
            .server
            .wire()
            .publish_confirmed(Arc::from(subject), headers, format!("p{i}").into())
            .await;
        let line = match answer {
            Ok(ack) => format!(
                "-> stored in {} at {}{}",
                ack.stream,
                ack.sequence,
                if ack.duplicate { " (duplicate)" } else { "" }
            ),
            Err(e) => match e.refusal() {
                Some(why) => format!("-> refused: {why:?}"),
                None => format!("-> error {:?}", e.kind),
            },
        };
        self.note(line);
    }

    async fn fetch(&mut self, c: u8, batch: u8) {
        let start = self.clock;
        let got = self
            .server
            .fetch(&self.names.stream, consumer_name(c), usize::from(batch))
            .await;
        let Some(got) = got else {
            self.note("-> no such consumer".to_owned());
            return;
        };
        if got.len() < usize::from(batch) {
            // The request waited out its expiry on both servers.
            self.clock += FETCH_EXPIRES;
        }
        if !got.is_empty() {
            self.deadlines
                .push((start + ACK_WAIT, self.clock + ACK_WAIT));
        }
        for d in &got {
            let r = Reply::of_subject(&d.reply);
            self.note(format!(
                "-> {} {} delivered={} stream_seq={} consumer_seq={} pending={}",
                d.subject, d.payload, r.delivered, r.stream_seq, r.consumer_seq, r.pending
            ));
        }
        if got.is_empty() {
            self.note("-> nothing".to_owned());
        }
        self.hands[usize::from(c)].extend(got);
    }

    async fn settle(&mut self, c: u8, pick: u8, how: How) {
        let hand = &mut self.hands[usize::from(c)];
        if hand.is_empty() {
            self.note("(nothing in hand)".to_owned());
            return;
        }
        let at = usize::from(pick) % hand.len();
        let delivery = if how == How::Wpi {
            hand[at].clone()
        } else {
            hand.remove(at)
        };
        let now = self.clock;
        match how {
            How::Wpi => self.deadlines.push((now + ACK_WAIT, now + ACK_WAIT)),
            How::NakDelay(ms) => self.delays.push(now + Duration::from_millis(ms)),
            _ => {}
        }
        let r = Reply::of_subject(&delivery.reply);
        let settled = self.server.settle(&delivery.reply, how.wire()).await;
        self.note(format!(
            "(on {} delivered={}) -> {}",
            delivery.payload,
            r.delivered,
            outcome(&settled)
        ));
    }

    async fn kv_answer(&mut self, key: u8, answer: Result<Option<u64>, String>) {
        let line = match answer {
            Ok(Some(revision)) => {
                self.revisions.insert(key, revision);
                format!("-> written at revision {revision}")
            }
            Ok(None) => "-> not written".to_owned(),
            Err(kind) => format!("-> error {kind}"),
        };
        self.note(line);
        self.kv_values().await;
    }

    async fn kv_values(&mut self) {
        for key in 0..KEYS {
            let got = self
                .server
                .wire()
                .kv_get(self.names.bucket.clone(), format!("k{key}"))
                .await;
            let line = match got {
                Ok(Some(entry)) => {
                    self.revisions.insert(key, entry.revision);
                    format!(
                        "k{key} = {} at revision {}",
                        String::from_utf8_lossy(&entry.value),
                        entry.revision
                    )
                }
                Ok(None) => format!("k{key} holds nothing"),
                Err(e) => format!("k{key}: error {:?}", e.kind),
            };
            self.note(line);
        }
    }

    async fn snapshot(&mut self) {
        let s = self.server.stream(&self.names.stream).await;
        self.note(format!(
            "stream: messages={} first={} last={}",
            s.messages, s.first, s.last
        ));
        for c in 0..2 {
            let name = consumer_name(c);
            let line = match self.server.consumer(&self.names.stream, name).await {
                Some(info) => format!(
                    "{name}: delivered=({}, {}) ack_pending={} redelivered={} pending={} ack_floor=({}, {})",
                    info.facts.delivered,
                    info.facts.delivered_stream,
                    info.facts.ack_pending,
                    info.facts.redelivered,
                    info.facts.pending,
                    info.ack_floor.0,
                    info.ack_floor.1
                ),
                None => format!("{name}: none"),
            };
            self.note(line);
        }
    }
}

fn value_of(value: u8) -> bytes::Bytes {
    format!("v{value}").into()
}

fn outcome(result: &Result<(), String>) -> String {
    match result {
        Ok(()) => "ok".to_owned(),
        Err(e) => format!("error {e}"),
    }
}
