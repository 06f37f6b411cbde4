//! Payload decoding into the examples' own message types, fuzzed: any bytes a publisher sends
//! give a value or a decode error, never a panic; what a sender encodes decodes to the same
//! value. (That the decode error the logs show by default quotes nothing from the payload is
//! fuzzed in `ruststream-nats/src/fuzz.rs` and tested live in `security_logs.rs`.)
//!
//! 256 cases per property by default (`PROPTEST_CASES=100000 cargo test --test security_fuzz`
//! for a long run); CI runs the default.

use proptest::prelude::*;

/// Decodes `bytes` as `T` with the runtime's codec, whatever they are.
macro_rules! decode_as {
    ($bytes:expr, $($t:ty),+) => {{
        use ruststream::codec::Codec as _;
        $(let _ = ruststream::codec::Json.decode::<$t>($bytes);)+
    }};
}

/// Encodes `value` and decodes it back with the runtime's codec.
macro_rules! round_trips {
    ($value:expr) => {{
        use ruststream::codec::Codec as _;
        let value = $value;
        let bytes = ruststream::codec::Json.encode(&value).expect("encodes");
        ruststream::codec::Json
            .decode(&bytes)
            .map_or(false, |back| value == back)
    }};
}

#[allow(dead_code)]
mod payments {
    include!("../examples/payments.rs");

    pub(super) fn decode(bytes: &[u8]) {
        decode_as!(bytes, Payment, Captured);
    }

    pub(super) fn round_trip(id: u64, card: String, amount_cents: u64) -> bool {
        round_trips!(Payment {
            id,
            card,
            amount_cents
        }) && round_trips!(Captured {
            payment: id,
            amount_cents
        })
    }
}

#[allow(dead_code)]
mod retries {
    include!("../examples/retries_dead_letters.rs");

    pub(super) fn decode(bytes: &[u8]) {
        decode_as!(bytes, Order, Receipt, AuditEvent);
    }

    pub(super) fn round_trip(id: u64, text: String, quantity: u32) -> bool {
        round_trips!(Order {
            id,
            sku: text.clone(),
            quantity
        }) && round_trips!(Receipt {
            order: id,
            email: text.clone()
        }) && round_trips!(AuditEvent { id, action: text })
    }
}

#[allow(dead_code)]
mod batches {
    include!("../examples/batches.rs");

    pub(super) fn decode(bytes: &[u8]) {
        decode_as!(bytes, Reading);
    }

    /// serde_json reads a float back to within one unit in the last place (its exact
    /// round trip is the `float_roundtrip` feature, off in this workspace).
    pub(super) fn round_trip(sensor: String, celsius: f64) -> bool {
        use ruststream::codec::Codec as _;
        let sent = Reading { sensor, celsius };
        let bytes = ruststream::codec::Json.encode(&sent).expect("encodes");
        let back: Reading = ruststream::codec::Json.decode(&bytes).expect("decodes");
        back.sensor == sent.sensor
            && (back.celsius - sent.celsius).abs() <= sent.celsius.abs() * 2.0 * f64::EPSILON
    }
}

#[allow(dead_code)]
mod core_settlement {
    include!("../examples/nats_settlement_core.rs");

    pub(super) fn decode(bytes: &[u8]) {
        decode_as!(bytes, Shipped);
    }

    pub(super) fn round_trip(id: u64, email: String) -> bool {
        round_trips!(Shipped { id, email })
    }
}

/// Bytes a publisher might send: anything, or JSON-looking text.
fn payloads() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..256),
        r#"[\[\]{}":,0-9a-z_ .eE+-]{0,96}"#.prop_map(String::into_bytes),
        (any::<u64>(), ".{0,32}", any::<i64>()).prop_map(|(id, text, n)| {
            format!(r#"{{"id":{id},"card":{text:?},"amount_cents":{n},"sensor":{text:?},"celsius":{n}}}"#)
                .into_bytes()
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn any_payload_decodes_or_is_refused_without_panicking(bytes in payloads()) {
        payments::decode(&bytes);
        retries::decode(&bytes);
        batches::decode(&bytes);
        core_settlement::decode(&bytes);
    }

    #[test]
    fn what_a_sender_encodes_decodes_to_the_same_value(
        id in any::<u64>(),
        text in ".{0,40}",
        quantity in any::<u32>(),
        celsius in -1.0e6f64..1.0e6,
    ) {
        prop_assert!(payments::round_trip(id, text.clone(), u64::from(quantity)));
        prop_assert!(retries::round_trip(id, text.clone(), quantity));
        prop_assert!(batches::round_trip(text.clone(), celsius));
        prop_assert!(core_settlement::round_trip(id, text));
    }
}
