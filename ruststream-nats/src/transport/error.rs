//! What went wrong on the wire: [`TransportError`], its kind, and a stream's acknowledgement of
//! a stored publish.

use ruststream::BoxError;

/// What went wrong on the wire.
///
/// One style with the runtime's errors (`ruststream::Error`): `Display` is the message (what was
/// being done) and, after `: `, the immediate cause, the client's error, when there is one;
/// [`source`](std::error::Error::source) continues the chain *after* that cause, so a report
/// that walks the chain prints every layer once. The cause stays typed: [`TransportError::cause`]
/// returns it (an `async_nats` error on a real server), to downcast. The kind (and, for a
/// refusal, [`TransportError::refusal`]) is for code to branch on; neither is printed.
#[derive(Debug)]
pub struct TransportError {
    /// Broadly what.
    pub kind: TransportErrorKind,
    /// For people: what was being done, and what went wrong when there is no cause to say it.
    pub message: String,
    refusal: Option<Refusal>,
    cause: Option<BoxError>,
}

/// Why a stream refused a stored publish ([`TransportErrorKind::Refused`]), the same on a real
/// server and in the in-process NATS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// The stream is at a limit (messages, bytes, per subject) and its policy is
    /// `discard: new`, or it could not store the message.
    StreamFull,
    /// A `Nats-Expected-*` header did not hold (stream, last sequence, last message id).
    Expectation,
    /// The message is larger than the server (or the stream) accepts.
    TooLarge,
}

/// Broadly what went wrong on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransportErrorKind {
    /// The server could not be reached.
    Connect,
    /// No stream by that name.
    StreamNotFound,
    /// A JetStream publish found no responder: no stream stores that subject, or the stream
    /// that does is not answering (its server is down, a leader election is under way).
    NoStream,
    /// A subject or name is not valid.
    Invalid,
    /// An existing consumer conflicts with the descriptor in a way that cannot be updated.
    ConsumerConflict,
    /// A stream stores the subject and refused the message (limits with `discard: new`, a
    /// failed `Nats-Expected-*` check, a message too large).
    Refused,
    /// Nobody listens on a request's subject.
    NoResponders,
    /// The server (or the responder) did not answer in time.
    TimedOut,
    /// Anything else the server or the connection reported.
    Other,
}

/// A stream's acknowledgement of a stored publish: the core's, which
/// [`Publish::publish_stored`](ruststream::Publish::publish_stored) returns too.
pub use ruststream::StoredAck;

impl TransportError {
    /// An error of `kind`.
    pub fn new(kind: TransportErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            refusal: None,
            cause: None,
        }
    }

    /// A refusal of a stored publish ([`TransportErrorKind::Refused`]) for `why`.
    pub fn refused(why: Refusal, message: impl Into<String>) -> Self {
        Self {
            refusal: Some(why),
            ..Self::new(TransportErrorKind::Refused, message)
        }
    }

    /// Attaches the client's error that caused this one (printed after the message).
    pub fn with_cause(mut self, cause: impl Into<BoxError>) -> Self {
        self.cause = Some(cause.into());
        self
    }

    /// Why a stream refused the message, for a [`TransportErrorKind::Refused`] whose reason is
    /// known.
    pub fn refusal(&self) -> Option<Refusal> {
        self.refusal
    }

    /// The client's error that caused this one, to downcast.
    pub fn cause(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        self.cause.as_deref()
    }

    /// Whether the same operation fails the same way every time it is tried again: a subject,
    /// header or name that is not valid, a message larger than the server or the stream takes.
    /// Everything else (no connection, no answer in time, a stream full or not answering now, a
    /// failed expectation) may succeed later. A publish error's kind follows from it
    /// ([`ruststream::PublishErrorKind::is_permanent`]).
    ///
    /// ```
    /// use ruststream_nats::transport::{Refusal, TransportError, TransportErrorKind};
    ///
    /// assert!(TransportError::refused(Refusal::TooLarge, "too large").is_permanent());
    /// assert!(TransportError::new(TransportErrorKind::Invalid, "not a subject").is_permanent());
    /// assert!(!TransportError::refused(Refusal::StreamFull, "full").is_permanent());
    /// assert!(!TransportError::new(TransportErrorKind::NoStream, "no responders").is_permanent());
    /// ```
    pub fn is_permanent(&self) -> bool {
        self.kind == TransportErrorKind::Invalid || self.refusal == Some(Refusal::TooLarge)
    }
}

impl std::fmt::Display for TransportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)?;
        if let Some(cause) = &self.cause {
            write!(f, ": {cause}")?;
        }
        Ok(())
    }
}

/// The cause's own source: `Display` printed the cause already.
///
/// ```
/// use std::error::Error as _;
/// use ruststream_nats::transport::{TransportError, TransportErrorKind};
///
/// let err = TransportError::new(TransportErrorKind::Other, "flush failed")
///     .with_cause(std::io::Error::other("connection reset"));
/// assert_eq!(err.to_string(), "flush failed: connection reset");
/// assert!(err.source().is_none(), "the cause is printed once");
/// assert!(err.cause().is_some_and(|cause| cause.is::<std::io::Error>()));
/// ```
impl std::error::Error for TransportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause.as_ref()?.source()
    }
}
