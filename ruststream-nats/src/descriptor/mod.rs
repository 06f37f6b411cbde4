//! Where a registration's messages come from: a Core subject, a Core pattern, a JetStream
//! stream read through a pull consumer, or the changes of a key-value bucket.

mod core;
mod jetstream;
mod kv;
mod options;
mod wildcard;

pub use self::core::CoreSubject;
pub use self::jetstream::{DEFAULT_ACK_WAIT, JetStreamSubject};
pub(crate) use self::jetstream::{DEFAULT_BATCH, consumer_spec};
pub use self::kv::KvChanges;
pub(crate) use self::kv::bucket_of;
pub(crate) use self::options::consumer_options;
pub use self::options::{ConsumerOptions, DeliverPolicy};
pub use self::wildcard::CoreWildcard;

/// A JetStream-only option called on a Core descriptor. Never implemented: using one is a
/// compile error that says what to write instead.
#[diagnostic::on_unimplemented(
    message = "this is a JetStream option; `{Self}` reads a Core NATS subject, which has no stream and no consumer",
    label = "not available on a Core descriptor",
    note = "read the subject from a stream: `JetStreamSubject::new(subject, stream).durable(..).ack_wait(..)`"
)]
#[doc(hidden)]
pub trait JetStreamOnly<Arg> {}
