//! [`ConsumerOptions`]: the JetStream consumer settings of a descriptor, which only this crate
//! reads. A descriptor stores them in its facts' broker settings, and startup reads them back.

use std::time::Duration;

use ruststream::registration::DescriptorInfo;

/// Where a new consumer starts in the stream (defined in the transport, which reads it).
pub use crate::transport::DeliverPolicy;

/// A JetStream descriptor's consumer settings beyond the broker-neutral facts: what a
/// `JetStreamSubject` or `KvChanges` stores in [`DescriptorInfo::broker`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ConsumerOptions {
    /// The subject the consumer filters on; `None`: the descriptor's subject.
    pub filter_subject: Option<String>,
    /// How many deliveries may wait for a settlement at once; `None`: the server's.
    pub max_ack_pending: Option<i64>,
    /// Where a new consumer starts in the stream.
    pub deliver_policy: DeliverPolicy,
    /// How long one pull waits on the server; `None`: the crate's default.
    pub pull_expiry: Option<Duration>,
}

/// The consumer settings a descriptor stored in `info`, else the defaults (a Core descriptor,
/// or another crate's).
pub(crate) fn consumer_options(info: &DescriptorInfo) -> ConsumerOptions {
    info.broker
        .get::<ConsumerOptions>()
        .cloned()
        .unwrap_or_default()
}
