//! Key-value buckets on the production transport: opening a bucket once (creating it, and
//! keeping its `max_age` at the idempotency window), as the stream async-nats would make.

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use ruststream::BoxError;

use super::NatsTransport;
use crate::transport::{TransportError, TransportErrorKind};

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
