//! A codec of the service's own as a [`Format`](super::Format): [`CustomCodec`], the codec
//! erased once where it was chosen (`Format::custom(&ACME)`), so that registrations, outputs,
//! `describe` and the AsyncAPI document use it as they use a built-in format.
//!
//! A user's codec has generic `decode<T>`/`encode<T>` methods, which a registration chosen for
//! a whole broker cannot call with its payload type. Encoding goes through `erased-serde`'s
//! `Serialize`. Decoding asks the codec for a [`Capture`], whose `Deserialize` impl reads the
//! payload type's own `Deserialize` (a function set on the thread for the duration of the call)
//! from the codec's deserializer: the codec drives its format, the payload type its shape.

use std::any::{Any, TypeId};
use std::cell::Cell;
use std::fmt;
use std::hash::{Hash, Hasher};

use bytes::Bytes;
use serde::de::{DeserializeOwned, Deserializer, Error as _};
use serde::{Deserialize, Serialize, Serializer};

use super::{Codec, DecodeError, EncodeError};

/// A codec of the service's own, as [`Format::Custom`](super::Format::Custom) holds it: made
/// with [`Format::custom`](super::Format::custom). Two are equal when they are of one Rust
/// type and name one content type.
#[derive(Clone, Copy)]
pub struct CustomCodec(&'static dyn Erased);

impl CustomCodec {
    /// `codec`, erased.
    pub(super) const fn new<C: Codec + Send + Sync + 'static>(codec: &'static C) -> Self {
        Self(codec)
    }

    /// The content type the codec reports.
    pub fn content_type(&self) -> &'static str {
        self.0.media_type()
    }

    /// The codec's Rust type, as `std::any::type_name` spells it.
    pub fn type_name(&self) -> &'static str {
        self.0.codec_name()
    }

    /// The payload as a `T`, through the codec's `decode`.
    pub(super) fn decode<T: DeserializeOwned + 'static>(
        &self,
        bytes: &[u8],
    ) -> Result<T, DecodeError> {
        let target = std::any::type_name::<T>();
        let decoded = self
            .0
            .decode_any(bytes, read::<T>)
            .map_err(|err| err.for_target(target))?;
        decoded.downcast::<T>().map(|value| *value).map_err(|_| {
            DecodeError::new(
                target,
                format!(
                    "the codec `{}` decoded its payload as another type; a codec decodes through the payload type's `Deserialize`",
                    self.type_name()
                ),
            )
        })
    }

    /// `value` as a payload, through the codec's `encode`.
    pub(super) fn encode<T: Serialize + ?Sized>(&self, value: &T) -> Result<Bytes, EncodeError> {
        self.0.encode_erased(&Ref(value))
    }
}

impl fmt::Debug for CustomCodec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("CustomCodec")
            .field(&self.type_name())
            .field(&self.content_type())
            .finish()
    }
}

impl PartialEq for CustomCodec {
    fn eq(&self, other: &Self) -> bool {
        self.0.codec_type() == other.0.codec_type() && self.content_type() == other.content_type()
    }
}

impl Eq for CustomCodec {}

impl Hash for CustomCodec {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.codec_type().hash(state);
        self.content_type().hash(state);
    }
}

/// Reads a `T` from a codec's deserializer, boxed: what [`Capture`] calls.
type ReadFn = for<'de> fn(
    &mut dyn erased_serde::Deserializer<'de>,
) -> Result<Box<dyn Any>, erased_serde::Error>;

fn read<T: DeserializeOwned + 'static>(
    deserializer: &mut dyn erased_serde::Deserializer<'_>,
) -> Result<Box<dyn Any>, erased_serde::Error> {
    erased_serde::deserialize::<T>(deserializer).map(|value| Box::new(value) as Box<dyn Any>)
}

thread_local! {
    /// What the codec's decode running on this thread reads: the payload type's `Deserialize`.
    static READ: Cell<Option<ReadFn>> = const { Cell::new(None) };
}

/// Puts back the function a decode replaced (a nested decode, or none), also on a panic.
struct Restore(Option<ReadFn>);

impl Drop for Restore {
    fn drop(&mut self) {
        READ.set(self.0);
    }
}

/// The value a user codec is asked to decode: the payload type's value, read through the
/// codec's deserializer.
struct Capture(Box<dyn Any>);

impl<'de> Deserialize<'de> for Capture {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let Some(read) = READ.get() else {
            return Err(D::Error::custom(
                "a RustStream codec must decode on the thread that called it",
            ));
        };
        let mut erased = <dyn erased_serde::Deserializer>::erase(deserializer);
        read(&mut erased).map(Capture).map_err(D::Error::custom)
    }
}

/// A borrowed value, sized, for `erased-serde`.
struct Ref<'a, T: ?Sized>(&'a T);

impl<T: Serialize + ?Sized> Serialize for Ref<'_, T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

/// The object-safe form of a [`Codec`].
trait Erased: Send + Sync {
    fn media_type(&self) -> &'static str;
    fn codec_type(&self) -> TypeId;
    fn codec_name(&self) -> &'static str;
    fn decode_any(&self, bytes: &[u8], read: ReadFn) -> Result<Box<dyn Any>, DecodeError>;
    fn encode_erased(&self, value: &dyn erased_serde::Serialize) -> Result<Bytes, EncodeError>;
}

impl<C: Codec + Send + Sync + 'static> Erased for C {
    fn media_type(&self) -> &'static str {
        Codec::content_type(self)
    }

    fn codec_type(&self) -> TypeId {
        TypeId::of::<C>()
    }

    fn codec_name(&self) -> &'static str {
        std::any::type_name::<C>()
    }

    fn decode_any(&self, bytes: &[u8], read: ReadFn) -> Result<Box<dyn Any>, DecodeError> {
        let _restore = Restore(READ.replace(Some(read)));
        Codec::decode::<Capture>(self, bytes).map(|captured| captured.0)
    }

    fn encode_erased(&self, value: &dyn erased_serde::Serialize) -> Result<Bytes, EncodeError> {
        Codec::encode(self, value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{Format, Json};

    /// JSON behind a version byte.
    struct Versioned;

    impl Codec for Versioned {
        fn decode<T: DeserializeOwned + 'static>(&self, bytes: &[u8]) -> Result<T, DecodeError> {
            match bytes.split_first() {
                Some((1, json)) => Json.decode(json),
                _ => Err(DecodeError::new(
                    std::any::type_name::<T>(),
                    "no version 1 byte",
                )),
            }
        }

        fn encode<T: Serialize + ?Sized>(&self, value: &T) -> Result<Bytes, EncodeError> {
            let mut out = vec![1];
            out.extend_from_slice(&Json.encode(value)?);
            Ok(Bytes::from(out))
        }

        fn content_type(&self) -> &'static str {
            "application/vnd.versioned+json"
        }
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Order {
        id: u64,
        lines: Vec<(String, u32)>,
    }

    #[test]
    fn a_custom_codec_round_trips_any_type_it_was_not_chosen_for() {
        let codec = Format::custom(&Versioned);
        let order = Order {
            id: 7,
            lines: vec![("tea".into(), 2)],
        };
        let bytes = codec.encode(&order).unwrap();
        assert_eq!(&bytes[..], b"\x01{\"id\":7,\"lines\":[[\"tea\",2]]}");
        assert_eq!(codec.decode::<Order>(&bytes).unwrap(), order);
        // Unsized values encode too.
        assert_eq!(&codec.encode("hi").unwrap()[..], b"\x01\"hi\"");
        assert_eq!(codec.content_type(), "application/vnd.versioned+json");
    }

    #[test]
    fn its_errors_name_the_payload_type_not_the_capture() {
        let codec = Format::custom(&Versioned);
        let err = codec.decode::<Order>(b"\x02{}").unwrap_err();
        assert_eq!(err.target(), std::any::type_name::<Order>());
        assert!(err.to_string().contains("no version 1 byte"), "{err}");
        let err = codec.decode::<Order>(b"\x01{\"id\":1}").unwrap_err();
        assert_eq!(err.target(), std::any::type_name::<Order>());
        assert!(err.to_string().contains("missing field `lines`"), "{err}");
    }

    #[test]
    fn a_decode_inside_a_decode_reads_its_own_type() {
        /// A payload whose `Deserialize` decodes a nested payload with the same codec.
        #[derive(Debug, PartialEq)]
        struct Outer(Order);

        impl<'de> Deserialize<'de> for Outer {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let inner: Vec<u8> = Vec::deserialize(d)?;
                Format::custom(&Versioned)
                    .decode::<Order>(&inner)
                    .map(Outer)
                    .map_err(D::Error::custom)
            }
        }

        let codec = Format::custom(&Versioned);
        let order = Order {
            id: 1,
            lines: vec![],
        };
        let inner = codec.encode(&order).unwrap().to_vec();
        let outer = codec.encode(&inner).unwrap();
        assert_eq!(codec.decode::<Outer>(&outer).unwrap(), Outer(order));
        assert!(READ.get().is_none(), "the thread is left as it was");
    }

    #[test]
    fn equal_by_type_and_content_type() {
        assert_eq!(Format::custom(&Versioned), Format::custom(&Versioned));
        assert_ne!(Format::custom(&Versioned), Format::custom(&Json));
        assert_ne!(Format::custom(&Json), Format::Json);
        assert_eq!(
            format!("{:?}", Format::custom(&Versioned)),
            format!(
                "Custom(CustomCodec({:?}, \"application/vnd.versioned+json\"))",
                std::any::type_name::<Versioned>()
            )
        );
    }
}
