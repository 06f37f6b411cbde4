//! Where a registration's messages come from, as the runtime sees it: the [`Descriptor`] trait
//! and its broker-neutral facts, [`DescriptorInfo`].

use std::fmt;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use super::BrokerSettings;
use crate::settle::DeliveryModel;

/// Where a registration's messages come from: a subject, a pattern, a stream consumer.
///
/// Everything a broker and the startup checks need is in its [`DescriptorInfo`]: a broker never
/// recovers the descriptor's type. Each broker crate has its own descriptors; a string literal is
/// a subject on the broker's plainest model (Core NATS for NATS).
pub trait Descriptor: Send + Sync + fmt::Debug + 'static {
    /// What `describe` and startup checks need to know.
    fn info(&self) -> DescriptorInfo;
    /// The same descriptor reading `prefix.` + its subject, for a [`Router`](crate::Router);
    /// `None` when it cannot be prefixed (the app then refuses to start, naming it).
    fn prefixed(&self, prefix: &str) -> Option<Arc<dyn Descriptor>> {
        let _ = prefix;
        None
    }
}

impl Descriptor for &'static str {
    fn info(&self) -> DescriptorInfo {
        DescriptorInfo::new(DeliveryModel::Core, *self).with_copy_target(*self)
    }

    fn prefixed(&self, prefix: &str) -> Option<Arc<dyn Descriptor>> {
        Some(Arc::new(PrefixedSubject(join(prefix, self))))
    }
}

/// A plain subject under a router's prefix (what `"subject"` becomes in a router).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefixedSubject(String);

impl Descriptor for PrefixedSubject {
    fn info(&self) -> DescriptorInfo {
        DescriptorInfo::new(DeliveryModel::Core, &self.0).with_copy_target(&self.0)
    }

    fn prefixed(&self, prefix: &str) -> Option<Arc<dyn Descriptor>> {
        Some(Arc::new(Self(join(prefix, &self.0))))
    }
}

/// A descriptor's facts, broker-neutral.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DescriptorInfo {
    /// The delivery model, which decides settlement.
    pub model: DeliveryModel,
    /// The subject or pattern read.
    pub subject: String,
    /// Whether `subject` is a pattern matching many subjects.
    pub wildcard: bool,
    /// The queue group sharing the subscription, if any.
    pub queue_group: Option<String>,
    /// The stream read from (JetStream).
    pub stream: Option<String>,
    /// The consumer, when durable (JetStream).
    pub consumer: Option<String>,
    /// How long the server waits for a settlement (JetStream).
    pub ack_wait: Option<Duration>,
    /// Where a Core copy goes when the registration names none.
    pub copy_target: Option<String>,
    /// What kind of descriptor this is, as its type is called.
    pub kind: &'static str,
    /// How many messages a batch handler gets at once; `None`: the broker's default.
    pub batch: Option<NonZeroUsize>,
    /// How long a batch handler's batch may wait to fill once its first message came; `None`:
    /// it takes what is ready at once.
    pub batch_max_wait: Option<Duration>,
    /// The key-value bucket whose changes the registration reads (its stream is the bucket's);
    /// `None` for a plain stream or subject.
    pub bucket: Option<String>,
    /// Which changes of its bucket a key-value registration reads, in words (`every revision`,
    /// `latest per key`, `new changes only`), as `describe` shows them; `None` without a bucket.
    pub bucket_changes: Option<&'static str>,
    /// The broker's own settings, which only that broker reads, at startup.
    pub broker: BrokerSettings,
}

impl DescriptorInfo {
    /// Facts of a descriptor reading `subject` under `model`.
    pub fn new(model: DeliveryModel, subject: impl Into<String>) -> Self {
        Self {
            model,
            subject: subject.into(),
            wildcard: false,
            queue_group: None,
            stream: None,
            consumer: None,
            ack_wait: None,
            copy_target: None,
            kind: "subject",
            batch: None,
            batch_max_wait: None,
            bucket: None,
            bucket_changes: None,
            broker: BrokerSettings::new(),
        }
    }

    /// Sets where a Core copy goes by default.
    pub fn with_copy_target(mut self, target: impl Into<String>) -> Self {
        self.copy_target = Some(target.into());
        self
    }
}

/// `prefix.subject`.
pub(crate) fn join(prefix: &str, subject: &str) -> String {
    if prefix.is_empty() {
        subject.to_owned()
    } else {
        format!("{prefix}.{subject}")
    }
}
