use std::fmt;
use std::marker::PhantomData;

use bytes::Bytes;
use serde::de::{self, DeserializeOwned, Deserializer, Visitor};
use serde::ser::{self, Impossible, Serialize, Serializer};

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
        value.serialize(Encoded).map_err(|e| EncodeError::new(e.0))
    }

    fn content_type(&self) -> &'static str {
        "application/protobuf"
    }
}

/// What went wrong (de)coding through serde.
#[derive(Debug)]
struct Failed(String);

impl fmt::Display for Failed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Failed {}

impl de::Error for Failed {
    fn custom<M: fmt::Display>(msg: M) -> Self {
        Self(msg.to_string())
    }
}

impl ser::Error for Failed {
    fn custom<M: fmt::Display>(msg: M) -> Self {
        Self(msg.to_string())
    }
}

/// The payload, handed to a `Proto<T>` as bytes.
struct Payload<'a>(&'a [u8]);

impl<'de> Deserializer<'de> for Payload<'_> {
    type Error = Failed;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Failed> {
        visitor.visit_bytes(self.0)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

/// Takes the bytes a `Proto<T>` serializes to; refuses anything else.
struct Encoded;

const ONLY_PROTO: &str = "the protobuf codec encodes `Proto<T>` values only (`T` a prost message): wrap the message, `Proto(message)`";

macro_rules! refuse {
    ($($name:ident($($arg:ty),*)),* $(,)?) => {
        $(fn $name(self, $(_: $arg),*) -> Result<Bytes, Failed> {
            Err(Failed(ONLY_PROTO.to_owned()))
        })*
    };
}

impl Serializer for Encoded {
    type Ok = Bytes;
    type Error = Failed;
    type SerializeSeq = Impossible<Bytes, Failed>;
    type SerializeTuple = Impossible<Bytes, Failed>;
    type SerializeTupleStruct = Impossible<Bytes, Failed>;
    type SerializeTupleVariant = Impossible<Bytes, Failed>;
    type SerializeMap = Impossible<Bytes, Failed>;
    type SerializeStruct = Impossible<Bytes, Failed>;
    type SerializeStructVariant = Impossible<Bytes, Failed>;

    fn serialize_bytes(self, v: &[u8]) -> Result<Bytes, Failed> {
        Ok(Bytes::copy_from_slice(v))
    }

    refuse! {
        serialize_bool(bool), serialize_i8(i8), serialize_i16(i16), serialize_i32(i32),
        serialize_i64(i64), serialize_u8(u8), serialize_u16(u16), serialize_u32(u32),
        serialize_u64(u64), serialize_f32(f32), serialize_f64(f64), serialize_char(char),
        serialize_str(&str), serialize_none(), serialize_unit(),
        serialize_unit_struct(&'static str),
        serialize_unit_variant(&'static str, u32, &'static str),
    }

    fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result<Bytes, Failed> {
        Err(Failed(ONLY_PROTO.to_owned()))
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: &T,
    ) -> Result<Bytes, Failed> {
        Err(Failed(ONLY_PROTO.to_owned()))
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<Bytes, Failed> {
        Err(Failed(ONLY_PROTO.to_owned()))
    }

    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, Failed> {
        Err(Failed(ONLY_PROTO.to_owned()))
    }

    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, Failed> {
        Err(Failed(ONLY_PROTO.to_owned()))
    }

    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, Failed> {
        Err(Failed(ONLY_PROTO.to_owned()))
    }

    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, Failed> {
        Err(Failed(ONLY_PROTO.to_owned()))
    }

    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, Failed> {
        Err(Failed(ONLY_PROTO.to_owned()))
    }

    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct, Failed> {
        Err(Failed(ONLY_PROTO.to_owned()))
    }

    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, Failed> {
        Err(Failed(ONLY_PROTO.to_owned()))
    }
}
