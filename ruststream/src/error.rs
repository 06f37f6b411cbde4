//! The errors of the runtime: one type per operation, each with a `kind()` to match on.
//!
//! One style for all of them (the second of the two the Rust API guidelines allow): `Display`
//! says what happened and, after `: `, the immediate cause; [`source`](StdError::source) then
//! continues the chain *after* that cause, so a report that walks the chain prints every layer
//! once. The cause itself is kept typed, never flattened to a string: `cause()` returns it, to
//! downcast.

use std::error::Error as StdError;
use std::fmt;

/// A boxed error from a layer below (a broker client, a user's startup hook).
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// Why an app could not start, or stopped with an error.
///
/// Match on [`Error::kind`]; the message is for people.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    source: Option<BoxError>,
}

/// What went wrong, broadly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A registration or broker setting is invalid; nothing was connected.
    Config,
    /// The broker could not be reached or refused the connection.
    Connect,
    /// The broker refused a subscription, a stream or a consumer.
    Broker,
    /// A user's `on_startup` hook failed.
    Startup,
    /// A user's `on_shutdown` hook failed, or a drain did not finish.
    Shutdown,
    /// The process could not set up its runtime or signals.
    Runtime,
}

impl Error {
    /// An error of `kind` with a message that says what happened and what to do.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// Attaches the lower-level error that caused this one.
    pub fn with_source(mut self, source: impl Into<BoxError>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// What went wrong, broadly.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The lower-level error that caused this one (printed after the message), to downcast.
    pub fn cause(&self) -> Option<&(dyn StdError + Send + Sync + 'static)> {
        self.source.as_deref()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(source) = &self.source {
            write!(f, ": {source}")?;
        }
        Ok(())
    }
}

/// The cause's own source: the cause is printed by `Display` already.
///
/// ```
/// use std::error::Error as _;
/// use ruststream::{Error, ErrorKind};
///
/// let err = Error::new(ErrorKind::Startup, "the startup hook failed")
///     .with_source(std::io::Error::other("the database is down"));
/// assert_eq!(err.to_string(), "the startup hook failed: the database is down");
/// assert!(err.source().is_none(), "the cause is printed once");
/// assert!(err.cause().is_some_and(|cause| cause.is::<std::io::Error>()));
/// ```
impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        next_source(self.source.as_ref())
    }
}

/// The source after `cause` in a chain whose `Display` printed `cause`.
fn next_source(cause: Option<&BoxError>) -> Option<&(dyn StdError + 'static)> {
    cause?.source()
}

/// Settling a delivery failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum AckError {
    /// The delivery model settles nothing: Core NATS keeps no message and takes no
    /// acknowledgement.
    Unsupported,
    /// The acknowledgement could not be sent, or the server did not confirm it; the cause is
    /// printed after the message, and kept to downcast.
    Failed(BoxError),
}

impl fmt::Display for AckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unsupported => f.write_str(
                "this delivery cannot be settled: the subscription's model acknowledges nothing",
            ),
            Self::Failed(cause) => {
                write!(
                    f,
                    "the acknowledgement was not delivered to the server: {cause}"
                )
            }
        }
    }
}

/// The cause's own source: the cause is printed by `Display` already.
impl StdError for AckError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            Self::Unsupported => None,
            Self::Failed(cause) => next_source(Some(cause)),
        }
    }
}

/// Publishing a message failed.
///
/// Its `Display` says the subject, the kind and the cause, for example: publishing to
/// `receipts.7` failed (not stored): stream `RECEIPTS` refused the message: maximum messages
/// exceeded.
#[derive(Debug)]
pub struct PublishError {
    kind: PublishErrorKind,
    subject: String,
    source: Option<BoxError>,
}

impl fmt::Display for PublishError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "publishing to `{}` failed ({})", self.subject, self.kind)?;
        if let Some(source) = &self.source {
            write!(f, ": {source}")?;
        }
        Ok(())
    }
}

/// The cause's own source: the cause is printed by `Display` already.
impl StdError for PublishError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        next_source(self.source.as_ref())
    }
}

impl fmt::Display for PublishErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Encode => "not encoded",
            Self::Broker => "not taken by the broker",
            Self::InvalidSubject => "invalid subject",
            Self::NotStored => "not stored",
            Self::Reserved => "reserved subject",
            Self::NoResponders => "no responders",
            Self::Timeout => "timed out",
            Self::Decode => "response not decoded",
            Self::Unsupported => "unsupported",
            Self::TooLarge => "too large",
        })
    }
}

/// Why a publish failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PublishErrorKind {
    /// The value could not be encoded.
    Encode,
    /// The broker did not take the message (connection lost, no stream, timeout).
    Broker,
    /// The subject is not a valid subject to publish to.
    InvalidSubject,
    /// A stream stores the subject and did not confirm the message: it refused it (full,
    /// a failed expectation) or did not answer in time. The message may not be stored.
    NotStored,
    /// The subject is reserved (`$JS.API.`, `$SYS.`, `_INBOX.`) and the call did not opt in.
    Reserved,
    /// Nobody listens on the subject of a request.
    NoResponders,
    /// No response came in time.
    Timeout,
    /// The response did not decode.
    Decode,
    /// The broker cannot do this.
    Unsupported,
    /// The message is larger than the broker (its `max_payload`) or the stream (its
    /// `max_msg_size`) accepts.
    TooLarge,
}

impl PublishErrorKind {
    /// Whether the same publish fails the same way every time it is tried again: a value that
    /// does not encode, a subject that is not one or is reserved, a message too large, a
    /// broker that cannot do it. A handling whose output failed so is not retried: it goes to
    /// the dead-letter subject, or ends ([`crate::settle::decide_unpublishable`]). The other
    /// kinds (the broker or the stream did not take it now, no responders, a timeout) can
    /// succeed later and are retried.
    ///
    /// ```
    /// use ruststream::PublishErrorKind;
    ///
    /// assert!(PublishErrorKind::TooLarge.is_permanent());
    /// assert!(PublishErrorKind::InvalidSubject.is_permanent());
    /// assert!(!PublishErrorKind::NotStored.is_permanent());
    /// assert!(!PublishErrorKind::Broker.is_permanent());
    /// ```
    pub const fn is_permanent(self) -> bool {
        match self {
            Self::Encode
            | Self::InvalidSubject
            | Self::Reserved
            | Self::TooLarge
            | Self::Unsupported => true,
            Self::Broker | Self::NotStored | Self::NoResponders | Self::Timeout | Self::Decode => {
                false
            }
        }
    }
}

impl PublishError {
    /// A publish error of `kind` about `subject`.
    pub fn new(kind: PublishErrorKind, subject: impl Into<String>) -> Self {
        Self {
            kind,
            subject: subject.into(),
            source: None,
        }
    }

    /// Attaches the lower-level cause.
    pub fn with_source(mut self, source: impl Into<BoxError>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// Why the publish failed.
    pub fn kind(&self) -> PublishErrorKind {
        self.kind
    }

    /// The subject the message was meant for.
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// The lower-level cause (printed after the kind), to downcast.
    pub fn cause(&self) -> Option<&(dyn StdError + Send + Sync + 'static)> {
        self.source.as_deref()
    }
}

/// A payload that did not decode into the handler's type.
///
/// Its `Display` ends with the format's own error (kept typed: [`DecodeError::cause`]), and
/// `source()` continues after it, as every error of the runtime does (see
/// [`Error`]).
#[derive(Debug)]
pub struct DecodeError {
    target: &'static str,
    reason: BoxError,
}

impl DecodeError {
    /// A decode error for the type named `target`, because of `reason` (the format's error, or
    /// a sentence).
    pub fn new(target: &'static str, reason: impl Into<BoxError>) -> Self {
        Self {
            target,
            reason: reason.into(),
        }
    }

    /// The same error, for the type named `target` (a codec erased by
    /// [`Format::custom`](crate::codec::Format::custom) names the type it was handed).
    pub(crate) fn for_target(mut self, target: &'static str) -> Self {
        self.target = target;
        self
    }

    /// The type the payload was meant to become.
    pub fn target(&self) -> &'static str {
        self.target
    }

    /// Why it did not decode: the format's error, to downcast.
    pub fn cause(&self) -> &(dyn StdError + Send + Sync + 'static) {
        &*self.reason
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the payload does not decode as {}: {}",
            self.target, self.reason
        )
    }
}

impl StdError for DecodeError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.reason.source()
    }
}

/// A value that could not be encoded; `Display` and `source()` as [`DecodeError`]'s.
#[derive(Debug)]
pub struct EncodeError(BoxError);

impl EncodeError {
    /// An encode error because of `reason` (the format's error, or a sentence).
    pub fn new(reason: impl Into<BoxError>) -> Self {
        Self(reason.into())
    }

    /// Why it did not encode: the format's error, to downcast.
    pub fn cause(&self) -> &(dyn StdError + Send + Sync + 'static) {
        &*self.0
    }
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the value does not encode: {}", self.0)
    }
}

impl StdError for EncodeError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.0.source()
    }
}
