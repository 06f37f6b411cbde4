use std::any::Any;
use std::num::NonZeroUsize;
use std::time::Duration;

use ruststream::registration::DescriptorInfo;
use ruststream::settle::DeliveryModel;
use ruststream::{Descriptor, WithHandler};

/// `ack_wait` unless the descriptor names another.
pub const DEFAULT_ACK_WAIT: Duration = Duration::from_secs(30);

/// Which messages of the stream a new consumer starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum DeliverPolicy {
    /// Every message the stream holds (the default).
    #[default]
    All,
    /// Only messages stored after the consumer was created.
    New,
    /// The last message, then new ones.
    Last,
    /// The last message of each subject, then new ones.
    LastPerSubject,
    /// From this stream sequence on.
    ByStartSequence(u64),
}

/// A subject read from a JetStream stream through a pull consumer: at-least-once delivery,
/// settled on the server.
///
/// ```
/// use ruststream::{NonZeroDuration, nonzero};
/// use ruststream_nats::JetStreamSubject;
/// use std::time::Duration;
///
/// let payments = JetStreamSubject::new("payments.authorized", "PAYMENTS")
///     .durable("capture")
///     .ack_wait(Duration::from_secs(60));
/// assert_eq!(payments.stream(), "PAYMENTS");
/// assert_eq!(payments.ack_wait_duration().as_secs(), 60);
/// // A `NonZeroDuration` says the same, checked at compile time.
/// let same = payments.clone().ack_wait(NonZeroDuration::from_secs(nonzero!(60)));
/// assert_eq!(same, payments);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JetStreamSubject {
    subject: String,
    stream: String,
    durable: Option<String>,
    /// Zero only when given so; the broker refuses it at start.
    ack_wait: Duration,
    max_ack_pending: Option<i64>,
    deliver_policy: DeliverPolicy,
    filter_subject: Option<String>,
    batch: NonZeroUsize,
    expires: Duration,
}

impl JetStreamSubject {
    /// Reads `subject` from `stream`, through an ephemeral consumer unless `.durable(..)` names
    /// one.
    pub fn new(subject: impl Into<String>, stream: impl Into<String>) -> Self {
        Self {
            subject: subject.into(),
            stream: stream.into(),
            durable: None,
            ack_wait: DEFAULT_ACK_WAIT,
            max_ack_pending: None,
            deliver_policy: DeliverPolicy::All,
            filter_subject: None,
            batch: NonZeroUsize::new(64).unwrap_or(NonZeroUsize::MIN),
            expires: Duration::from_secs(30),
        }
    }

    /// A durable consumer named `name`: it keeps its place across restarts and is shared by
    /// every instance of the service.
    pub fn durable(mut self, name: impl Into<String>) -> Self {
        self.durable = Some(name.into());
        self
    }

    /// How long the server waits for a settlement before delivering again (30 s by default).
    /// Set it above the handler's worst time.
    ///
    /// Takes a `Duration`, as every other duration does, or a `NonZeroDuration`. The server
    /// cannot wait zero: an app with a zero `ack_wait` refuses to start (and `check` fails),
    /// naming the registration.
    pub fn ack_wait(mut self, wait: impl wait::AckWait) -> Self {
        self.ack_wait = wait.into_wait();
        self
    }

    /// How many deliveries may wait for a settlement at once.
    pub fn max_ack_pending(mut self, n: i64) -> Self {
        self.max_ack_pending = Some(n);
        self
    }

    /// Where a new consumer starts in the stream.
    pub fn deliver_policy(mut self, policy: DeliverPolicy) -> Self {
        self.deliver_policy = policy;
        self
    }

    /// Narrows the consumer to `subject` (the descriptor's subject by default).
    pub fn filter_subject(mut self, subject: impl Into<String>) -> Self {
        self.filter_subject = Some(subject.into());
        self
    }

    /// How many messages a batch handler gets at once (64 by default).
    ///
    /// How much the client keeps ahead of the handlers adapts to their pace: up to 256 messages
    /// for fast handlers (a batch handler: its batch size, when more), and never more than they
    /// get through in a tenth of `ack_wait`, so a waiting message does not use up its time to be
    /// settled.
    pub fn batch(mut self, size: NonZeroUsize) -> Self {
        self.batch = size;
        self
    }

    /// How long one pull waits on the server for messages (30 s by default).
    pub fn pull_expiry(mut self, expires: Duration) -> Self {
        self.expires = expires;
        self
    }

    /// Pairs the descriptor with a manual handler, for `b.include(..)`.
    pub fn handler<H>(self, handler: H) -> WithHandler<Self, H> {
        WithHandler::new(self, handler)
    }

    /// The subject.
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// The stream.
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// The durable consumer's name, if any.
    pub fn durable_name(&self) -> Option<&str> {
        self.durable.as_deref()
    }

    /// The ack wait.
    pub fn ack_wait_duration(&self) -> Duration {
        self.ack_wait
    }

    /// The max ack pending, if set.
    pub fn max_ack_pending_value(&self) -> Option<i64> {
        self.max_ack_pending
    }

    /// The deliver policy.
    pub fn deliver_policy_value(&self) -> DeliverPolicy {
        self.deliver_policy
    }

    /// The filter subject: the one set, else the subject.
    pub fn filter(&self) -> &str {
        self.filter_subject.as_deref().unwrap_or(&self.subject)
    }

    /// The pull batch size.
    pub fn batch_size(&self) -> NonZeroUsize {
        self.batch
    }

    /// The pull expiry.
    pub fn expires(&self) -> Duration {
        self.expires
    }
}

impl Descriptor for JetStreamSubject {
    fn info(&self) -> DescriptorInfo {
        let mut info = DescriptorInfo::new(DeliveryModel::JetStream, &self.subject);
        info.stream = Some(self.stream.clone());
        info.consumer = self.durable.clone();
        info.ack_wait = Some(self.ack_wait);
        info.wildcard = self.subject.contains(['*', '>']);
        info.kind = "JetStreamSubject";
        info
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    /// The subject and a filter subject set apart, both under the prefix; the stream and the
    /// consumer keep their names.
    fn prefixed(&self, prefix: &str) -> Option<std::sync::Arc<dyn Descriptor>> {
        let mut routed = self.clone();
        routed.subject = format!("{prefix}.{}", self.subject);
        routed.filter_subject = self
            .filter_subject
            .as_ref()
            .map(|filter| format!("{prefix}.{filter}"));
        Some(std::sync::Arc::new(routed))
    }
}

mod wait {
    use std::time::Duration;

    use ruststream::NonZeroDuration;

    /// What `ack_wait` takes: a `Duration` or a `NonZeroDuration` (a trait only so that anything
    /// else is told how to build one).
    #[diagnostic::on_unimplemented(
        message = "`ack_wait` takes a `Duration`, not `{Self}`",
        label = "not a `Duration`",
        note = "write `.ack_wait(Duration::from_secs(60))` (`std::time::Duration`), or `.ack_wait(NonZeroDuration::from_secs(nonzero!(60)))` to have zero refused at compile time"
    )]
    pub trait AckWait {
        /// The wait.
        fn into_wait(self) -> Duration;
    }

    impl AckWait for Duration {
        fn into_wait(self) -> Duration {
            self
        }
    }

    impl AckWait for NonZeroDuration {
        fn into_wait(self) -> Duration {
            self.get()
        }
    }
}
