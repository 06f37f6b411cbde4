#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod broker;
pub mod descriptor;
pub mod transport;

pub use broker::NatsBroker;
pub use descriptor::{CoreSubject, CoreWildcard, DeliverPolicy, JetStreamSubject};

/// Every name a NATS service uses, in one glob: `use ruststream_nats::prelude::*;`.
pub mod prelude {
    pub use ruststream::prelude::*;
    pub use ruststream::{AckError, Context, Handle, HandlerOutcome};

    pub use crate::{CoreSubject, CoreWildcard, DeliverPolicy, JetStreamSubject, NatsBroker};
}
