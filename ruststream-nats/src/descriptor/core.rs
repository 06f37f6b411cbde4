use ruststream::registration::DescriptorInfo;
use ruststream::settle::DeliveryModel;
use ruststream::{Descriptor, WithHandler};

use super::JetStreamOnly;

/// One Core NATS subject: at-most-once delivery, nothing to acknowledge.
///
/// A string literal in `#[subscriber("orders.shipped")]` is a `CoreSubject`. A retry copy of a
/// Core message is published back to this subject.
///
/// ```
/// use ruststream_nats::CoreSubject;
///
/// let notices = CoreSubject::new("orders.shipped").queue_group("mailers");
/// assert_eq!(notices.subject(), "orders.shipped");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoreSubject {
    subject: String,
    queue_group: Option<String>,
    retry_to: Option<String>,
}

impl CoreSubject {
    /// Reads `subject`.
    pub fn new(subject: impl Into<String>) -> Self {
        Self {
            subject: subject.into(),
            queue_group: None,
            retry_to: None,
        }
    }

    /// Publishes retry copies to `subject` instead of this one.
    ///
    /// By default a copy goes back to the subject read, so every other subscriber of that
    /// subject (other services, other queue groups, a stream storing it) sees each retry as a
    /// new message. A subject of its own keeps retries apart; something must read it (another
    /// registration, or this handler mounted on it too). A `.retry_to(..)` at the mount site
    /// wins over this one. See `docs/at-most-once.md`.
    ///
    /// ```
    /// use ruststream_nats::CoreSubject;
    ///
    /// let notices = CoreSubject::new("orders.shipped").retry_to("orders.shipped.retry");
    /// assert_eq!(notices.retry_target(), "orders.shipped.retry");
    /// ```
    pub fn retry_to(mut self, subject: impl Into<String>) -> Self {
        self.retry_to = Some(subject.into());
        self
    }

    /// Where a retry copy goes: the `retry_to` subject, else the subject read.
    pub fn retry_target(&self) -> &str {
        self.retry_to.as_deref().unwrap_or(&self.subject)
    }

    /// Shares the subject with the other members of queue group `name`: each message goes to
    /// one of them.
    pub fn queue_group(mut self, name: impl Into<String>) -> Self {
        self.queue_group = Some(name.into());
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

    /// The queue group, if any.
    pub fn group(&self) -> Option<&str> {
        self.queue_group.as_deref()
    }

    #[doc(hidden)]
    pub fn durable<N: Into<String>>(self, _name: N) -> Self
    where
        Self: JetStreamOnly<N>,
    {
        self
    }

    #[doc(hidden)]
    pub fn ack_wait<W>(self, _wait: W) -> Self
    where
        Self: JetStreamOnly<W>,
    {
        self
    }

    #[doc(hidden)]
    pub fn max_ack_pending<N: Into<i64>>(self, _n: N) -> Self
    where
        Self: JetStreamOnly<N>,
    {
        self
    }
}

impl Descriptor for CoreSubject {
    fn info(&self) -> DescriptorInfo {
        let mut info = DescriptorInfo::new(DeliveryModel::Core, &self.subject)
            .with_copy_target(self.retry_target());
        info.queue_group = self.queue_group.clone();
        info.kind = "CoreSubject";
        info
    }

    fn prefixed(&self, prefix: &str) -> Option<std::sync::Arc<dyn Descriptor>> {
        let mut routed = self.clone();
        routed.subject = format!("{prefix}.{}", self.subject);
        Some(std::sync::Arc::new(routed))
    }
}
