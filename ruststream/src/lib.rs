#![doc = include_str!("../README.md")]
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod after_ack;
pub mod app;
pub mod asyncapi;
pub mod broker;
pub mod codec;
mod context;
mod delivery;
mod delivery_log;
mod duration;
mod error;
mod extract;
mod handled;
mod handler;
mod header;
pub mod idempotency;
pub mod input;
pub mod middleware;
mod observer;
mod outcome;
mod outgoing;
mod panic;
mod publish;
pub mod registration;
mod reserved;
mod response;
mod router;
pub mod settle;
pub mod telemetry;
mod unconfirmed;

pub use after_ack::AfterAck;
pub use app::{App, AppInfo, Handling, Observer, RunningApp, RustStream, Scope};
pub use broker::{Broker, Env, RunningBroker};
pub use context::Context;
pub use delivery::{Delivery, Extensions, Headers, OutboundMessage};
pub use duration::{NonZeroDuration, ZeroDuration};
pub use error::{AckError, BoxError, Error, ErrorKind, PublishError, PublishErrorKind};
pub use extract::{
    Attempt, Ctx, Delivered, FromContext, FromRef, Key, LastAttempt, MessageHeaders, Rejection,
    State, Subject,
};
pub use handler::{BatchContext, BatchOutcome, Handle, HandleBatch, OutputType, Outs, Publisher};
pub use header::{CorrelationId, Header, TypedHeader};
pub use outcome::HandlerOutcome;
pub use outgoing::Outgoing;
pub use publish::{CORRELATION_ID_HEADER, EncodedOutput, Origin, Publish, StoredAck};
pub use registration::{
    Descriptor, Endpoint, Mount, Registration, WithDeliveryHandler, WithHandler,
};
pub use reserved::{RESERVED_PREFIXES, reserved_prefix};
pub use response::Response;
pub use router::Router;

pub use ruststream_macros::{FromRef, Outgoing, app, nonzero, subscriber};

/// Every name a service uses, in one glob.
pub mod prelude {
    pub use crate::{AckError, Error};
    pub use crate::{
        App, AppInfo, Attempt, BatchContext, BatchOutcome, Context, Ctx, Delivered, FromRef,
        Handle, HandleBatch, HandlerOutcome, LastAttempt, NonZeroDuration, Outgoing, Publisher,
        Response, RustStream, State, Subject, nonzero, subscriber,
    };
    // `publish_raw` and `TestApp::publish_raw` take headers.
    pub use crate::Headers;
    pub use crate::{CorrelationId, Header, TypedHeader};
}

/// What the macros expand to. Not a public API: it may change in any release.
#[doc(hidden)]
pub mod __private;
