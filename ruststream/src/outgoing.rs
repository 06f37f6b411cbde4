//! Messages that know where they are published: `#[derive(Outgoing)]`.

use std::borrow::Cow;

use bytes::Bytes;
use serde::Serialize;

use crate::codec::{Codec, EncodeError, Format, Json};
use crate::error::PublishError;

/// A message type that knows its subject and its encoding.
///
/// Derive it with `#[derive(Outgoing)]` and `#[outgoing(name = "subject")]`:
///
/// ```
/// use ruststream::Outgoing;
/// use serde::Serialize;
///
/// #[derive(Serialize, Outgoing)]
/// #[outgoing(name = "payments.captured")]
/// struct Captured {
///     payment: u64,
/// }
///
/// assert_eq!(Captured::SUBJECT, "payments.captured");
/// assert_eq!(&Captured { payment: 7 }.encode().unwrap()[..], br#"{"payment":7}"#);
/// ```
///
/// A subject computed at run time: placeholders, each a whole token, filled from the fields of
/// the same name, checked before anything is published.
///
/// ```
/// use ruststream::{Outgoing, PublishErrorKind};
/// use serde::Serialize;
///
/// #[derive(Serialize, Outgoing)]
/// #[outgoing(name = "orders.{tenant}.placed")]
/// struct Placed {
///     tenant: String,
///     order: u64,
/// }
///
/// let placed = Placed { tenant: "acme".into(), order: 7 };
/// assert_eq!(placed.subject().unwrap(), "orders.acme.placed");
/// let forged = Placed { tenant: "acme.>".into(), order: 7 };
/// assert_eq!(forged.subject().unwrap_err().kind(), PublishErrorKind::InvalidSubject);
/// ```
///
/// A placeholder must name a field (the error lists them), and fill a whole token:
///
/// ```compile_fail
/// use ruststream::Outgoing;
///
/// #[derive(serde::Serialize, Outgoing)]
/// #[outgoing(name = "orders.{tenant}.placed")]
/// struct Placed {
///     customer: String,
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an outgoing message",
    label = "does not know where it is published",
    note = "derive it: `#[derive(Serialize, Outgoing)]` with `#[outgoing(name = \"subject\")]` on the type"
)]
pub trait Outgoing: Serialize + Send + Sync {
    /// The subject the message is published to; for a template
    /// (`#[outgoing(name = "orders.{tenant}.placed")]`), the template.
    const SUBJECT: &'static str;

    /// The subject this value is published to: [`Outgoing::SUBJECT`], or the template filled
    /// from the value's fields. An error of kind `InvalidSubject` when a field's value cannot
    /// be a token of a subject (empty, or with `.`, `*`, `>` or white space).
    fn subject(&self) -> Result<Cow<'_, str>, PublishError> {
        Ok(Cow::Borrowed(Self::SUBJECT))
    }

    /// The format this type is always published in, whatever registration publishes it:
    /// `#[outgoing(name = "..", codec = Format::Cbor)]` (or a codec of your own,
    /// `codec = Format::custom(&ACME)`). `None` (the default): the publishing registration's
    /// format.
    fn codec() -> Option<Format> {
        None
    }

    /// The payload, in the type's [`codec`](Outgoing::codec), else JSON.
    fn encode(&self) -> Result<Bytes, EncodeError> {
        match Self::codec() {
            Some(format) => format.encode(self),
            None => Json.encode(self),
        }
    }

    /// The JSON Schema (draft 7) of the payload, for `asyncapi`; `None` when unknown (the
    /// default). `#[derive(Outgoing)]` fills it: from `schemars::JsonSchema` when the type
    /// implements it, else traced from its serde `Deserialize` impl
    /// ([`traced_schema`](crate::registration::traced_schema)), else `None`.
    fn schema() -> Option<serde_json::Value> {
        None
    }

    /// The Rust type's name, as `std::any::type_name` spells it: what `asyncapi` names the
    /// message by (its last path segment, `Captured`).
    fn type_name() -> &'static str {
        std::any::type_name::<Self>()
    }
}
