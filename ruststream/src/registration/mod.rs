//! Registrations: a descriptor (where messages come from), a handler, and the mount site's
//! policy (cap, dead letter, retry target, concurrency). Plain data until the app starts.
//!
//! One file per concept; this file only names them:
//!
//! | file | holds |
//! | --- | --- |
//! | `descriptor.rs` | [`Descriptor`], [`DescriptorInfo`], [`PrefixedSubject`], subject prefixes |
//! | `broker_settings.rs` | [`BrokerSettings`]: a broker's own settings of a descriptor, by type |
//! | `policy.rs` | [`Policy`], [`OnFailure`] |
//! | `lane_key.rs` | [`LaneKey`]: the key of `.by_key(..)`'s ordering lanes |
//! | `info.rs` | [`RegistrationInfo`] (what `describe` and the startup checks read) |
//! | `schemas.rs` | [`Schemas`]: the payload's type and its JSON Schemas |
//! | `traced.rs` | [`traced_schema`]: a type's JSON Schema read from its serde `Deserialize` impl |
//! | `builder.rs` | [`Registration`] and its chain (`.max_attempts(..)`, `.dead_letter(..)`, ..) |
//! | `call.rs` | how a registration calls its handler: decode, context, panics caught |
//! | `typed.rs` | a single handler's call with its types known, erased once per registration |
//! | `threads.rs` | the pool of `.threads(n)`: the handler's calls on threads of their own |
//! | `endpoint.rs` | [`Endpoint`]: a registration bound to the app state, as a broker runs it |
//! | `dispatch.rs` | [`Dispatcher`]: one handler slot; deliveries in, decisions out |
//! | `mount.rs` | [`Mount`], [`WithHandler`], [`WithDeliveryHandler`]: what `b.include(..)` takes |
//!
//! Dependencies run one way: `broker_settings` ← `descriptor`, `lane_key` ← `policy`, `traced`
//! ← `schemas` ← `info` ← `builder`, `dispatch` ← `typed` ← `call`, `endpoint`, `mount`;
//! `threads` ← `typed`, `endpoint`.

mod broker_settings;
mod builder;
mod call;
mod descriptor;
mod dispatch;
mod endpoint;
mod info;
mod lane_key;
mod mount;
mod policy;
mod schemas;
mod threads;
mod traced;
mod typed;

pub use self::broker_settings::BrokerSettings;
pub use self::builder::Registration;
pub use self::descriptor::{Descriptor, DescriptorInfo, PrefixedSubject};
pub use self::dispatch::Dispatcher;
pub use self::endpoint::Endpoint;
pub use self::info::{RegistrationInfo, policy_notes};
pub use self::lane_key::LaneKey;
pub use self::mount::{
    BatchMarker, DeliveryMarker, FnMarker, Is, Mount, SingleMarker, SubscriberFn, SubscriberName,
    WithDeliveryHandler, WithHandler,
};
pub use self::policy::{OnFailure, Policy};
pub use self::schemas::{SchemaFn, Schemas, declared_schema, schema_of};
pub use self::traced::traced_schema;
pub use crate::handled::Handled;
