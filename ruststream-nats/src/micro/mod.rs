//! The app's request handlers as a NATS micro service: `service.rs` what the service says
//! (`io.nats.micro.v1` ping, info and stats responses), `responder.rs` the subscriptions
//! that answer `$SRV.PING`, `$SRV.INFO` and `$SRV.STATS`.

mod responder;
mod service;

pub(crate) use self::responder::{open, service};
