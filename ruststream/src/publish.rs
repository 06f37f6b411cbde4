//! The one thing every broker offers the runtime besides deliveries: publishing.

use futures::future::BoxFuture;

use crate::delivery::OutboundMessage;
use crate::error::PublishError;

/// Publishes messages on a broker. Implemented by each broker; the runtime and
/// [`Context::publish`](crate::Context::publish) use it.
pub trait Publish: Send + Sync {
    /// Publishes `message`; resolves once the broker has taken it (for a stream subject, once
    /// the stream stored it).
    fn publish(&self, message: OutboundMessage) -> BoxFuture<'_, Result<(), PublishError>>;
}
