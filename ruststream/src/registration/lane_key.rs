//! [`LaneKey`]: what `.by_key(..)` and `.by_key_header(..)` put in a registration's policy, the
//! key of a delivery's ordering lane. It reads the key with the idempotency key's machinery
//! (`crate::idempotency::by_payload`, `by_header`): one way to take a key from a message.

use std::fmt;
use std::sync::Arc;

use crate::Delivery;
use crate::codec::Format;
use crate::idempotency::KeepingKeyFn;

/// The key of a registration's ordering lanes: deliveries with the same key are handled one
/// after the other, in the order they arrived; different keys in parallel (up to the
/// registration's concurrency). Set with
/// [`Registration::by_key`](crate::Registration::by_key) or
/// [`by_key_header`](crate::Registration::by_key_header); see `docs/consumers.md`.
///
/// Two keys are equal when they read the same source (`payload`, `header <name>`).
#[derive(Clone)]
pub struct LaneKey {
    source: String,
    key: Arc<KeepingKeyFn>,
}

impl LaneKey {
    pub(crate) fn new(source: String, key: Arc<KeepingKeyFn>) -> Self {
        Self { source, key }
    }

    /// Where the key comes from: `payload` or `header <name>`.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The key of `delivery` (its payload read as `format`), or why it has none. A payload
    /// decoded for the key is kept in `delivery` for the handler's decode of the same type, so
    /// the payload is decoded once.
    ///
    /// # Errors
    ///
    /// Why the delivery has no key: its payload does not decode, the header is missing, the
    /// key is empty.
    pub fn of(&self, delivery: &mut Delivery, format: Format) -> Result<String, String> {
        (self.key)(delivery, format)
    }
}

impl PartialEq for LaneKey {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Eq for LaneKey {}

impl fmt::Debug for LaneKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("LaneKey").field(&self.source).finish()
    }
}

impl fmt::Display for LaneKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ordered by key ({})", self.source)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use bytes::Bytes;
    use serde::Deserialize;

    use super::*;
    use crate::codec::decode_delivery;

    thread_local! {
        /// How many `Payment`s this test's thread decoded.
        static DECODED: Cell<usize> = const { Cell::new(0) };
    }

    fn decoded() -> usize {
        DECODED.with(Cell::get)
    }

    #[derive(Debug)]
    struct Payment {
        account: u32,
    }

    impl<'de> Deserialize<'de> for Payment {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            #[derive(Deserialize)]
            struct Wire {
                account: u32,
            }
            let wire = Wire::deserialize(d)?;
            DECODED.with(|n| n.set(n.get() + 1));
            Ok(Self {
                account: wire.account,
            })
        }
    }

    fn by_account() -> LaneKey {
        let key = crate::idempotency::lane_by_payload(|p: &Payment| p.account);
        LaneKey::new("payload".to_owned(), key)
    }

    fn delivery(body: &str) -> Delivery {
        Delivery::new("payments", Bytes::from(body.as_bytes().to_vec()))
    }

    #[test]
    fn the_payload_decoded_for_the_key_is_the_one_the_handler_gets() {
        let mut delivery = delivery(r#"{"account":7}"#);
        assert_eq!(
            by_account().of(&mut delivery, Format::Json),
            Ok("7".to_owned())
        );
        assert_eq!(decoded(), 1);

        let payment: Payment = decode_delivery(Format::Json, &delivery).expect("decodes");
        assert_eq!(payment.account, 7);
        assert_eq!(
            decoded(),
            1,
            "the handler's decode took the value the key was made of"
        );

        // Taken once: the handler called again (a retry in place) decodes the payload again.
        let again: Payment = decode_delivery(Format::Json, &delivery).expect("decodes");
        assert_eq!(again.account, 7);
        assert_eq!(decoded(), 2);

        // Another type is decoded from the payload as before.
        let value: serde_json::Value = decode_delivery(Format::Json, &delivery).expect("decodes");
        assert_eq!(value["account"], 7);
    }

    #[test]
    fn an_idempotency_key_of_the_same_type_leaves_the_kept_value_to_the_handler() {
        let mut delivery = delivery(r#"{"account":7}"#);
        by_account().of(&mut delivery, Format::Json).expect("a key");
        let idempotency = crate::idempotency::by_payload(|p: &Payment| p.account);
        assert_eq!(idempotency(&delivery, Format::Json), Ok("7".to_owned()));
        assert_eq!(decoded(), 2, "the idempotency key decodes its own");
        let payment: Payment = decode_delivery(Format::Json, &delivery).expect("decodes");
        assert_eq!(
            (payment.account, decoded()),
            (7, 2),
            "the handler's is the kept one"
        );
    }

    #[test]
    fn a_payload_with_no_key_keeps_nothing() {
        let mut delivery = delivery(r#"{"account":"seven"}"#);
        let why = by_account()
            .of(&mut delivery, Format::Json)
            .expect_err("no key");
        assert!(why.starts_with("the payload does not decode"), "{why}");
        let err = decode_delivery::<Payment>(Format::Json, &delivery).expect_err("undecodable");
        assert!(err.to_string().contains("invalid type"), "{err}");
    }

    #[test]
    fn a_header_key_decodes_nothing() {
        let key = LaneKey::new(
            "header account".to_owned(),
            crate::idempotency::lane_by_header("account".to_owned()),
        );
        let headers: crate::Headers = [("account", "7")].into_iter().collect();
        let mut delivery = delivery(r#"{"account":7}"#).with_headers(headers);
        assert_eq!(key.of(&mut delivery, Format::Json), Ok("7".to_owned()));
        assert_eq!(decoded(), 0);
        let payment: Payment = decode_delivery(Format::Json, &delivery).expect("decodes");
        assert_eq!((payment.account, decoded()), (7, 1));
    }
}
