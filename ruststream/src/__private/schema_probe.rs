//! The schema probe `#[derive(Outgoing)]` expands to.

use serde::de::DeserializeOwned;

/// The schema `#[derive(Outgoing)]` gives a type, chosen at the derive site by autoref: the
/// type's `schemars::JsonSchema` when it implements it, else its traced `Deserialize` impl,
/// else none. Called as `(&&&SchemaProbe::<T>::new()).schema()` with the three traits in scope.
pub struct SchemaProbe<T: ?Sized>(std::marker::PhantomData<fn() -> Box<T>>);

impl<T: ?Sized> SchemaProbe<T> {
    /// The probe of `T`.
    pub fn new() -> Self {
        Self(std::marker::PhantomData)
    }
}

impl<T: ?Sized> Default for SchemaProbe<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// The first choice: the type's own `schemars::JsonSchema`.
pub trait SchemaFromJsonSchema {
    /// The schema.
    fn schema(&self) -> Option<serde_json::Value>;
}

impl<T: schemars::JsonSchema> SchemaFromJsonSchema for &&SchemaProbe<T> {
    fn schema(&self) -> Option<serde_json::Value> {
        crate::registration::declared_schema::<T>()
    }
}

/// The second choice: traced from the type's `Deserialize` impl.
pub trait SchemaFromDeserialize {
    /// The schema.
    fn schema(&self) -> Option<serde_json::Value>;
}

impl<T: DeserializeOwned> SchemaFromDeserialize for &SchemaProbe<T> {
    fn schema(&self) -> Option<serde_json::Value> {
        crate::registration::traced_schema::<T>()
    }
}

/// The last: no schema.
pub trait SchemaUnknown {
    /// `None`.
    fn schema(&self) -> Option<serde_json::Value>;
}

impl<T: ?Sized> SchemaUnknown for SchemaProbe<T> {
    fn schema(&self) -> Option<serde_json::Value> {
        None
    }
}
