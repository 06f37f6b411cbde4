//! One change of a key-value bucket as a handler gets it ([`KvChange`]): the key from the
//! subject (`$KV.<bucket>.<key>`), the revision from the stream sequence, the operation from
//! the `KV-Operation` header, and a put's value decoded by the registration's codec.

use ruststream::Delivery;
use ruststream::codec::{DecodeError, Format};
use ruststream::input::{FromDelivery, decode_payload};

use crate::JetStreamInfo;

/// The header a delete or a purge carries (`DEL`, `PURGE`); a put carries none.
pub const KV_OPERATION_HEADER: &str = "KV-Operation";

/// The subject prefix of every key-value bucket: `$KV.<bucket>.<key>`.
const KV_PREFIX: &str = "$KV.";

/// One change of a key in a bucket read by [`KvChanges`](crate::KvChanges): the first
/// parameter of its handler, `&KvChange<T>`, `T` what a put's value decodes to.
///
/// ```
/// use ruststream_nats::{KvChange, KvOp};
///
/// fn apply(change: &KvChange<u32>, limits: &mut std::collections::HashMap<String, u32>) {
///     match &change.op {
///         KvOp::Put(limit) => {
///             limits.insert(change.key.clone(), *limit);
///         }
///         KvOp::Delete | KvOp::Purge => {
///             limits.remove(&change.key);
///         }
///     }
/// }
/// # let _ = apply;
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct KvChange<T> {
    /// The bucket.
    pub bucket: String,
    /// The key (`app.timeout`), without the bucket's `$KV.<bucket>.` prefix.
    pub key: String,
    /// The change's revision: its sequence in the bucket's stream, the same on every
    /// redelivery, higher for every later change of any key of the bucket.
    pub revision: u64,
    /// What happened to the key.
    pub op: KvOp<T>,
}

/// What a change did to its key.
#[derive(Debug, Clone, PartialEq)]
pub enum KvOp<T> {
    /// The key was given this value.
    Put(T),
    /// The key was deleted (`kv.delete`): its earlier revisions stay in the bucket's history.
    Delete,
    /// The key was purged (`kv.purge`): its earlier revisions are gone from the bucket.
    Purge,
}

impl<T> KvChange<T> {
    /// The value a put set; `None` for a delete or a purge.
    pub fn value(&self) -> Option<&T> {
        match &self.op {
            KvOp::Put(value) => Some(value),
            KvOp::Delete | KvOp::Purge => None,
        }
    }
}

impl<T: serde::de::DeserializeOwned + Send + Sync + 'static> FromDelivery for KvChange<T> {
    type Value = T;

    fn from_delivery(format: Format, delivery: &Delivery) -> Result<Self, DecodeError> {
        let subject = delivery.subject();
        let Some((bucket, key)) = subject
            .strip_prefix(KV_PREFIX)
            .and_then(|rest| rest.split_once('.'))
        else {
            return Err(not_a_change(format!(
                "`{subject}` is not a key-value subject (`$KV.<bucket>.<key>`): a `KvChange` handler reads a bucket through `KvChanges::new(bucket)`"
            )));
        };
        let Some(info) = delivery.extension::<JetStreamInfo>() else {
            return Err(not_a_change(format!(
                "the message on `{subject}` did not come from a stream, so it has no revision: a `KvChange` handler reads a bucket through `KvChanges::new(\"{bucket}\")`"
            )));
        };
        let operation = delivery
            .headers()
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(KV_OPERATION_HEADER))
            .map(|(_, value)| value.trim());
        let op = match operation {
            None | Some("PUT") => KvOp::Put(decode_payload(format, delivery)?),
            Some("DEL") => KvOp::Delete,
            Some("PURGE") => KvOp::Purge,
            Some(other) => {
                return Err(not_a_change(format!(
                    "`{subject}` carries `{KV_OPERATION_HEADER}: {}`, which is none of a bucket's operations (`DEL`, `PURGE`, or none for a put)",
                    other.escape_debug()
                )));
            }
        };
        Ok(Self {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
            revision: info.stream_sequence,
            op,
        })
    }
}

fn not_a_change(reason: String) -> DecodeError {
    DecodeError::new("KvChange", reason)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use ruststream::{Delivery, Headers};

    use super::*;

    fn change(subject: &str, operation: Option<&str>, payload: &'static [u8]) -> Delivery {
        let mut delivery = Delivery::new(subject, Bytes::from_static(payload)).with_headers(
            operation
                .map(|op| Headers::from_iter([(KV_OPERATION_HEADER, op)]))
                .unwrap_or_default(),
        );
        let info = JetStreamInfo::parse("$JS.ACK.KV_config.cfg.1.7.7.1700000000000000000.0")
            .expect("an acknowledgement subject");
        delivery.extensions_mut().insert(info);
        delivery
    }

    #[test]
    fn a_put_decodes_its_value_and_a_delete_or_purge_decodes_nothing() {
        let put = change("$KV.config.app.timeout", None, b"30");
        let put = KvChange::<u32>::from_delivery(Format::Json, &put).expect("a put");
        assert_eq!(
            (put.bucket.as_str(), put.key.as_str(), put.revision, put.op),
            ("config", "app.timeout", 7, KvOp::Put(30))
        );
        for (header, op) in [("DEL", KvOp::Delete), ("PURGE", KvOp::Purge)] {
            let gone = change("$KV.config.app.timeout", Some(header), b"");
            let gone = KvChange::<u32>::from_delivery(Format::Json, &gone).expect("no value");
            assert_eq!(gone.value(), None);
            assert_eq!(gone.op, op);
        }
    }

    #[test]
    fn what_is_not_a_change_says_why() {
        let bad_value = change("$KV.config.a", None, b"thirty");
        let err = KvChange::<u32>::from_delivery(Format::Json, &bad_value).expect_err("not a u32");
        assert!(err.to_string().contains("u32"), "{err}");
        let unknown = change("$KV.config.a", Some("ROLL"), b"");
        let err = KvChange::<u32>::from_delivery(Format::Json, &unknown).expect_err("unknown");
        assert!(err.to_string().contains("KV-Operation: ROLL"), "{err}");
        let plain = change("orders.created", None, b"1");
        let err = KvChange::<u32>::from_delivery(Format::Json, &plain).expect_err("not $KV");
        assert!(err.to_string().contains("KvChanges::new"), "{err}");
        let core = Delivery::new("$KV.config.a", Bytes::from_static(b"1"));
        let err = KvChange::<u32>::from_delivery(Format::Json, &core).expect_err("no stream");
        assert!(err.to_string().contains("no revision"), "{err}");
    }
}
