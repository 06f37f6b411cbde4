//! Inputs made from the whole delivery, not from its payload alone: a broker's change record
//! (a key-value change: the key from the subject, the revision from the stream, the operation
//! from a header, a value in the payload only for some operations).

use serde::de::DeserializeOwned;

use crate::codec::{DecodeError, Format};
use crate::delivery::Delivery;

/// A handler's input built from the delivery: its subject, headers and broker facts as well as
/// its payload. A payload that does not decode, or a delivery that is not of this kind, is a
/// [`DecodeError`], settled like an undecodable payload.
///
/// A `#[subscriber]` handler takes one as its first parameter when the type is one the macro
/// knows by name (`KvChange<T>` of `ruststream-nats`); a manual handler implements
/// `Handle<Self>` and mounts with its descriptor's `.handler(..)`.
///
/// ```
/// use ruststream::codec::{DecodeError, Format};
/// use ruststream::input::{FromDelivery, decode_payload};
/// use ruststream::Delivery;
///
/// /// A reading, tagged with the subject it came on.
/// struct Tagged {
///     subject: String,
///     value: u32,
/// }
///
/// impl FromDelivery for Tagged {
///     type Value = u32;
///
///     fn from_delivery(format: Format, delivery: &Delivery) -> Result<Self, DecodeError> {
///         Ok(Tagged {
///             subject: delivery.subject().to_owned(),
///             value: decode_payload(format, delivery)?,
///         })
///     }
/// }
///
/// let delivery = Delivery::new("sensors.a", bytes::Bytes::from_static(b"7"));
/// let tagged = Tagged::from_delivery(Format::Json, &delivery).expect("decodes");
/// assert_eq!((tagged.subject.as_str(), tagged.value), ("sensors.a", 7));
/// ```
pub trait FromDelivery: Sized + Send + Sync + 'static {
    /// The type a payload carries when it carries one: what the AsyncAPI document and
    /// `describe` show as the registration's payload.
    type Value: DeserializeOwned;

    /// The input, from `delivery`, its payload (where it has a value) in `format`.
    fn from_delivery(format: Format, delivery: &Delivery) -> Result<Self, DecodeError>;
}

/// `delivery`'s payload as a `T` in `format`, its `content-type` checked first: what a plain
/// `&T` handler gets, for a [`FromDelivery`] input's value.
pub fn decode_payload<T: DeserializeOwned + 'static>(
    format: Format,
    delivery: &Delivery,
) -> Result<T, DecodeError> {
    crate::codec::decode_delivery(format, delivery)
}
