#![doc = include_str!("../README.md")]
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod ack_wire;
mod broker;
mod copies;
pub mod descriptor;
#[cfg(feature = "embedded")]
pub mod embedded;
mod events;
mod executor;
#[cfg(test)]
mod fuzz;
mod idempotency;
mod jetstream_info;
mod keys;
mod options;
mod publish;
mod rate;
mod running;
mod settings;
mod source;
mod subject;
mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;
pub mod transport;
mod validate;

/// The runtime, for the code the macros write in a crate that depends only on `ruststream-nats`.
#[doc(hidden)]
pub use ruststream;

pub use broker::NatsBroker;
pub use copies::RETRY_COUNT_HEADER;
pub use descriptor::{CoreSubject, CoreWildcard, DeliverPolicy, JetStreamSubject};
pub use jetstream_info::JetStreamInfo;
pub use keys::{JetStream, StreamName, StreamSequence};
pub use publish::{MSG_ID_HEADER, NatsClient, RELEARN_AFTER, StoredPublish, output_message_id};
pub use settings::MIN_SERVER_VERSION;
pub use transport::StoredAck;

/// Every name a NATS service uses, in one glob: `use ruststream_nats::prelude::*;`.
pub mod prelude {
    pub use ruststream::prelude::*;
    pub use ruststream::{AckError, Context, Handle, HandlerOutcome};

    pub use crate::{CoreSubject, CoreWildcard, DeliverPolicy, JetStreamSubject, NatsBroker};
    pub use crate::{StreamName, StreamSequence};
}

/// The guides in `docs/`, compiled as doctests (`cargo test --doc -p ruststream-nats`).
#[cfg(doctest)]
pub mod guides {
    #[doc = include_str!("../../docs/handlers.md")]
    pub mod handlers {}
    #[doc = include_str!("../../docs/app.md")]
    pub mod app {}
    #[doc = include_str!("../../docs/settlement.md")]
    pub mod settlement {}
    #[doc = include_str!("../../docs/acknowledgement.md")]
    pub mod acknowledgement {}
    #[doc = include_str!("../../docs/at-most-once.md")]
    pub mod at_most_once {}
    #[doc = include_str!("../../docs/retries-dead-letters.md")]
    pub mod retries_dead_letters {}
    #[doc = include_str!("../../docs/consumers.md")]
    pub mod consumers {}
    #[doc = include_str!("../../docs/deployment.md")]
    pub mod deployment {}
    #[doc = include_str!("../../docs/architecture.md")]
    pub mod architecture {}
    #[doc = include_str!("../../docs/security.md")]
    pub mod security {}
    #[cfg(feature = "testing")]
    #[doc = include_str!("../../docs/testing.md")]
    pub mod testing {}
    #[cfg(all(feature = "msgpack", feature = "cbor", feature = "protobuf"))]
    #[doc = include_str!("../../docs/codecs.md")]
    pub mod codecs {}
    #[doc = include_str!("../../docs/middleware.md")]
    pub mod middleware {}
    #[cfg(feature = "testing")]
    #[doc = include_str!("../../docs/idempotency.md")]
    pub mod idempotency {}
    #[cfg(feature = "testing")]
    #[doc = include_str!("../../docs/first-service.md")]
    pub mod first_service {}
    #[doc = include_str!("../../docs/publishing.md")]
    pub mod publishing {}
    #[cfg(feature = "testing")]
    #[doc = include_str!("../../docs/request-reply.md")]
    pub mod request_reply {}
    #[doc = include_str!("../../docs/guarantees.md")]
    pub mod guarantees {}
    #[doc = include_str!("../../docs/operations.md")]
    pub mod operations {}
}
