//! Raw bytes as a codec ([`Raw`], `application/octet-stream`), and the bytes-only serde plumbing
//! it shares with the protobuf codec: a payload handed over as bytes, a value taken as the bytes
//! it serializes to.

use std::fmt;

use bytes::Bytes;
use serde::de::{self, DeserializeOwned, Deserializer, IntoDeserializer, Visitor};
use serde::ser::{self, Impossible, Serialize, SerializeSeq, Serializer};

use super::{Codec, DecodeError, EncodeError};

/// The payload as it is: `application/octet-stream`. A payload decodes into a type that takes
/// bytes (`Vec<u8>`, `bytes::Bytes`, `serde_bytes::ByteBuf`) or, when it is UTF-8, a `String`;
/// a value encodes when it serializes as bytes, a sequence of `u8` or a string (newtypes of
/// those included).
///
/// ```
/// use ruststream::codec::{Codec, Raw};
///
/// let bytes = Raw.encode(&vec![0xffu8, 0x00]).unwrap();
/// assert_eq!(&bytes[..], [0xff, 0x00]);
/// let back: Vec<u8> = Raw.decode(&bytes).unwrap();
/// assert_eq!(back, [0xff, 0x00]);
/// assert!(Raw.encode(&(1, 2)).is_err());
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Raw;

const ONLY_BYTES: &str = "the raw codec encodes bytes, a sequence of `u8` or a string (`Vec<u8>`, `bytes::Bytes`, `String`), or a newtype of one";

impl Codec for Raw {
    fn decode<T: DeserializeOwned + 'static>(&self, bytes: &[u8]) -> Result<T, DecodeError> {
        T::deserialize(Payload(bytes)).map_err(|e| {
            DecodeError::new(
                std::any::type_name::<T>(),
                format!(
                    "{e} (the raw codec hands the payload over as bytes: take `Vec<u8>`, `bytes::Bytes` or a `String`)"
                ),
            )
        })
    }

    fn encode<T: Serialize + ?Sized>(&self, value: &T) -> Result<Bytes, EncodeError> {
        value
            .serialize(Encoded::raw())
            .map_err(|e| EncodeError::new(e.0))
    }

    fn content_type(&self) -> &'static str {
        "application/octet-stream"
    }
}

/// What went wrong (de)coding through serde.
#[derive(Debug)]
pub(super) struct Failed(pub(super) String);

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

/// The payload, handed over as bytes (as a sequence of `u8` to a `Vec<u8>`, as text to a
/// `String` when it is UTF-8).
pub(super) struct Payload<'a>(pub(super) &'a [u8]);

impl<'de> Deserializer<'de> for Payload<'_> {
    type Error = Failed;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Failed> {
        visitor.visit_bytes(self.0)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Failed> {
        visitor.visit_seq(de::value::SeqDeserializer::new(
            self.0.iter().map(|b| b.into_deserializer()),
        ))
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Failed> {
        match std::str::from_utf8(self.0) {
            Ok(text) => visitor.visit_str(text),
            Err(e) => Err(Failed(format!("the payload is not UTF-8 text: {e}"))),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Failed> {
        self.deserialize_str(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        visitor: V,
    ) -> Result<V::Value, Failed> {
        visitor.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char
        bytes byte_buf option unit unit_struct tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

/// Takes the bytes a value serializes to; refuses anything else with `refusal`. The raw codec
/// also takes text, sequences of `u8` and newtypes; the protobuf codec takes bytes only.
#[derive(Clone, Copy)]
pub(super) struct Encoded {
    refusal: &'static str,
    lenient: bool,
    /// Inside a sequence: one `u8`.
    element: bool,
}

impl Encoded {
    /// Bytes only (what `Proto<T>` serializes to), refused with `refusal` otherwise.
    #[cfg(feature = "protobuf")]
    pub(super) fn bytes_only(refusal: &'static str) -> Self {
        Self {
            refusal,
            lenient: false,
            element: false,
        }
    }

    fn raw() -> Self {
        Self {
            refusal: ONLY_BYTES,
            lenient: true,
            element: false,
        }
    }

    fn refuse<T>(self) -> Result<T, Failed> {
        Err(Failed(self.refusal.to_owned()))
    }
}

macro_rules! refuse {
    ($($name:ident($($arg:ty),*)),* $(,)?) => {
        $(fn $name(self, $(_: $arg),*) -> Result<Bytes, Failed> {
            self.refuse()
        })*
    };
}

/// A sequence of `u8`, collected.
pub(super) struct Collect(Encoded, Vec<u8>);

impl SerializeSeq for Collect {
    type Ok = Bytes;
    type Error = Failed;

    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Failed> {
        let byte = value.serialize(Encoded {
            element: true,
            ..self.0
        })?;
        self.1.extend_from_slice(&byte);
        Ok(())
    }

    fn end(self) -> Result<Bytes, Failed> {
        Ok(Bytes::from(self.1))
    }
}

impl Serializer for Encoded {
    type Ok = Bytes;
    type Error = Failed;
    type SerializeSeq = Collect;
    type SerializeTuple = Impossible<Bytes, Failed>;
    type SerializeTupleStruct = Impossible<Bytes, Failed>;
    type SerializeTupleVariant = Impossible<Bytes, Failed>;
    type SerializeMap = Impossible<Bytes, Failed>;
    type SerializeStruct = Impossible<Bytes, Failed>;
    type SerializeStructVariant = Impossible<Bytes, Failed>;

    fn serialize_bytes(self, v: &[u8]) -> Result<Bytes, Failed> {
        if self.element {
            return self.refuse();
        }
        Ok(Bytes::copy_from_slice(v))
    }

    fn serialize_str(self, v: &str) -> Result<Bytes, Failed> {
        if !self.lenient || self.element {
            return self.refuse();
        }
        Ok(Bytes::copy_from_slice(v.as_bytes()))
    }

    fn serialize_u8(self, v: u8) -> Result<Bytes, Failed> {
        if !self.element {
            return self.refuse();
        }
        Ok(Bytes::copy_from_slice(&[v]))
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<Bytes, Failed> {
        if !self.lenient {
            return self.refuse();
        }
        value.serialize(self)
    }

    fn serialize_seq(self, len: Option<usize>) -> Result<Collect, Failed> {
        if !self.lenient || self.element {
            return self.refuse();
        }
        Ok(Collect(self, Vec::with_capacity(len.unwrap_or(0))))
    }

    refuse! {
        serialize_bool(bool), serialize_i8(i8), serialize_i16(i16), serialize_i32(i32),
        serialize_i64(i64), serialize_u16(u16), serialize_u32(u32),
        serialize_u64(u64), serialize_f32(f32), serialize_f64(f64), serialize_char(char),
        serialize_none(), serialize_unit(),
        serialize_unit_struct(&'static str),
        serialize_unit_variant(&'static str, u32, &'static str),
    }

    fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result<Bytes, Failed> {
        self.refuse()
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<Bytes, Failed> {
        self.refuse()
    }

    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, Failed> {
        self.refuse()
    }

    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, Failed> {
        self.refuse()
    }

    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, Failed> {
        self.refuse()
    }

    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, Failed> {
        self.refuse()
    }

    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct, Failed> {
        self.refuse()
    }

    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, Failed> {
        self.refuse()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Thumbnail(Vec<u8>);

    #[test]
    fn bytes_sequences_text_and_newtypes_pass_as_they_are() {
        let payload = [0xffu8, 0x00, b'{'];
        assert_eq!(&Raw.encode(&payload.to_vec()).unwrap()[..], payload);
        assert_eq!(
            &Raw.encode(&Bytes::copy_from_slice(&payload)).unwrap()[..],
            payload
        );
        assert_eq!(&Raw.encode("héllo").unwrap()[..], "héllo".as_bytes());
        assert_eq!(
            &Raw.encode(&Thumbnail(payload.to_vec())).unwrap()[..],
            payload
        );
        assert_eq!(Raw.decode::<Vec<u8>>(&payload).unwrap(), payload);
        assert_eq!(Raw.decode::<Bytes>(&payload).unwrap(), &payload[..]);
        assert_eq!(
            Raw.decode::<Thumbnail>(&payload).unwrap(),
            Thumbnail(payload.to_vec())
        );
        assert_eq!(Raw.decode::<String>(b"text").unwrap(), "text");
    }

    #[test]
    fn anything_else_is_refused_with_what_to_take() {
        let err = Raw.encode(&(1u32, "x")).unwrap_err().to_string();
        assert!(err.contains("the raw codec encodes bytes"), "{err}");
        let err = Raw.encode(&vec![300u16]).unwrap_err().to_string();
        assert!(err.contains("the raw codec encodes bytes"), "{err}");
        let err = Raw.decode::<String>(&[0xff]).unwrap_err().to_string();
        assert!(err.contains("not UTF-8"), "{err}");
        #[derive(Debug, serde::Deserialize)]
        struct Order {
            _id: u64,
        }
        let err = Raw.decode::<Order>(b"{}").unwrap_err().to_string();
        assert!(err.contains("take `Vec<u8>`"), "{err}");
    }
}
