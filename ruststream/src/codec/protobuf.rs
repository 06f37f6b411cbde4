use std::fmt;
use std::marker::PhantomData;

use bytes::Bytes;
use serde::de::{self, DeserializeOwned, Deserializer, Visitor};
use serde::ser::{Serialize, Serializer};

use super::raw::{Encoded, Payload};
use super::{Codec, DecodeError, EncodeError};

/// A Protocol Buffers message as a payload: a handler takes `&Proto<Order>`, a handler
/// publishes `Proto(receipt)` (with `ctx.publish_to`), in a registration whose format is
/// [`Format::Protobuf`](super::Format::Protobuf).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Proto<T>(pub T);

impl<T> std::ops::Deref for Proto<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<'de, T: prost::Message + Default> serde::Deserialize<'de> for Proto<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Message<T>(PhantomData<T>);

        impl<T: prost::Message + Default> Visitor<'_> for Message<T> {
            type Value = Proto<T>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a Protocol Buffers message, decoded by the protobuf codec")
            }

            fn visit_bytes<E: de::Error>(self, bytes: &[u8]) -> Result<Proto<T>, E> {
                T::decode(bytes).map(Proto).map_err(E::custom)
            }
        }

        deserializer.deserialize_bytes(Message(PhantomData))
    }
}

impl<T: prost::Message> Serialize for Proto<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(&self.0.encode_to_vec())
    }
}

/// Protocol Buffers, for `Proto<T>` payloads: `application/protobuf`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Protobuf;

impl Codec for Protobuf {
    fn decode<T: DeserializeOwned + 'static>(&self, bytes: &[u8]) -> Result<T, DecodeError> {
        T::deserialize(Payload(bytes)).map_err(|e| {
            DecodeError::new(
                std::any::type_name::<T>(),
                format!(
                    "{e} (the protobuf codec decodes `Proto<T>` payloads, `T` a prost message)"
                ),
            )
        })
    }

    fn encode<T: Serialize + ?Sized>(&self, value: &T) -> Result<Bytes, EncodeError> {
        value
            .serialize(Encoded::bytes_only(ONLY_PROTO))
            .map_err(|e| EncodeError::new(e.0))
    }

    fn content_type(&self) -> &'static str {
        "application/protobuf"
    }
}

const ONLY_PROTO: &str = "the protobuf codec encodes `Proto<T>` values only (`T` a prost message): wrap the message, `Proto(message)`";
