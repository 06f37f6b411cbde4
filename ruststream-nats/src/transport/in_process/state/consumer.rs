//! Pull consumers in the emulated server: creating them (deliver policy, filter subject,
//! limits), their counters, and delivering to their pulls (a redelivery first, then new
//! messages in stream order, below max_ack_pending).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::UnboundedSender;
use tokio::time::Instant;

use super::{State, Stored};
use crate::jetstream_info::ack_subject;
use crate::subject::{matches, overlaps};
use crate::transport::DeliverPolicy;
use crate::transport::in_process::facts::ConsumerFacts;
use crate::transport::{ConsumerSpec, RawMessage, TransportError, TransportErrorKind};

/// How many deliveries may wait for a settlement when the consumer sets no limit (the server's
/// default).
const DEFAULT_MAX_ACK_PENDING: usize = 1000;

#[derive(Debug)]
pub(super) struct Consumer {
    pub(super) durable: bool,
    pub(super) filter: String,
    pub(super) ack_wait: Duration,
    pub(super) max_ack_pending: usize,
    pub(super) deliver_policy: DeliverPolicy,
    /// The next stream sequence to look at for a first delivery.
    pub(super) next_seq: u64,
    /// Stream sequences to deliver before `next_seq` (the last message of each subject, for
    /// `LastPerSubject`).
    pub(super) skip: VecDeque<u64>,
    /// The consumer sequence of the last delivery.
    pub(super) dseq: u64,
    /// Delivered and not acknowledged or terminated, by stream sequence.
    pub(super) pending: BTreeMap<u64, Pending>,
    /// Stream sequences due for a redelivery, in the order they became due.
    pub(super) redeliver: VecDeque<u64>,
    pub(super) pulls: Vec<Pull>,
    pub(super) pull_cursor: usize,
    /// The last (consumer sequence, stream sequence) below which everything is settled, as the
    /// server moves it.
    pub(super) ack_floor: (u64, u64),
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Pending {
    /// How many times the message was delivered.
    pub(super) delivered: u64,
    /// The consumer sequence of its first delivery (the ack floor counts by it).
    pub(super) first_dseq: u64,
    pub(super) state: PendingState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PendingState {
    /// Handed out; redelivered if no settlement comes by the deadline (ack_wait).
    Out { deadline: Instant },
    /// A `-NAK` with a delay: held until then.
    Held { until: Instant },
    /// Waiting on the redelivery queue for a pull.
    Due,
}

#[derive(Debug)]
pub(super) struct Pull {
    pub(super) id: u64,
    pub(super) tx: UnboundedSender<RawMessage>,
    pub(super) batch: usize,
    /// Messages sent to the feed that its reader has not taken yet.
    pub(super) buffered: usize,
}

impl State {
    /// Gets or creates the consumer of `spec` and adds a pull to it; returns the consumer's
    /// name and the pull's id.
    pub(in crate::transport::in_process) fn consume(
        &mut self,
        spec: &ConsumerSpec,
        tx: UnboundedSender<RawMessage>,
    ) -> Result<(String, u64), TransportError> {
        let name = self.open_consumer(spec)?;
        let id = self
            .add_pull(&spec.stream, &name, tx, spec.batch)
            .unwrap_or_default();
        Ok((name, id))
    }

    /// Gets, creates or updates (ack_wait, max_ack_pending) the consumer of `spec`, without
    /// a pull; returns its name. A durable whose filter or deliver policy differs is refused.
    pub(in crate::transport::in_process) fn open_consumer(
        &mut self,
        spec: &ConsumerSpec,
    ) -> Result<String, TransportError> {
        let name = match &spec.durable {
            Some(name) => name.clone(),
            None => {
                let n = self.id();
                format!("EPHEMERAL{n:06}")
            }
        };
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
                let consumer =
                    Consumer::new(&stream.messages, stream.last_seq, spec, max_ack_pending);
                stream.consumers.insert(name.clone(), consumer);
            }
        }
        if let Some(consumer) = stream.consumers.get_mut(&name) {
            consumer.durable = spec.durable.is_some();
        }
        self.activity += 1;
        Ok(name)
    }

    /// Adds a pull of up to `batch` messages at a time to consumer `name` of `stream` and
    /// delivers what it can take; the pull's id, or `None` without such a consumer.
    pub(in crate::transport::in_process) fn add_pull(
        &mut self,
        stream: &str,
        name: &str,
        tx: UnboundedSender<RawMessage>,
        batch: usize,
    ) -> Option<u64> {
        let id = self.id();
        let consumer = self.streams.get_mut(stream)?.consumers.get_mut(name)?;
        consumer.pulls.push(Pull {
            id,
            tx,
            batch: batch.max(1),
            buffered: 0,
        });
        self.activity += 1;
        self.pump_stream(stream);
        Some(id)
    }

    /// Deletes consumer `name` of `stream` (its pulls end); false without one.
    pub(in crate::transport::in_process) fn delete_consumer(
        &mut self,
        stream: &str,
        name: &str,
    ) -> bool {
        self.activity += 1;
        self.streams
            .get_mut(stream)
            .and_then(|s| s.consumers.remove(name))
            .is_some()
    }

    /// The ack floor of consumer `name` of `stream`: (consumer sequence, stream sequence).
    pub(in crate::transport::in_process) fn ack_floor(
        &self,
        stream: &str,
        name: &str,
    ) -> Option<(u64, u64)> {
        let c = self.streams.get(stream)?.consumers.get(name)?;
        Some(c.ack_floor)
    }

    pub(in crate::transport::in_process) fn consumer_info(
        &self,
        stream: &str,
        consumer: &str,
    ) -> Option<ConsumerFacts> {
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

    pub(in crate::transport::in_process) fn consumer_names(&self, stream: &str) -> Vec<String> {
        self.streams
            .get(stream)
            .map_or_else(Vec::new, |s| s.consumers.keys().cloned().collect())
    }

    /// Delivers what every consumer of stream `name` can deliver now.
    pub(super) fn pump_stream(&mut self, name: &str) {
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
    pub(super) fn new(
        messages: &BTreeMap<u64, Stored>,
        last_seq: u64,
        spec: &ConsumerSpec,
        max_ack_pending: usize,
    ) -> Self {
        let filter = spec.filter_subject.clone();
        let matching = |seq: &&u64| {
            messages
                .get(seq)
                .is_some_and(|m| matches(&filter, &m.subject))
        };
        let mut skip = VecDeque::new();
        let next_seq = match spec.deliver_policy {
            DeliverPolicy::New => last_seq + 1,
            DeliverPolicy::Last => messages
                .keys()
                .rev()
                .find(matching)
                .copied()
                .unwrap_or(last_seq + 1),
            DeliverPolicy::LastPerSubject => {
                let mut last: BTreeMap<&str, u64> = BTreeMap::new();
                for (seq, m) in messages {
                    if matches(&filter, &m.subject) {
                        last.insert(&m.subject, *seq);
                    }
                }
                let mut seqs: Vec<u64> = last.into_values().collect();
                seqs.sort_unstable();
                skip.extend(seqs);
                last_seq + 1
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
            ack_floor: (0, next_seq.saturating_sub(1)),
        }
    }

    /// Moves the ack floor past stream sequence `sseq`, first delivered as consumer sequence
    /// `dseq`, just settled for good (`+ACK`, `+TERM`): to the last delivery when nothing else
    /// waits, else over `sseq` when it was the next above the floor, up to the next waiting one.
    pub(super) fn settled(&mut self, sseq: u64, dseq: u64) {
        if self.pending.is_empty() {
            self.ack_floor = (self.dseq, self.next_seq.saturating_sub(1));
        } else if dseq == self.ack_floor.0 + 1 {
            self.ack_floor = (dseq, sseq);
            if let Some((next, p)) = self.pending.range(sseq + 1..self.next_seq).next() {
                self.ack_floor = (p.first_dseq.saturating_sub(1), next - 1);
            }
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
            let first_dseq = self.pending.get(&seq).map_or(self.dseq, |p| p.first_dseq);
            self.pending.insert(
                seq,
                Pending {
                    delivered,
                    first_dseq,
                    state: PendingState::Out {
                        deadline: now + self.ack_wait,
                    },
                },
            );
            let reply = ack_subject(
                stream,
                name,
                delivered,
                seq,
                self.dseq,
                stored.timestamp_ns,
                self.num_pending(messages),
            );
            let message = RawMessage {
                subject: Arc::clone(&stored.subject),
                // What a pull of the real server reads from the subject, read here the same way.
                jetstream: crate::JetStreamInfo::parse(&reply),
                reply: Some(reply.into()),
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
