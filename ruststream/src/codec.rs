//! How payloads become values and values become payloads. JSON unless told otherwise.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use serde::Serialize;

use serde::de::DeserializeOwned;

pub use crate::error::{DecodeError, EncodeError};

/// A wire format for payloads: the built-in ones ([`Json`], [`MessagePack`], [`Cbor`],
/// [`Protobuf`], [`Raw`]) and a service's own, chosen with [`Format::custom`].
///
/// ```
/// use ruststream::codec::{Codec, Json};
///
/// let bytes = Json.encode(&vec![1, 2, 3]).unwrap();
/// let back: Vec<u8> = Json.decode(&bytes).unwrap();
/// assert_eq!(back, [1, 2, 3]);
/// ```
///
/// A codec of your own decodes through the payload type's `Deserialize` and encodes through
/// its `Serialize` (`docs/codecs.md`, "Your own codec").
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a codec",
    note = "implement `ruststream::codec::Codec` for it (`decode`, `encode`, `content_type`), then choose it with `.codec(Format::custom(&CODEC))`"
)]
pub trait Codec {
    /// The payload as a `T`.
    fn decode<T: DeserializeOwned + 'static>(&self, bytes: &[u8]) -> Result<T, DecodeError>;
    /// `value` as a payload.
    fn encode<T: Serialize + ?Sized>(&self, value: &T) -> Result<Bytes, EncodeError>;
    /// The MIME type of the format, as a `Content-Type` header would say it.
    fn content_type(&self) -> &'static str;
}

/// JSON through `serde_json`, the default codec.
#[derive(Debug, Clone, Copy, Default)]
pub struct Json;

impl Codec for Json {
    fn decode<T: DeserializeOwned + 'static>(&self, bytes: &[u8]) -> Result<T, DecodeError> {
        serde_json::from_slice(bytes).map_err(|e| DecodeError::new(std::any::type_name::<T>(), e))
    }

    fn encode<T: Serialize + ?Sized>(&self, value: &T) -> Result<Bytes, EncodeError> {
        serde_json::to_vec(value)
            .map(Bytes::from)
            .map_err(EncodeError::new)
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
    fn decode<T: DeserializeOwned + 'static>(&self, bytes: &[u8]) -> Result<T, DecodeError> {
        rmp_serde::from_slice(bytes).map_err(|e| DecodeError::new(std::any::type_name::<T>(), e))
    }

    fn encode<T: Serialize + ?Sized>(&self, value: &T) -> Result<Bytes, EncodeError> {
        rmp_serde::to_vec_named(value)
            .map(Bytes::from)
            .map_err(EncodeError::new)
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
    fn decode<T: DeserializeOwned + 'static>(&self, bytes: &[u8]) -> Result<T, DecodeError> {
        ciborium::from_reader(bytes).map_err(|e| DecodeError::new(std::any::type_name::<T>(), e))
    }

    fn encode<T: Serialize + ?Sized>(&self, value: &T) -> Result<Bytes, EncodeError> {
        let mut out = Vec::new();
        ciborium::into_writer(value, &mut out)
            .map(|()| Bytes::from(out))
            .map_err(EncodeError::new)
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
    /// Protocol Buffers ([`Protobuf`], feature `protobuf`), for `Proto<T>` payloads.
    #[cfg(feature = "protobuf")]
    Protobuf,
    /// The payload as it is ([`Raw`]): bytes, a sequence of `u8` or text.
    Raw,
    /// A codec of the service's own ([`Format::custom`]).
    Custom(CustomCodec),
}

impl Format {
    /// A codec of the service's own as a format, chosen like a built-in one: at the mount site
    /// (`.codec(Format::custom(&ACME))`), for a broker, for the app, or for an outgoing type
    /// (`#[outgoing(name = "..", codec = Format::custom(&ACME))]`). Its
    /// [`content_type`](Codec::content_type) is written on outputs, checked on inputs and
    /// named by the AsyncAPI document.
    ///
    /// The codec lives as long as the program: a `static`, a unit struct (`&Acme` is then a
    /// constant), or one built at startup and leaked (`Box::leak`), once.
    pub const fn custom<C: Codec + Send + Sync + 'static>(codec: &'static C) -> Self {
        Self::Custom(CustomCodec::new(codec))
    }

    /// The `content-type` header naming this format, as the shared strings
    /// [`Headers`](crate::Headers) holds: made once per process, so that writing it on every
    /// output clones two `Arc`s instead of allocating two strings.
    pub(crate) fn content_type_header(self) -> (Arc<str>, Arc<str>) {
        static NAME: OnceLock<Arc<str>> = OnceLock::new();
        static VALUES: [OnceLock<Arc<str>>; 5] = [const { OnceLock::new() }; 5];
        let slot = match self {
            Self::Json => 0,
            #[cfg(feature = "msgpack")]
            Self::MessagePack => 1,
            #[cfg(feature = "cbor")]
            Self::Cbor => 2,
            #[cfg(feature = "protobuf")]
            Self::Protobuf => 3,
            Self::Raw => 4,
            // The codec's own string: one allocation per output, for a codec of the service's.
            Self::Custom(codec) => {
                return (
                    Arc::clone(NAME.get_or_init(|| Arc::from(CONTENT_TYPE))),
                    Arc::from(codec.content_type()),
                );
            }
        };
        (
            Arc::clone(NAME.get_or_init(|| Arc::from(CONTENT_TYPE))),
            Arc::clone(VALUES[slot].get_or_init(|| Arc::from(self.content_type()))),
        )
    }

    /// The format a `content-type` value names, if it is one of the compiled-in formats (a
    /// codec of the service's own is never found here: it is chosen, not guessed).
    /// Parameters (`; charset=utf-8`) and case are ignored.
    pub fn from_content_type(value: &str) -> Option<Self> {
        let essence = value.split(';').next().unwrap_or("").trim();
        [
            Self::Json,
            #[cfg(feature = "msgpack")]
            Self::MessagePack,
            #[cfg(feature = "cbor")]
            Self::Cbor,
            #[cfg(feature = "protobuf")]
            Self::Protobuf,
            Self::Raw,
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
    fn decode<T: DeserializeOwned + 'static>(&self, bytes: &[u8]) -> Result<T, DecodeError> {
        match self {
            Self::Json => Json.decode(bytes),
            #[cfg(feature = "msgpack")]
            Self::MessagePack => MessagePack.decode(bytes),
            #[cfg(feature = "cbor")]
            Self::Cbor => Cbor.decode(bytes),
            #[cfg(feature = "protobuf")]
            Self::Protobuf => Protobuf.decode(bytes),
            Self::Raw => Raw.decode(bytes),
            Self::Custom(codec) => codec.decode(bytes),
        }
    }

    fn encode<T: Serialize + ?Sized>(&self, value: &T) -> Result<Bytes, EncodeError> {
        match self {
            Self::Json => Json.encode(value),
            #[cfg(feature = "msgpack")]
            Self::MessagePack => MessagePack.encode(value),
            #[cfg(feature = "cbor")]
            Self::Cbor => Cbor.encode(value),
            #[cfg(feature = "protobuf")]
            Self::Protobuf => Protobuf.encode(value),
            Self::Raw => Raw.encode(value),
            Self::Custom(codec) => codec.encode(value),
        }
    }

    fn content_type(&self) -> &'static str {
        match self {
            Self::Json => Json.content_type(),
            #[cfg(feature = "msgpack")]
            Self::MessagePack => MessagePack.content_type(),
            #[cfg(feature = "cbor")]
            Self::Cbor => Cbor.content_type(),
            #[cfg(feature = "protobuf")]
            Self::Protobuf => Protobuf.content_type(),
            Self::Raw => Raw.content_type(),
            Self::Custom(codec) => codec.content_type(),
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

/// `delivery`'s payload as an `In`, in `format`, after its `content-type` was checked; the value
/// [`keep_decoded`] kept in `delivery` when there is one (taken: a second decode decodes again).
pub(crate) fn decode_delivery<In: DeserializeOwned + 'static>(
    format: Format,
    delivery: &crate::Delivery,
) -> Result<In, DecodeError> {
    if let Some(kept) = delivery.extensions().find::<Kept<In>>()
        && let Some(value) = kept.take(delivery.payload())
    {
        return Ok(value);
    }
    decode_payload(format, delivery)
}

/// [`decode_delivery`] without the kept value: the payload decoded afresh.
pub(crate) fn decode_payload<In: DeserializeOwned + 'static>(
    format: Format,
    delivery: &crate::Delivery,
) -> Result<In, DecodeError> {
    format.accepts(content_type_of(delivery.headers()))?;
    format.decode(delivery.payload())
}

/// Keeps `value`, decoded from `delivery`'s payload by [`decode_delivery`] before the handler
/// ran (an ordering lane's key), for the handler's own decode of the same type: the payload is
/// decoded once, not twice.
pub(crate) fn keep_decoded<T: Send + 'static>(delivery: &mut crate::Delivery, value: T) {
    let kept = Kept {
        payload: delivery.payload().clone(),
        value: std::sync::Mutex::new(Some(value)),
    };
    delivery.extensions_mut().insert(kept);
}

/// A payload's value decoded ahead of the handler ([`keep_decoded`]), and the very bytes it was
/// decoded from: taken once, and only by a delivery that still carries those bytes.
struct Kept<T> {
    payload: Bytes,
    value: std::sync::Mutex<Option<T>>,
}

impl<T> Kept<T> {
    fn take(&self, payload: &Bytes) -> Option<T> {
        // The same allocation and length (held by `self.payload`, so it cannot be reused).
        if self.payload.as_ptr() != payload.as_ptr() || self.payload.len() != payload.len() {
            return None;
        }
        self.value
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
}

pub use custom::CustomCodec;
#[cfg(feature = "protobuf")]
pub use protobuf::{Proto, Protobuf};
pub use raw::Raw;

/// A codec of the service's own as a format ([`Format::custom`]).
mod custom;
/// Raw bytes (`application/octet-stream`), and the bytes-only serde plumbing the protobuf codec
/// shares.
mod raw;

/// Protocol Buffers through `prost` (feature `protobuf`). `prost` messages are not serde
/// types: a payload is written `Proto<Message>`, which only this codec decodes and encodes.
#[cfg(feature = "protobuf")]
mod protobuf;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_value_is_only_for_the_bytes_it_was_decoded_from() {
        let kept = Kept {
            payload: Bytes::from(b"{}".to_vec()),
            value: std::sync::Mutex::new(Some(1)),
        };
        // The same text in other bytes, or part of the same bytes: decoded as usual.
        assert_eq!(kept.take(&Bytes::from(b"{}".to_vec())), None);
        assert_eq!(kept.take(&kept.payload.slice(..1)), None);
        // The bytes it was decoded from: taken, once.
        assert_eq!(kept.take(&kept.payload.clone()), Some(1));
        assert_eq!(kept.take(&kept.payload.clone()), None);
    }
}
