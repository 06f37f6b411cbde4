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

/// MessagePack through `rmp-serde` (feature `msgpack`): structs as maps, so fields may be
/// added and reordered as with JSON.
#[cfg(feature = "msgpack")]
#[derive(Debug, Clone, Copy, Default)]
pub struct MessagePack;

#[cfg(feature = "msgpack")]
impl Codec for MessagePack {
    fn decode<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, DecodeError> {
        rmp_serde::from_slice(bytes)
            .map_err(|e| DecodeError::new(std::any::type_name::<T>(), e.to_string()))
    }

    fn encode<T: Serialize + ?Sized>(&self, value: &T) -> Result<Bytes, EncodeError> {
        rmp_serde::to_vec_named(value)
            .map(Bytes::from)
            .map_err(|e| EncodeError::new(e.to_string()))
    }

    fn content_type(&self) -> &'static str {
        "application/msgpack"
    }
}

/// CBOR through `ciborium` (feature `cbor`).
#[cfg(feature = "cbor")]
#[derive(Debug, Clone, Copy, Default)]
pub struct Cbor;

#[cfg(feature = "cbor")]
impl Codec for Cbor {
    fn decode<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, DecodeError> {
        ciborium::from_reader(bytes)
            .map_err(|e| DecodeError::new(std::any::type_name::<T>(), e.to_string()))
    }

    fn encode<T: Serialize + ?Sized>(&self, value: &T) -> Result<Bytes, EncodeError> {
        let mut out = Vec::new();
        ciborium::into_writer(value, &mut out)
            .map(|()| Bytes::from(out))
            .map_err(|e| EncodeError::new(e.to_string()))
    }

    fn content_type(&self) -> &'static str {
        "application/cbor"
    }
}

/// The header naming a payload's format, written on outputs and read on inputs.
pub const CONTENT_TYPE: &str = "content-type";

/// The wire format a registration, a broker or an app decodes and encodes with: one of the
/// codecs above, chosen at the mount site (`.codec(Format::Cbor)`), for a whole broker
/// (`b.codec(..)` in `with_broker`) or for the app (`RustStream::codec`). JSON by default.
///
/// ```
/// use ruststream::codec::{Codec, Format};
///
/// let bytes = Format::Json.encode(&(1, "one")).unwrap();
/// assert_eq!(Format::Json.content_type(), "application/json");
/// assert_eq!(Format::from_content_type("application/json"), Some(Format::Json));
/// let back: (u32, String) = Format::Json.decode(&bytes).unwrap();
/// assert_eq!(back, (1, "one".to_owned()));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Format {
    /// JSON ([`Json`]).
    #[default]
    Json,
    /// MessagePack ([`MessagePack`], feature `msgpack`).
    #[cfg(feature = "msgpack")]
    MessagePack,
    /// CBOR ([`Cbor`], feature `cbor`).
    #[cfg(feature = "cbor")]
    Cbor,
}

impl Format {
    /// The format a `content-type` value names, if it is one of the compiled-in formats.
    /// Parameters (`; charset=utf-8`) and case are ignored.
    pub fn from_content_type(value: &str) -> Option<Self> {
        let essence = value.split(';').next().unwrap_or("").trim();
        [
            Self::Json,
            #[cfg(feature = "msgpack")]
            Self::MessagePack,
            #[cfg(feature = "cbor")]
            Self::Cbor,
        ]
        .into_iter()
        .find(|f| f.content_type().eq_ignore_ascii_case(essence))
    }

    /// Checks the `content-type` a message arrived with against this format: a message that
    /// names none is taken as this format; one that names another cannot be decoded here.
    pub fn accepts(&self, content_type: Option<&str>) -> Result<(), DecodeError> {
        match content_type {
            None => Ok(()),
            Some(value) => {
                let essence = value.split(';').next().unwrap_or("").trim();
                if essence.eq_ignore_ascii_case(self.content_type()) {
                    Ok(())
                } else {
                    Err(DecodeError::new(
                        "the registration's format",
                        format!(
                            "the message says content-type `{}` and this registration decodes `{}`; publish it as `{}`, or choose its format with `.codec(..)` at the mount site",
                            shown(value),
                            self.content_type(),
                            self.content_type()
                        ),
                    ))
                }
            }
        }
    }
}

impl Codec for Format {
    fn decode<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, DecodeError> {
        match self {
            Self::Json => Json.decode(bytes),
            #[cfg(feature = "msgpack")]
            Self::MessagePack => MessagePack.decode(bytes),
            #[cfg(feature = "cbor")]
            Self::Cbor => Cbor.decode(bytes),
        }
    }

    fn encode<T: Serialize + ?Sized>(&self, value: &T) -> Result<Bytes, EncodeError> {
        match self {
            Self::Json => Json.encode(value),
            #[cfg(feature = "msgpack")]
            Self::MessagePack => MessagePack.encode(value),
            #[cfg(feature = "cbor")]
            Self::Cbor => Cbor.encode(value),
        }
    }

    fn content_type(&self) -> &'static str {
        match self {
            Self::Json => Json.content_type(),
            #[cfg(feature = "msgpack")]
            Self::MessagePack => MessagePack.content_type(),
            #[cfg(feature = "cbor")]
            Self::Cbor => Cbor.content_type(),
        }
    }
}

/// The `content-type` of `headers`, the header's name compared without case.
pub fn content_type_of(headers: &crate::Headers) -> Option<&str> {
    headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(CONTENT_TYPE))
        .map(|(_, value)| value)
}

/// A header value as a log shows it: escaped, cut to 64 characters.
fn shown(value: &str) -> String {
    let mut out: String = value.escape_debug().take(64).collect();
    if value.escape_debug().nth(64).is_some() {
        out.push_str("...");
    }
    out
}

/// `delivery`'s payload as an `In`, in `format`, after its `content-type` was checked.
pub(crate) fn decode_delivery<In: DeserializeOwned>(
    format: Format,
    delivery: &crate::Delivery,
) -> Result<In, DecodeError> {
    format.accepts(content_type_of(delivery.headers()))?;
    format.decode(delivery.payload())
}
