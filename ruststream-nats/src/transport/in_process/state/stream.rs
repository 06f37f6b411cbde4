//! Streams in the emulated server: declaring them, storing what their subjects match (with
//! deduplication, limits and `Nats-Expected-*` checks), and a JetStream publish's answer.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use ruststream::Headers;
use tokio::time::Instant;

use super::consumer::Consumer;
use super::{State, Stored};
use crate::subject::{matches, overlaps};
use crate::transport::MSG_ID_HEADER as MSG_ID;
use crate::transport::in_process::facts::{StoredMessage, StreamLimits};
use crate::transport::{
    RawMessage, Refusal, StoredAck, StreamChanges, StreamDeclaration, StreamSpec, TransportError,
    TransportErrorKind, add_subjects,
};

#[derive(Debug)]
pub(super) struct Stream {
    pub(super) subjects: Vec<String>,
    pub(super) messages: BTreeMap<u64, Stored>,
    pub(super) last_seq: u64,
    pub(super) consumers: BTreeMap<String, Consumer>,
    pub(super) limits: StreamLimits,
    /// The `Nats-Msg-Id`s seen within the duplicate window: sequence, when.
    pub(super) ids: HashMap<String, (u64, Instant)>,
    /// The `Nats-Msg-Id` of the last message stored, if it had one.
    pub(super) last_msg_id: Option<String>,
}

/// What a stream did with a message published to a subject it stores.
#[derive(Debug)]
pub(in crate::transport::in_process) enum Storing {
    Stored(String, u64),
    /// Dropped: the stream stored a message with the same id within its duplicate window.
    Duplicate(String, u64),
    /// Refused by the stream named, for the reason given (and the server's words for it).
    Refused(String, Refusal, String),
    /// No stream stores the subject.
    Nowhere,
}

impl Stream {
    /// The failed `Nats-Expected-Stream` or `Nats-Expected-Last-Sequence` check of `message`,
    /// in the server's words: the current server makes both before it looks for a duplicate
    /// (nats-server 2.9 the second after; docs/testing.md, "The differential test").
    fn failed_before_dedupe(&self, name: &str, message: &RawMessage) -> Option<String> {
        let headers = &message.headers;
        // An empty expectation expects nothing, as on the server.
        if let Some(expected) = headers.get("Nats-Expected-Stream")
            && !expected.is_empty()
            && expected != name
        {
            return Some("expected stream does not match".to_owned());
        }
        if let Some(expected) = headers.get("Nats-Expected-Last-Sequence")
            && expected.trim().parse::<u64>().ok() != Some(self.last_seq)
        {
            return Some(format!("wrong last sequence: {}", self.last_seq));
        }
        None
    }

    /// The failed `Nats-Expected-Last-Subject-Sequence` or `Nats-Expected-Last-Msg-Id` check of
    /// `message`, in the server's words: made after the duplicate check.
    fn expectation_failed(&self, message: &RawMessage) -> Option<String> {
        let headers = &message.headers;
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
            && !expected.is_empty()
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

impl Stream {
    /// Removes what `max_age` and `max_bytes` no longer keep, the oldest first, before
    /// `message` is stored at `now_ns`.
    fn expire(&mut self, now_ns: u128, message: &RawMessage) {
        if let Some(max_age) = self.limits.max_age {
            let oldest = now_ns.saturating_sub(max_age.as_nanos());
            self.messages.retain(|_, m| m.timestamp_ns > oldest);
        }
        if let Some(max_bytes) = self.limits.max_bytes {
            let size = |subject: &str, payload: &[u8]| {
                u64::try_from(subject.len() + payload.len()).unwrap_or(u64::MAX)
            };
            let mut total: u64 = self
                .messages
                .values()
                .map(|m| size(&m.subject, &m.payload))
                .sum();
            total = total.saturating_add(size(&message.subject, &message.payload));
            while total > max_bytes {
                let Some((_, oldest)) = self.messages.pop_first() else {
                    break;
                };
                total = total.saturating_sub(size(&oldest.subject, &oldest.payload));
            }
        }
    }
}

impl State {
    /// Publishes to a stream, as a JetStream publish does: stored and routed like any publish
    /// when a stream stores the subject. Without one, the server has no responder: `NoStream`
    /// when no one is subscribed (and nothing happened), else the subscribers got it and no
    /// stream acknowledged it (a real client times out waiting).
    pub(in crate::transport::in_process) fn publish_stored(
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
    pub(in crate::transport::in_process) fn publish_confirmed(
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
            jetstream: None,
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
                Storing::Refused(stream, refusal, why) => {
                    return Err(TransportError::refused(
                        refusal,
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

    /// The stream whose subjects match `subject` (or overlap it, for a pattern).
    pub(in crate::transport::in_process) fn stream_storing(&self, subject: &str) -> Option<String> {
        self.streams
            .iter()
            .find(|(_, s)| s.subjects.iter().any(|p| overlaps(p, subject)))
            .map(|(name, _)| name.clone())
    }

    pub(super) fn store(&mut self, message: &RawMessage, now: Instant) -> Storing {
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
        if let Some(why) = stream.failed_before_dedupe(&name, message) {
            return Storing::Refused(name, Refusal::Expectation, why);
        }
        let msg_id = message.headers.get(MSG_ID).map(str::to_owned);
        if let Some(id) = &msg_id
            && let Some((seq, _)) = stream.ids.get(id)
        {
            return Storing::Duplicate(name, *seq);
        }
        if let Some(why) = stream.expectation_failed(message) {
            return Storing::Refused(name, Refusal::Expectation, why);
        }
        stream.expire(timestamp_ns, message);
        if let Some(max) = stream.limits.max_msgs
            && u64::try_from(stream.messages.len()).unwrap_or(u64::MAX) >= max
        {
            if stream.limits.discard_new {
                return Storing::Refused(
                    name,
                    Refusal::StreamFull,
                    "maximum messages exceeded".to_owned(),
                );
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
    pub(in crate::transport::in_process) fn set_limits(
        &mut self,
        name: &str,
        limits: StreamLimits,
    ) -> bool {
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
    pub(in crate::transport::in_process) fn streams(&self) -> Vec<StreamSpec> {
        self.streams
            .iter()
            .map(|(name, s)| StreamSpec {
                name: name.clone(),
                subjects: s.subjects.clone(),
            })
            .collect()
    }

    /// Creates the declared stream with its limits, or adds the subjects it lacks to the
    /// existing one and raises its limits below the declared ones; returns what changed.
    pub(in crate::transport::in_process) fn declare_stream(
        &mut self,
        spec: StreamDeclaration,
    ) -> Result<StreamChanges, TransportError> {
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
        let name = spec.name.clone();
        let mut changes = StreamChanges::default();
        let declared = spec.limits();
        let action = match self.streams.get_mut(&spec.name) {
            Some(stream) => {
                changes.added_subjects = add_subjects(&mut stream.subjects, &spec.subjects);
                let mut limits = stream.limits.limits();
                limits.raise_to(&declared, &mut changes);
                stream.limits.set(&limits);
                changes.changed().then_some("UPDATED")
            }
            None => {
                let mut limits = StreamLimits::default();
                limits.set(&declared);
                self.streams.insert(
                    spec.name,
                    Stream {
                        subjects: spec.subjects,
                        messages: BTreeMap::new(),
                        last_seq: 0,
                        consumers: BTreeMap::new(),
                        limits,
                        ids: HashMap::new(),
                        last_msg_id: None,
                    },
                );
                Some("CREATED")
            }
        };
        if let Some(action) = action {
            self.advise(&name, action);
        }
        Ok(changes)
    }

    /// Announces a change to stream `name` as a server does: a Core message on
    /// `$JS.EVENT.ADVISORY.STREAM.<action>.<name>` (its JSON body reduced to the type, the
    /// stream and the action).
    fn advise(&mut self, name: &str, action: &str) {
        let body = serde_json::json!({
            "type": "io.nats.jetstream.advisory.v1.stream_action",
            "stream": name,
            "action": action.to_lowercase(),
        });
        let advisory = RawMessage {
            subject: Arc::from(format!("$JS.EVENT.ADVISORY.STREAM.{action}.{name}")),
            reply: None,
            headers: Headers::new(),
            payload: Bytes::from(body.to_string()),
            jetstream: None,
        };
        self.route(&advisory);
    }

    pub(in crate::transport::in_process) fn stream_exists(&self, name: &str) -> bool {
        self.streams.contains_key(name)
    }

    pub(in crate::transport::in_process) fn stream_names(&self) -> Vec<String> {
        self.streams.keys().cloned().collect()
    }

    pub(in crate::transport::in_process) fn stream_limits(
        &self,
        name: &str,
    ) -> Option<StreamLimits> {
        self.streams.get(name).map(|s| s.limits)
    }

    pub(in crate::transport::in_process) fn stream_subjects(
        &self,
        name: &str,
    ) -> Option<Vec<String>> {
        self.streams.get(name).map(|s| s.subjects.clone())
    }

    pub(in crate::transport::in_process) fn stream_messages(
        &self,
        name: &str,
    ) -> Vec<StoredMessage> {
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
}
