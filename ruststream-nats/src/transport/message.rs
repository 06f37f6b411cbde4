//! A message as the wire hands it over, and its reply subject.

use std::sync::Arc;

use bytes::Bytes;
use ruststream::Headers;

/// A message as the wire handed it over.
#[derive(Debug, Clone)]
pub struct RawMessage {
    /// The subject it was published to.
    pub subject: Arc<str>,
    /// The reply subject: the publisher's inbox on Core, the ack subject on JetStream.
    pub reply: Option<ReplySubject>,
    /// Its headers.
    pub headers: Headers,
    /// Its payload.
    pub payload: Bytes,
    /// What the transport already read from a JetStream delivery's acknowledgement subject
    /// (`reply`), so that the runtime does not read it a second time; `None` on Core, or when
    /// the transport did not read it (the runtime then reads `reply` itself).
    pub jetstream: Option<crate::JetStreamInfo>,
}

/// A message's reply subject as the transport handed it over: a shared string, or the
/// subject as async-nats received it. A JetStream delivery's is where its acknowledgement goes
/// ([`PullConsumer::acknowledge`](super::PullConsumer::acknowledge)): kept in the client's
/// form, it goes back to the client without a copy.
#[derive(Debug, Clone)]
pub struct ReplySubject(ReplyForm);

#[derive(Debug, Clone)]
enum ReplyForm {
    Shared(Arc<str>),
    Client(async_nats::Subject),
}

impl ReplySubject {
    /// The subject.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            ReplyForm::Shared(subject) => subject,
            ReplyForm::Client(subject) => subject.as_str(),
        }
    }

    /// The subject as a shared string (a copy of the client's).
    pub fn to_shared(&self) -> Arc<str> {
        match &self.0 {
            ReplyForm::Shared(subject) => Arc::clone(subject),
            ReplyForm::Client(subject) => Arc::from(subject.as_str()),
        }
    }

    /// The subject as async-nats sends to it (a copy of a shared string).
    pub(crate) fn to_client(&self) -> async_nats::Subject {
        match &self.0 {
            ReplyForm::Shared(subject) => async_nats::Subject::from(&**subject),
            ReplyForm::Client(subject) => subject.clone(),
        }
    }
}

impl std::ops::Deref for ReplySubject {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq for ReplySubject {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for ReplySubject {}

impl std::fmt::Display for ReplySubject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<Arc<str>> for ReplySubject {
    fn from(subject: Arc<str>) -> Self {
        Self(ReplyForm::Shared(subject))
    }
}

impl From<&str> for ReplySubject {
    fn from(subject: &str) -> Self {
        Self(ReplyForm::Shared(Arc::from(subject)))
    }
}

impl From<String> for ReplySubject {
    fn from(subject: String) -> Self {
        Self(ReplyForm::Shared(Arc::from(subject)))
    }
}

impl From<async_nats::Subject> for ReplySubject {
    fn from(subject: async_nats::Subject) -> Self {
        Self(ReplyForm::Client(subject))
    }
}

impl From<ReplySubject> for Arc<str> {
    fn from(subject: ReplySubject) -> Self {
        match subject.0 {
            ReplyForm::Shared(subject) => subject,
            ReplyForm::Client(subject) => Arc::from(subject.as_str()),
        }
    }
}
