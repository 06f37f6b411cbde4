//! What a registration says about its messages' shapes ([`Schemas`]): the payload's Rust type
//! and, when declared at the mount site, JSON Schemas for `asyncapi`.

use std::fmt;

use serde_json::Value;

/// Makes a JSON Schema.
pub type SchemaFn = fn() -> Value;

/// What a registration says about its messages' shapes.
#[derive(Clone, Default)]
pub struct Schemas {
    /// The Rust type of the payload, as `std::any::type_name` spells it.
    pub payload_type: &'static str,
    /// The payload's JSON Schema, when declared.
    pub payload: Option<SchemaFn>,
    /// The JSON Schema of what the handler publishes and answers with, when declared.
    pub reply: Option<SchemaFn>,
}

impl fmt::Debug for Schemas {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Schemas")
            .field("payload_type", &self.payload_type)
            .field("payload", &self.payload.is_some())
            .field("reply", &self.reply.is_some())
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
            && same(self.payload, other.payload)
            && same(self.reply, other.reply)
    }
}

impl Eq for Schemas {}

impl Schemas {
    /// The type of payload `T`, without a schema.
    pub fn of<T: ?Sized>() -> Self {
        Self {
            payload_type: std::any::type_name::<T>(),
            payload: None,
            reply: None,
        }
    }
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
