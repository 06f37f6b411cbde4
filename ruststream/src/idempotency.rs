//! Idempotent handlers: a key per message, and a record of the keys already handled.
//!
//! A registration marked [`idempotent_by`](crate::Registration::idempotent_by) (or
//! [`idempotent_by_header`](crate::Registration::idempotent_by_header)) names a key for each
//! message; its broker keeps the keys it handled in a store (on NATS, a JetStream key-value
//! bucket) for a window, and acknowledges a message whose key is there without running the
//! handler. See `docs/idempotency.md`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;

use crate::Delivery;
use crate::codec::Format;

/// How long a handled key is remembered by default: a day.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);

/// How long a claim on a key holds by default: longer than the handler may run.
pub const DEFAULT_CLAIM: Duration = Duration::from_secs(30);

/// A registration's idempotency, as `describe` shows it and its broker runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Idempotency {
    /// The store's name (on NATS, the key-value bucket's): `idempotency-<registration>` unless
    /// [`idempotency_bucket`](crate::Registration::idempotency_bucket) named one.
    pub bucket: String,
    /// How long a handled key is remembered (the bucket's `max_age`).
    pub window: Duration,
    /// How long a claim holds a key while its handler runs; an expired claim (its process
    /// crashed between the claim and the record) lets a delivery of the key run again.
    pub claim: Duration,
    /// Where the key comes from: `payload` or `header <name>`.
    pub key: String,
}

impl Idempotency {
    pub(crate) fn new(key: String) -> Self {
        Self {
            bucket: String::new(),
            window: DEFAULT_WINDOW,
            claim: DEFAULT_CLAIM,
            key,
        }
    }
}

impl fmt::Display for Idempotency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "idempotent by {} in bucket {} (window {}, claim {})",
            self.key,
            self.bucket,
            humantime(self.window),
            humantime(self.claim)
        )
    }
}

fn humantime(d: Duration) -> String {
    let secs = d.as_secs();
    if d.subsec_nanos() != 0 || secs == 0 {
        format!("{}ms", d.as_millis())
    } else if secs.is_multiple_of(3600) {
        format!("{}h", secs / 3600)
    } else if secs.is_multiple_of(60) {
        format!("{}m", secs / 60)
    } else {
        format!("{secs}s")
    }
}

/// The name of the bucket of registration `name` when none was given: `idempotency-` then the
/// name, with every character a bucket name cannot hold as `_`.
pub fn default_bucket(name: &str) -> String {
    let clean: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("idempotency-{clean}")
}

/// Reads the key of a delivery: `Ok(key)`, or why it has none.
pub(crate) type KeyFn = dyn Fn(&Delivery, Format) -> Result<String, String> + Send + Sync;

/// [`KeyFn`] for a delivery the handler has not seen yet: a payload decoded for the key is kept
/// in the delivery for the handler's own decode (`codec::keep_decoded`).
pub(crate) type KeepingKeyFn =
    dyn Fn(&mut Delivery, Format) -> Result<String, String> + Send + Sync;

/// The key of a delivery, from its payload decoded as `T`.
pub(crate) fn by_payload<T, K>(key: impl Fn(&T) -> K + Send + Sync + 'static) -> Arc<KeyFn>
where
    T: DeserializeOwned + 'static,
    K: fmt::Display,
{
    Arc::new(move |delivery, format| payload_key(&key, delivery, format).map(|(key, _)| key))
}

/// [`by_payload`] for an ordering lane: the decoded payload is kept in the delivery for the
/// handler.
pub(crate) fn lane_by_payload<T, K>(
    key: impl Fn(&T) -> K + Send + Sync + 'static,
) -> Arc<KeepingKeyFn>
where
    T: DeserializeOwned + Send + 'static,
    K: fmt::Display,
{
    Arc::new(move |delivery, format| {
        let (key, value) = payload_key(&key, delivery, format)?;
        crate::codec::keep_decoded(delivery, value);
        Ok(key)
    })
}

/// The key `key` makes of `delivery`'s payload decoded as `T`, and the value it was made of.
fn payload_key<T, K>(
    key: &impl Fn(&T) -> K,
    delivery: &Delivery,
    format: Format,
) -> Result<(String, T), String>
where
    T: DeserializeOwned + 'static,
    K: fmt::Display,
{
    // Decoded afresh: a value kept for the handler is the handler's.
    let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        crate::codec::decode_payload::<T>(format, delivery)
    }));
    match decoded {
        Ok(Ok(value)) => check(key(&value).to_string()).map(|key| (key, value)),
        Ok(Err(err)) => Err(format!("the payload does not decode: {err}")),
        Err(_) => Err("decoding the payload panicked".to_owned()),
    }
}

/// The key of a delivery, from its header `name`.
pub(crate) fn by_header(name: String) -> Arc<KeyFn> {
    Arc::new(move |delivery, _| header_key(&name, delivery))
}

/// [`by_header`] for an ordering lane.
pub(crate) fn lane_by_header(name: String) -> Arc<KeepingKeyFn> {
    Arc::new(move |delivery, _| header_key(&name, delivery))
}

fn header_key(name: &str, delivery: &Delivery) -> Result<String, String> {
    match delivery.headers().get(name) {
        Some(value) => check(value.to_owned()),
        None => Err(format!("the message has no `{name}` header")),
    }
}

/// A key the store can hold: not empty. Any other text is kept (the store encodes it).
fn check(key: String) -> Result<String, String> {
    if key.is_empty() {
        Err("the key is empty".to_owned())
    } else {
        Ok(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_default_bucket_name_holds_only_what_a_bucket_name_may() {
        assert_eq!(default_bucket("charge"), "idempotency-charge");
        assert_eq!(default_bucket("pay.ments v2"), "idempotency-pay_ments_v2");
    }

    #[test]
    fn describe_line_names_bucket_window_and_claim() {
        let mut i = Idempotency::new("payload".into());
        i.bucket = "payments-done".into();
        assert_eq!(
            i.to_string(),
            "idempotent by payload in bucket payments-done (window 24h, claim 30s)"
        );
    }
}
