use ruststream::registration::DescriptorInfo;
use ruststream::settle::DeliveryModel;
use ruststream::{Descriptor, WithHandler};

use super::JetStreamOnly;
use super::core::{CoreBatch, core_batch_options};

/// A Core NATS pattern (`orders.*`, `orders.>`): many subjects, at-most-once delivery.
///
/// A pattern publishes to none of its subjects, so a registration that retries on it names
/// where a copy goes with `.retry_to(subject)`, or the app refuses to start.
///
/// ```
/// use ruststream_nats::CoreWildcard;
///
/// let orders = CoreWildcard::new("orders.*");
/// assert_eq!(orders.pattern(), "orders.*");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoreWildcard {
    pattern: String,
    queue_group: Option<String>,
    batch: CoreBatch,
}

impl CoreWildcard {
    /// Reads every subject matching `pattern`.
    pub fn new(pattern: impl Into<String>) -> Self {
        Self {
            pattern: pattern.into(),
            queue_group: None,
            batch: CoreBatch::default(),
        }
    }

    core_batch_options!(CoreWildcard);

    /// Shares the pattern with the other members of queue group `name`.
    pub fn queue_group(mut self, name: impl Into<String>) -> Self {
        self.queue_group = Some(name.into());
        self
    }

    /// Pairs the descriptor with a manual handler, for `b.include(..)`.
    pub fn handler<H>(self, handler: H) -> WithHandler<Self, H> {
        WithHandler::new(self, handler)
    }

    /// The pattern.
    pub fn pattern(&self) -> &str {
        &self.pattern
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
}

impl Descriptor for CoreWildcard {
    fn info(&self) -> DescriptorInfo {
        let mut info = DescriptorInfo::new(DeliveryModel::Core, &self.pattern);
        info.wildcard = true;
        info.queue_group = self.queue_group.clone();
        info.kind = "CoreWildcard";
        self.batch.describe(&mut info);
        info
    }

    fn prefixed(&self, prefix: &str) -> Option<std::sync::Arc<dyn Descriptor>> {
        let mut routed = self.clone();
        routed.pattern = format!("{prefix}.{}", self.pattern);
        Some(std::sync::Arc::new(routed))
    }
}
