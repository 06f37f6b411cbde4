#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod broker;
mod copies;
pub mod descriptor;
mod executor;
mod jetstream_info;
mod keys;
mod options;
mod publish;
mod running;
mod source;
mod subject;
#[cfg(feature = "testing")]
pub mod testing;
pub mod transport;
mod validate;

pub use broker::NatsBroker;
pub use copies::RETRY_COUNT_HEADER;
pub use descriptor::{CoreSubject, CoreWildcard, DeliverPolicy, JetStreamSubject};
pub use jetstream_info::JetStreamInfo;
pub use keys::{JetStream, StreamName, StreamSequence};

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
    #[doc = include_str!("../../docs/architecture.md")]
    pub mod architecture {}
    #[cfg(feature = "testing")]
    #[doc = include_str!("../../docs/testing.md")]
    pub mod testing {}
    #[doc = include_str!("../../docs/guarantees.md")]
    pub mod guarantees {}
}
