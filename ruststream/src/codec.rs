//! How payloads become values and values become payloads. JSON unless told otherwise.

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// A payload that did not decode into the handler's type.
#[derive(Debug, thiserror::Error)]
#[error("the payload does not decode as {target}: {reason}")]
pub struct DecodeError {
    target: &'static str,
    reason: String,
}

impl DecodeError {
    /// A decode error for the type named `target`.
    pub fn new(target: &'static str, reason: impl Into<String>) -> Self {
        Self {
            target,
            reason: reason.into(),
        }
    }

    /// The type the payload was meant to become.
    pub fn target(&self) -> &'static str {
        self.target
    }
}

/// A value that could not be encoded.
#[derive(Debug, thiserror::Error)]
#[error("the value does not encode: {0}")]
pub struct EncodeError(String);

impl EncodeError {
    /// An encode error with a reason.
    pub fn new(reason: impl Into<String>) -> Self {
        Self(reason.into())
    }
}

/// A wire format for payloads.
///
/// ```
/// use ruststream::codec::{Codec, Json};
///
/// let bytes = Json.encode(&vec![1, 2, 3]).unwrap();
/// let back: Vec<u8> = Json.decode(&bytes).unwrap();
/// assert_eq!(back, [1, 2, 3]);
/// ```
pub trait Codec: Send + Sync + 'static {
    /// The payload as a `T`.
    fn decode<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, DecodeError>;
    /// `value` as a payload.
    fn encode<T: Serialize + ?Sized>(&self, value: &T) -> Result<Bytes, EncodeError>;
    /// The MIME type of the format, as a `Content-Type` header would say it.
    fn content_type(&self) -> &'static str;
}

/// JSON through `serde_json`, the default codec.
#[derive(Debug, Clone, Copy, Default)]
pub struct Json;

impl Codec for Json {
    fn decode<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, DecodeError> {
        serde_json::from_slice(bytes)
            .map_err(|e| DecodeError::new(std::any::type_name::<T>(), e.to_string()))
    }

    fn encode<T: Serialize + ?Sized>(&self, value: &T) -> Result<Bytes, EncodeError> {
        serde_json::to_vec(value)
            .map(Bytes::from)
            .map_err(|e| EncodeError::new(e.to_string()))
    }

    fn content_type(&self) -> &'static str {
        "application/json"
    }
}
