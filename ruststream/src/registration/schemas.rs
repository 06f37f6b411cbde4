//! What a registration says about its messages' shapes ([`Schemas`]): the payload's Rust type
//! and its JSON Schemas for `asyncapi`: declared at the mount site (`schemars`), else derived
//! with the reply type (`#[derive(Outgoing)]`), else traced from the type's `Deserialize` impl.

use std::fmt;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::traced::traced_schema;
use crate::handler::Outs;

/// Makes a JSON Schema; `None` when the type's cannot be made (see [`traced_schema`]).
pub type SchemaFn = fn() -> Option<Value>;

/// What a registration says about its messages' shapes.
#[derive(Clone, Default)]
pub struct Schemas {
    /// The Rust type of the payload, as `std::any::type_name` spells it.
    pub payload_type: &'static str,
    /// Whether the payload reaches the handler as it arrived (`Bytes`, `&[u8]`): no codec
    /// reads it.
    pub raw: bool,
    /// The payload's JSON Schema: declared, or traced from its `Deserialize` impl.
    pub payload: Option<SchemaFn>,
    /// The JSON Schema of what the handler publishes and answers with: declared, or its
    /// [`Outgoing`](crate::Outgoing) type's.
    pub reply: Option<SchemaFn>,
    /// The Rust type of what the handler publishes and answers with: declared, or its
    /// [`Outgoing`](crate::Outgoing) type's.
    pub reply_type: Option<&'static str>,
    /// Each output's Rust type and JSON Schema, in the order the registration's `publishes`
    /// lists their subjects.
    pub outputs: Vec<(&'static str, SchemaFn)>,
    /// Each output's own format (`#[outgoing(codec = ..)]`; `None`: the registration's), in
    /// the order of `outputs`.
    pub output_codecs: Vec<Option<crate::codec::Format>>,
    /// Headers the handler reads, declared at the mount site, as `(name, what it means)`.
    pub headers: Vec<(String, String)>,
}

impl fmt::Debug for Schemas {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Schemas")
            .field("payload_type", &self.payload_type)
            .field("raw", &self.raw)
            .field("payload", &self.payload.is_some())
            .field("reply", &self.reply.is_some())
            .field("reply_type", &self.reply_type)
            .field("headers", &self.headers)
            .field("outputs", &self.outputs.len())
            .field("output_codecs", &self.output_codecs)
            .finish()
    }
}

/// Equal when they name one type and declare the same schemas (two schema functions of one
/// type are equal: their documents are).
impl PartialEq for Schemas {
    fn eq(&self, other: &Self) -> bool {
        let same = |a: Option<SchemaFn>, b: Option<SchemaFn>| match (a, b) {
            (Some(a), Some(b)) => a() == b(),
            (a, b) => a.is_none() && b.is_none(),
        };
        self.payload_type == other.payload_type
            && self.raw == other.raw
            && same(self.payload, other.payload)
            && same(self.reply, other.reply)
            && self.reply_type == other.reply_type
            && self.headers == other.headers
            && self.output_codecs == other.output_codecs
            && self.outputs.len() == other.outputs.len()
            && self
                .outputs
                .iter()
                .zip(&other.outputs)
                .all(|(a, b)| a.0 == b.0 && same(Some(a.1), Some(b.1)))
    }
}

impl Eq for Schemas {}

impl Schemas {
    /// The type of payload `T`, without a schema.
    pub fn of<T: ?Sized>() -> Self {
        Self {
            payload_type: std::any::type_name::<T>(),
            raw: false,
            payload: None,
            reply: None,
            reply_type: None,
            headers: Vec::new(),
            outputs: Vec::new(),
            output_codecs: Vec::new(),
        }
    }

    /// The type of payload `T`, taken as it arrived, and the schema of what outputs `O`
    /// publish.
    pub fn raw<T: ?Sized, O: Outs>() -> Self {
        Self {
            raw: true,
            ..Self::of::<T>()
        }
        .replying::<O>()
    }

    /// The type of payload `T`, decoded: its schema traced from its `Deserialize` impl, and
    /// the schema of what outputs `O` publish.
    pub fn decoded<T: DeserializeOwned, O: Outs>() -> Self {
        Self {
            payload: Some(traced_schema::<T>),
            ..Self::of::<T>()
        }
        .replying::<O>()
    }

    /// The type of input `In`, built from the whole delivery: the schema of the value its
    /// payload carries (traced from `In::Value`'s `Deserialize` impl), and the schema of what
    /// outputs `O` publish.
    pub fn from_delivery<In: crate::input::FromDelivery, O: Outs>() -> Self {
        Self {
            payload: Some(traced_schema::<In::Value>),
            ..Self::of::<In>()
        }
        .replying::<O>()
    }

    /// With the schema of what outputs `O` publish (their first [`Outgoing`](crate::Outgoing)
    /// type's).
    pub fn replying<O: Outs>(self) -> Self {
        Self {
            reply: O::reply_schema(),
            reply_type: O::reply_type(),
            outputs: O::output_types(),
            output_codecs: O::output_codecs(),
            ..self
        }
    }
}

impl<S> super::Registration<S> {
    /// Declares a header the handler reads (`x-tenant`) and what it means, for `asyncapi`: the
    /// registration's input message lists it in its `headers` schema, beside those the runtime
    /// reads itself.
    pub fn header_schema(
        &mut self,
        name: impl Into<String>,
        description: impl Into<String>,
    ) -> &mut Self {
        self.schemas.headers.push((name.into(), description.into()));
        self
    }
}

/// The JSON Schema (draft 7) of `T` as a [`SchemaFn`]: what a declaration at the mount site
/// stores.
pub fn declared_schema<T: schemars::JsonSchema>() -> Option<Value> {
    Some(schema_of::<T>())
}

/// The JSON Schema (draft 7) of `T`.
pub fn schema_of<T: schemars::JsonSchema>() -> Value {
    let schema = schemars::generate::SchemaSettings::draft07()
        .into_generator()
        .into_root_schema_for::<T>();
    let mut value = schema.to_value();
    if let Value::Object(map) = &mut value {
        // The document says which draft its schemas follow.
        map.remove("$schema");
    }
    value
}
