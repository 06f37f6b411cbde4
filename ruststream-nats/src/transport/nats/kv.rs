//! Key-value buckets on the production transport: opening a bucket once (creating it, and
//! keeping its `max_age` at the idempotency window), as the stream async-nats would make.

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use bytes::Bytes;
use futures::future::BoxFuture;
use ruststream::BoxError;

use super::NatsTransport;
use super::errors::kv_error;
use crate::transport::{KeyValue, KvEntry, TransportError, TransportErrorKind};

impl NatsTransport {
    /// Sets the `max_age` of existing bucket `bucket` when it differs (the window changed).
    async fn kv_max_age(&self, bucket: &str, max_age: Duration) -> Result<(), TransportError> {
        let failed = |err: BoxError| {
            TransportError::new(
                TransportErrorKind::Other,
                format!("cannot set the max_age of key-value bucket `{bucket}` to {max_age:?}"),
            )
            .with_cause(err)
        };
        let mut stream = self
            .jetstream
            .get_stream(format!("KV_{bucket}"))
            .await
            .map_err(|err| failed(err.into()))?;
        let mut config = stream
            .info()
            .await
            .map_err(|err| failed(err.into()))?
            .config
            .clone();
        if config.max_age != max_age {
            tracing::info!(
                bucket,
                from = ?config.max_age,
                to = ?max_age,
                "the key-value bucket's max_age changes to the window"
            );
            config.max_age = max_age;
            // The server refuses a duplicate window longer than the max_age.
            config.duplicate_window = config.duplicate_window.min(max_age);
            self.jetstream
                .update_stream(config)
                .await
                .map_err(|err| failed(err.into()))?;
        }
        Ok(())
    }

    /// Bucket `bucket`, opened once: created (keeping one value per key for `max_age`) when
    /// missing and `max_age` is given.
    pub(super) async fn kv_store(
        &self,
        bucket: &str,
        max_age: Option<Duration>,
    ) -> Result<jetstream::kv::Store, TransportError> {
        let mut open = self.kv.lock().await;
        if let Some(store) = open.get(bucket) {
            if let Some(max_age) = max_age {
                self.kv_max_age(bucket, max_age).await?;
            }
            return Ok(store.clone());
        }
        let store = match self.jetstream.get_key_value(bucket).await {
            Ok(store) => {
                if let Some(max_age) = max_age {
                    self.kv_max_age(bucket, max_age).await?;
                }
                store
            }
            Err(err) => {
                let Some(max_age) = max_age else {
                    return Err(TransportError::new(
                        TransportErrorKind::Other,
                        format!("cannot open key-value bucket `{bucket}`"),
                    )
                    .with_cause(err));
                };
                // The stream a key-value bucket is, as async-nats's `create_key_value` makes
                // it, without its account query (whose answer 2.9 servers word differently).
                self.jetstream
                    .get_or_create_stream(stream::Config {
                        name: format!("KV_{bucket}"),
                        subjects: vec![format!("$KV.{bucket}.>")],
                        max_messages_per_subject: 1,
                        max_age,
                        allow_rollup: true,
                        deny_delete: true,
                        allow_direct: true,
                        discard: stream::DiscardPolicy::New,
                        num_replicas: 1,
                        ..Default::default()
                    })
                    .await
                    .map_err(|err| {
                        TransportError::new(
                            TransportErrorKind::Other,
                            format!(
                                "cannot create key-value bucket `{bucket}` (check that JetStream is enabled and the account may create streams)"
                            ),
                        )
                        .with_cause(err)
                    })?;
                self.jetstream.get_key_value(bucket).await.map_err(|err| {
                    TransportError::new(
                        TransportErrorKind::Other,
                        format!("cannot open key-value bucket `{bucket}`"),
                    )
                    .with_cause(err)
                })?
            }
        };
        open.insert(bucket.to_owned(), store.clone());
        Ok(store)
    }
}

impl KeyValue for NatsTransport {
    fn kv_bucket(
        &self,
        bucket: String,
        max_age: Duration,
    ) -> BoxFuture<'_, Result<(), TransportError>> {
        Box::pin(async move { self.kv_store(&bucket, Some(max_age)).await.map(drop) })
    }

    fn kv_get(
        &self,
        bucket: String,
        key: String,
    ) -> BoxFuture<'_, Result<Option<KvEntry>, TransportError>> {
        Box::pin(async move {
            let store = self.kv_store(&bucket, None).await?;
            let entry = store
                .entry(key.as_str())
                .await
                .map_err(|err| kv_error(&bucket, &key, "read", err))?;
            Ok(entry
                .filter(|e| e.operation == jetstream::kv::Operation::Put)
                .map(|e| {
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_nanos());
                    let written = u128::try_from(e.created.unix_timestamp_nanos()).unwrap_or(0);
                    let age = u64::try_from(now.saturating_sub(written)).unwrap_or(u64::MAX);
                    KvEntry {
                        value: e.value,
                        revision: e.revision,
                        age: Duration::from_nanos(age),
                    }
                }))
        })
    }

    fn kv_create(
        &self,
        bucket: String,
        key: String,
        value: Bytes,
    ) -> BoxFuture<'_, Result<Option<u64>, TransportError>> {
        Box::pin(async move {
            let store = self.kv_store(&bucket, None).await?;
            match store.create(key.as_str(), value).await {
                Ok(revision) => Ok(Some(revision)),
                Err(err) if err.kind() == jetstream::kv::CreateErrorKind::AlreadyExists => Ok(None),
                Err(err) => Err(kv_error(&bucket, &key, "create", err)),
            }
        })
    }

    fn kv_update(
        &self,
        bucket: String,
        key: String,
        value: Bytes,
        revision: u64,
    ) -> BoxFuture<'_, Result<Option<u64>, TransportError>> {
        Box::pin(async move {
            let store = self.kv_store(&bucket, None).await?;
            match store.update(key.as_str(), value, revision).await {
                Ok(revision) => Ok(Some(revision)),
                Err(err) if err.kind() == jetstream::kv::UpdateErrorKind::WrongLastRevision => {
                    Ok(None)
                }
                Err(err) => Err(kv_error(&bucket, &key, "update", err)),
            }
        })
    }

    fn kv_delete(&self, bucket: String, key: String) -> BoxFuture<'_, Result<(), TransportError>> {
        Box::pin(async move {
            let store = self.kv_store(&bucket, None).await?;
            store
                .delete(key.as_str())
                .await
                .map_err(|err| kv_error(&bucket, &key, "delete", err))
        })
    }
}
