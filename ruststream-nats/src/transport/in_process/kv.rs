//! Key-value buckets, as JetStream keeps them: one message per key (history 1), a revision from
//! one sequence per bucket, a message older than the bucket's `max_age` gone; create-if-absent
//! and compare-and-set on the key's last message, which a delete's tombstone is (and 0 when the
//! key has none). Ages are on tokio's clock.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use tokio::time::Instant;

use super::InProcessNats;
use crate::transport::{KeyValue, KvEntry, TransportError, TransportErrorKind};

#[derive(Default)]
pub(super) struct Buckets(Mutex<HashMap<String, Bucket>>);

struct Bucket {
    max_age: Duration,
    /// The last revision handed out (a delete takes one too, as its tombstone does).
    sequence: u64,
    /// Each key's last message: a value, or a delete's tombstone.
    values: HashMap<String, Value>,
}

struct Value {
    /// `None` for a tombstone.
    value: Option<Bytes>,
    revision: u64,
    written: Instant,
}

impl Bucket {
    /// The last message of `key` the bucket still holds (not past `max_age`).
    fn last(&self, key: &str) -> Option<&Value> {
        self.values
            .get(key)
            .filter(|v| self.max_age.is_zero() || v.written.elapsed() < self.max_age)
    }

    /// The live value of `key`: `None` when never written, deleted, or past `max_age`.
    fn live(&self, key: &str) -> Option<(&Bytes, &Value)> {
        self.last(key)
            .and_then(|v| v.value.as_ref().map(|value| (value, v)))
    }

    fn write(&mut self, key: String, value: Option<Bytes>) -> u64 {
        self.sequence += 1;
        self.values.insert(
            key,
            Value {
                value,
                revision: self.sequence,
                written: Instant::now(),
            },
        );
        self.sequence
    }
}

impl Buckets {
    fn with<T>(
        &self,
        bucket: &str,
        f: impl FnOnce(&mut Bucket) -> Result<T, TransportError>,
    ) -> Result<T, TransportError> {
        let mut buckets = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match buckets.get_mut(bucket) {
            Some(b) => f(b),
            None => Err(TransportError::new(
                TransportErrorKind::Other,
                format!("cannot open key-value bucket `{bucket}`: bucket not found"),
            )),
        }
    }

    pub(super) fn declare(&self, bucket: &str, max_age: Duration) -> Result<(), TransportError> {
        if bucket.is_empty()
            || !bucket
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(TransportError::new(
                TransportErrorKind::Invalid,
                format!("cannot create key-value bucket `{bucket}`: invalid bucket name"),
            ));
        }
        let mut buckets = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        buckets
            .entry(bucket.to_owned())
            .or_insert_with(|| Bucket {
                max_age,
                sequence: 0,
                values: HashMap::new(),
            })
            .max_age = max_age;
        Ok(())
    }

    pub(super) fn get(&self, bucket: &str, key: &str) -> Result<Option<KvEntry>, TransportError> {
        check_key(bucket, key)?;
        self.with(bucket, |b| {
            Ok(b.live(key).map(|(value, v)| KvEntry {
                value: value.clone(),
                revision: v.revision,
                age: v.written.elapsed(),
            }))
        })
    }

    pub(super) fn create(
        &self,
        bucket: &str,
        key: &str,
        value: Bytes,
    ) -> Result<Option<u64>, TransportError> {
        check_key(bucket, key)?;
        self.with(bucket, |b| {
            if b.live(key).is_some() {
                return Ok(None);
            }
            Ok(Some(b.write(key.to_owned(), Some(value))))
        })
    }

    pub(super) fn update(
        &self,
        bucket: &str,
        key: &str,
        value: Bytes,
        revision: u64,
    ) -> Result<Option<u64>, TransportError> {
        check_key(bucket, key)?;
        self.with(bucket, |b| {
            // As on the server: the expected revision is the key's last message (a tombstone
            // too), 0 when it has none (never written, or expired).
            if b.last(key).map_or(0, |v| v.revision) != revision {
                return Ok(None);
            }
            Ok(Some(b.write(key.to_owned(), Some(value))))
        })
    }

    pub(super) fn delete(&self, bucket: &str, key: &str) -> Result<(), TransportError> {
        check_key(bucket, key)?;
        self.with(bucket, |b| {
            b.write(key.to_owned(), None);
            Ok(())
        })
    }
}

/// A key NATS accepts: `[-/_=.a-zA-Z0-9]+`, not starting or ending with `.`.
fn check_key(bucket: &str, key: &str) -> Result<(), TransportError> {
    let valid = !key.is_empty()
        && !key.starts_with('.')
        && !key.ends_with('.')
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-/_=.".contains(c));
    if valid {
        Ok(())
    } else {
        Err(TransportError::new(
            TransportErrorKind::Invalid,
            format!("cannot use key `{key}` of key-value bucket `{bucket}`: invalid key"),
        ))
    }
}

impl KeyValue for InProcessNats {
    fn kv_bucket(
        &self,
        bucket: String,
        max_age: Duration,
    ) -> BoxFuture<'_, Result<(), TransportError>> {
        Box::pin(async move { self.shared.kv.declare(&bucket, max_age) })
    }

    fn kv_get(
        &self,
        bucket: String,
        key: String,
    ) -> BoxFuture<'_, Result<Option<KvEntry>, TransportError>> {
        Box::pin(async move { self.shared.kv.get(&bucket, &key) })
    }

    fn kv_create(
        &self,
        bucket: String,
        key: String,
        value: Bytes,
    ) -> BoxFuture<'_, Result<Option<u64>, TransportError>> {
        Box::pin(async move { self.shared.kv.create(&bucket, &key, value) })
    }

    fn kv_update(
        &self,
        bucket: String,
        key: String,
        value: Bytes,
        revision: u64,
    ) -> BoxFuture<'_, Result<Option<u64>, TransportError>> {
        Box::pin(async move { self.shared.kv.update(&bucket, &key, value, revision) })
    }

    fn kv_delete(&self, bucket: String, key: String) -> BoxFuture<'_, Result<(), TransportError>> {
        Box::pin(async move { self.shared.kv.delete(&bucket, &key) })
    }
}
