//! Messages that know where they are published: `#[derive(Outgoing)]`.

use bytes::Bytes;
use serde::Serialize;

use crate::codec::{Codec, EncodeError, Json};

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
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an outgoing message",
    label = "does not know where it is published",
    note = "derive it: `#[derive(Serialize, Outgoing)]` with `#[outgoing(name = \"subject\")]` on the type"
)]
pub trait Outgoing: Serialize + Send + Sync {
    /// The subject the message is published to.
    const SUBJECT: &'static str;

    /// The payload, JSON unless the type says otherwise.
    fn encode(&self) -> Result<Bytes, EncodeError> {
        Json.encode(self)
    }
}
