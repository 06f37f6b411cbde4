//! The production transport: one async-nats client, for Core NATS and JetStream.
//!
//! A subscription or a pull consumer is read in the runtime's own task, straight from the
//! client's buffer (no task or channel in between, which cost more per message than the rest of
//! the delivery path): the runtime asks for the next message only when a handler is free, and
//! a batch handler finds what arrived together ready at once. A pull consumer is read by the
//! puller of `transport/pull.rs`, which says how much it asks the server for. Stopping
//! ([`Unsubscribe::stop`]) takes effect at the stream's next read, the same way for both:
//!
//! - Core: the subscription is drained (unsubscribed on the server); the messages the client
//!   already received are still handed over, then the stream ends.
//! - JetStream: the continuous pull stops and its inbox is closed; the messages already pulled
//!   into the client are handed over, then the stream ends. They are deliveries like any other:
//!   the runtime releases them with `-NAK` (and were it to drop them, the server would deliver
//!   them again after `ack_wait`).

use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::consumer::FromConsumer;
use async_nats::jetstream::{self, consumer, stream};
use async_nats::{HeaderMap, HeaderName, HeaderValue};
use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;
use ruststream::Headers;
use tokio::sync::oneshot;

use super::pull::{Lookahead, Puller};
use super::{
    ConsumerSpec, KvEntry, RawMessage, StoredAck, StreamSpec, Subscription, Transport,
    TransportError, TransportErrorKind, Unsubscribe,
};
use crate::descriptor::DeliverPolicy;
use crate::events::{Events, subscription_id};

/// How long [`NatsTransport::round_trip`] waits for the server.
const ROUND_TRIP_TIMEOUT: Duration = Duration::from_secs(2);

/// The most messages a registration of single messages keeps ahead of its handlers (a batch
/// handler: its batch size, when larger). `transport/pull.rs` says how much it actually keeps.
const PULL_MAX: usize = 256;

/// How long a confirmed settlement waits for the server's answer.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(2);

/// JetStream's error code for "stream not found".
const STREAM_NOT_FOUND: u64 = 10059;

/// [`Transport`] over one async-nats client: Core publishes and subscriptions, and JetStream
/// (streams, pull consumers, stored publishes) on the same connection.
#[derive(Clone)]
pub struct NatsTransport {
    client: async_nats::Client,
    jetstream: jetstream::Context,
    /// Where Core subscriptions are recorded, to name them when they drop messages.
    events: Option<Arc<Events>>,
    /// The key-value buckets opened so far, by name.
    kv: Arc<tokio::sync::Mutex<std::collections::HashMap<String, jetstream::kv::Store>>>,
}

impl std::fmt::Debug for NatsTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsTransport")
            .field("state", &self.client.connection_state())
            .finish_non_exhaustive()
    }
}

impl NatsTransport {
    /// A transport over a connected client.
    pub fn new(client: async_nats::Client) -> Self {
        let jetstream = jetstream::new(client.clone());
        Self {
            client,
            jetstream,
            events: None,
            kv: Arc::default(),
        }
    }

    /// Sets the `max_age` of existing bucket `bucket` when it differs (the window changed).
    async fn kv_max_age(&self, bucket: &str, max_age: Duration) -> Result<(), TransportError> {
        let failed = |err: &dyn std::fmt::Display| {
            TransportError::new(
                TransportErrorKind::Other,
                format!(
                    "cannot set the max_age of key-value bucket `{bucket}` to {max_age:?}: {err}"
                ),
            )
        };
        let mut stream = self
            .jetstream
            .get_stream(format!("KV_{bucket}"))
            .await
            .map_err(|err| failed(&err))?;
        let mut config = stream
            .info()
            .await
            .map_err(|err| failed(&err))?
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
                .map_err(|err| failed(&err))?;
        }
        Ok(())
    }

    /// Bucket `bucket`, opened once: created (keeping one value per key for `max_age`) when
    /// missing and `max_age` is given.
    async fn kv_store(
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
                        format!("cannot open key-value bucket `{bucket}`: {err}"),
                    ));
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
                                "cannot create key-value bucket `{bucket}`: {err}; check that JetStream is enabled and the account may create streams"
                            ),
                        )
                    })?;
                self.jetstream.get_key_value(bucket).await.map_err(|err| {
                    TransportError::new(
                        TransportErrorKind::Other,
                        format!("cannot open key-value bucket `{bucket}`: {err}"),
                    )
                })?
            }
        };
        open.insert(bucket.to_owned(), store.clone());
        Ok(store)
    }

    /// Records each Core subscription in `events`, which reports what it drops.
    pub(crate) fn with_events(mut self, events: Arc<Events>) -> Self {
        self.events = Some(events);
        self
    }

    /// The client, for anything the transport does not cover.
    pub fn client(&self) -> &async_nats::Client {
        &self.client
    }

    /// Waits until the server has processed everything this connection sent so far.
    ///
    /// The server reads one connection's commands in order, so a message this connection
    /// publishes to a fresh inbox it subscribed to comes back only after every earlier command
    /// (a `SUB`, say) was processed. A flush only says the bytes left the client. Unlike a
    /// request to nobody, this is not fooled by another client listening on `>`.
    async fn round_trip(&self) -> Result<(), TransportError> {
        let failed = |what: &str, err: &dyn std::fmt::Display| {
            TransportError::new(
                TransportErrorKind::Other,
                format!("the server did not confirm the subscription ({what}: {err})"),
            )
        };
        let subject = self.client.new_inbox();
        let mut echo = self
            .client
            .subscribe(subject.clone())
            .await
            .map_err(|err| failed("subscribe", &err))?;
        self.client
            .publish(subject, bytes::Bytes::new())
            .await
            .map_err(|err| failed("publish", &err))?;
        self.client
            .flush()
            .await
            .map_err(|err| failed("flush", &err))?;
        let answered = tokio::time::timeout(ROUND_TRIP_TIMEOUT, echo.next()).await;
        let _ = echo.unsubscribe().await;
        match answered {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(failed("echo", &"the connection closed")),
            Err(_) => Err(failed("echo", &"no answer in time")),
        }
    }

    /// Where the durable consumer `spec` stands: created, kept, updated, or in conflict.
    async fn open_consumer(
        &self,
        spec: &ConsumerSpec,
    ) -> Result<consumer::PullConsumer, TransportError> {
        let stream = self
            .jetstream
            .get_stream(&spec.stream)
            .await
            .map_err(|err| get_stream_error(&spec.stream, &err))?;
        let wanted = consumer_config(spec);
        let Some(durable) = &spec.durable else {
            return stream
                .create_consumer(wanted)
                .await
                .map_err(|err| consumer_error(spec, &err));
        };
        let existing = match stream.consumer_info(durable).await {
            Ok(info) => Some(info),
            Err(err) => match err.kind() {
                jetstream::context::ConsumerInfoErrorKind::NotFound => None,
                jetstream::context::ConsumerInfoErrorKind::JetStream(js) if js.code() == 404 => {
                    None
                }
                _ => {
                    return Err(TransportError::new(
                        TransportErrorKind::Other,
                        format!(
                            "cannot read consumer `{durable}` of stream `{}`: {err}",
                            spec.stream
                        ),
                    ));
                }
            },
        };
        let Some(existing) = existing else {
            return stream
                .create_consumer(wanted)
                .await
                .map_err(|err| consumer_error(spec, &err));
        };
        check_immutable(spec, &existing.config)?;
        let current = consumer::pull::Config::try_from_consumer_config(existing.config)
            .map_err(|err| consumer_error(spec, &*err))?;
        let mut updated = current.clone();
        updated.ack_wait = spec.ack_wait;
        if let Some(max) = spec.max_ack_pending {
            updated.max_ack_pending = max;
        }
        if updated == current {
            return stream
                .get_consumer(durable)
                .await
                .map_err(|err| consumer_error(spec, &*err));
        }
        tracing::info!(
            stream = %spec.stream,
            consumer = %durable,
            ack_wait = ?spec.ack_wait,
            max_ack_pending = ?spec.max_ack_pending,
            "updating the durable consumer: its settings changed"
        );
        stream
            .create_consumer(updated)
            .await
            .map_err(|err| consumer_error(spec, &err))
    }
}

impl Transport for NatsTransport {
    fn publish(
        &self,
        subject: Arc<str>,
        headers: Headers,
        payload: Bytes,
    ) -> BoxFuture<'_, Result<(), TransportError>> {
        let headers = crate::telemetry::with_context(headers);
        Box::pin(async move {
            // One copy of the subject (async-nats keeps it as bytes).
            let target = async_nats::Subject::from(&*subject);
            let result = if headers.is_empty() {
                self.client.publish(target, payload).await
            } else {
                let headers = to_header_map(&headers)?;
                self.client
                    .publish_with_headers(target, headers, payload)
                    .await
            };
            result.map_err(|err| {
                let kind = match err.kind() {
                    async_nats::client::PublishErrorKind::InvalidSubject => {
                        TransportErrorKind::Invalid
                    }
                    async_nats::client::PublishErrorKind::MaxPayloadExceeded => {
                        TransportErrorKind::Refused
                    }
                    _ => TransportErrorKind::Other,
                };
                TransportError::new(kind, format!("publishing to `{subject}` failed: {err}"))
            })
        })
    }

    fn publish_stored(
        &self,
        subject: Arc<str>,
        headers: Headers,
        payload: Bytes,
    ) -> BoxFuture<'_, Result<u64, TransportError>> {
        let headers = crate::telemetry::with_context(headers);
        Box::pin(async move {
            let headers = to_header_map(&headers)?;
            let ack = self
                .jetstream
                .publish_with_headers(subject.to_string(), headers, payload)
                .await
                .map_err(|err| stored_publish_error(&subject, &err))?
                .await
                .map_err(|err| stored_publish_error(&subject, &err))?;
            Ok(ack.sequence)
        })
    }

    fn publish_confirmed(
        &self,
        subject: Arc<str>,
        headers: Headers,
        payload: Bytes,
    ) -> BoxFuture<'_, Result<StoredAck, TransportError>> {
        let headers = crate::telemetry::with_context(headers);
        Box::pin(async move {
            let headers = to_header_map(&headers)?;
            let ack = self
                .jetstream
                .publish_with_headers(subject.to_string(), headers, payload)
                .await
                .map_err(|err| stored_publish_error(&subject, &err))?
                .await
                .map_err(|err| stored_publish_error(&subject, &err))?;
            Ok(StoredAck {
                stream: ack.stream,
                sequence: ack.sequence,
                duplicate: ack.duplicate,
            })
        })
    }

    fn streams(&self) -> BoxFuture<'_, Result<Vec<StreamSpec>, TransportError>> {
        Box::pin(async move {
            let failed = |err: &dyn std::fmt::Display| {
                TransportError::new(
                    TransportErrorKind::Other,
                    format!("cannot list the streams: {err}"),
                )
            };
            let mut listed = self.jetstream.streams();
            let mut streams = Vec::new();
            while let Some(info) = listed.next().await {
                let info = info.map_err(|err| failed(&err))?;
                streams.push(StreamSpec {
                    name: info.config.name,
                    subjects: info.config.subjects,
                });
            }
            Ok(streams)
        })
    }

    fn request(
        &self,
        subject: Arc<str>,
        headers: Headers,
        payload: Bytes,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<RawMessage, TransportError>> {
        let headers = crate::telemetry::with_context(headers);
        Box::pin(async move {
            let mut request = async_nats::Request::new()
                .payload(payload)
                .timeout(Some(timeout));
            if !headers.is_empty() {
                request = request.headers(to_header_map(&headers)?);
            }
            let response = self
                .client
                .send_request(subject.to_string(), request)
                .await
                .map_err(|err| {
                    use async_nats::client::RequestErrorKind as K;
                    let (kind, what) = match err.kind() {
                        K::NoResponders => (
                            TransportErrorKind::NoResponders,
                            "nobody listens on it".to_owned(),
                        ),
                        K::TimedOut => (
                            TransportErrorKind::TimedOut,
                            format!("no response within {timeout:?}"),
                        ),
                        K::InvalidSubject => (TransportErrorKind::Invalid, err.to_string()),
                        _ => (TransportErrorKind::Other, err.to_string()),
                    };
                    TransportError::new(kind, format!("the request to `{subject}` failed: {what}"))
                })?;
            Ok(raw(response))
        })
    }

    fn flush(&self) -> BoxFuture<'_, Result<(), TransportError>> {
        Box::pin(async move {
            self.client.flush().await.map_err(|err| {
                TransportError::new(TransportErrorKind::Other, format!("flush failed: {err}"))
            })
        })
    }

    fn subscribe(
        &self,
        subject: String,
        queue_group: Option<String>,
    ) -> BoxFuture<'_, Result<Subscription, TransportError>> {
        Box::pin(async move {
            let subscriber = match &queue_group {
                Some(group) => {
                    self.client
                        .queue_subscribe(subject.clone(), group.clone())
                        .await
                }
                None => self.client.subscribe(subject.clone()).await,
            }
            .map_err(|err| {
                let kind = match err.kind() {
                    async_nats::client::SubscribeErrorKind::InvalidSubject => {
                        TransportErrorKind::Invalid
                    }
                    _ => TransportErrorKind::Other,
                };
                TransportError::new(kind, format!("cannot subscribe to `{subject}`: {err}"))
            })?;
            // The subscription is registered on the server before this returns: a message
            // published afterwards, from any connection, reaches it.
            self.round_trip().await.map_err(|err| {
                TransportError::new(
                    TransportErrorKind::Other,
                    format!("cannot subscribe to `{subject}`: {}", err.message),
                )
            })?;
            if let Some(events) = &self.events {
                match subscription_id(&subscriber) {
                    Some(sid) => events.subscribed(sid, &subject, queue_group.as_deref()),
                    None => tracing::debug!(
                        subject = %subject,
                        "the subscription's id is unknown: messages it drops are not counted"
                    ),
                }
            }
            Ok(reading(Pumped::Core(subscriber)))
        })
    }

    fn stream_exists(&self, name: &str) -> BoxFuture<'_, Result<bool, TransportError>> {
        let name = name.to_owned();
        Box::pin(async move {
            match self.jetstream.get_stream(&name).await {
                Ok(_) => Ok(true),
                Err(err) => match err.kind() {
                    jetstream::context::GetStreamErrorKind::JetStream(js)
                        if js.error_code().0 == STREAM_NOT_FOUND || js.code() == 404 =>
                    {
                        Ok(false)
                    }
                    _ => Err(get_stream_error(&name, &err)),
                },
            }
        })
    }

    fn stream_by_subject(
        &self,
        subject: &str,
    ) -> BoxFuture<'_, Result<Option<String>, TransportError>> {
        let subject = subject.to_owned();
        Box::pin(async move {
            match self.jetstream.stream_by_subject(subject.clone()).await {
                Ok(name) => Ok(Some(name)),
                Err(err) => match err.kind() {
                    jetstream::context::GetStreamByNameErrorKind::NotFound => Ok(None),
                    _ => Err(TransportError::new(
                        TransportErrorKind::Other,
                        format!("cannot ask which stream stores `{subject}`: {err}"),
                    )),
                },
            }
        })
    }

    fn declare_stream(&self, spec: StreamSpec) -> BoxFuture<'_, Result<(), TransportError>> {
        Box::pin(async move {
            let declare_error = |err: &dyn std::fmt::Display| {
                TransportError::new(
                    TransportErrorKind::Other,
                    format!("cannot declare stream `{}`: {err}", spec.name),
                )
            };
            match self.jetstream.get_stream(&spec.name).await {
                Ok(existing) => {
                    let mut config = existing.cached_info().config.clone();
                    if config.subjects == spec.subjects {
                        return Ok(());
                    }
                    tracing::info!(
                        stream = %spec.name,
                        subjects = ?spec.subjects,
                        "updating the declared stream's subjects"
                    );
                    config.subjects.clone_from(&spec.subjects);
                    self.jetstream
                        .update_stream(&config)
                        .await
                        .map_err(|err| declare_error(&err))?;
                    Ok(())
                }
                Err(err) => match err.kind() {
                    jetstream::context::GetStreamErrorKind::JetStream(js)
                        if js.error_code().0 == STREAM_NOT_FOUND || js.code() == 404 =>
                    {
                        tracing::info!(stream = %spec.name, subjects = ?spec.subjects, "creating the declared stream");
                        self.jetstream
                            .create_stream(stream::Config {
                                name: spec.name.clone(),
                                subjects: spec.subjects.clone(),
                                ..Default::default()
                            })
                            .await
                            .map_err(|err| declare_error(&err))?;
                        Ok(())
                    }
                    _ => Err(declare_error(&err)),
                },
            }
        })
    }

    fn consume(&self, spec: ConsumerSpec) -> BoxFuture<'_, Result<Subscription, TransportError>> {
        Box::pin(async move {
            let consumer = self.open_consumer(&spec).await?;
            let info = consumer.cached_info();
            let lookahead = Lookahead {
                start: spec.batch,
                max: spec.batch.max(PULL_MAX),
                ack_wait: spec.ack_wait,
                expires: spec.expires,
            };
            let puller = Puller::open(
                self.client.clone(),
                &info.stream_name,
                &info.name,
                lookahead,
            )
            .await?;
            Ok(reading(Pumped::Pull(Box::new(puller))))
        })
    }

    fn settle_confirmed(
        &self,
        subject: Arc<str>,
        payload: Bytes,
    ) -> BoxFuture<'_, Result<(), TransportError>> {
        Box::pin(async move {
            let target = async_nats::Subject::from(&*subject);
            let asked = tokio::time::timeout(CONFIRM_TIMEOUT, self.client.request(target, payload));
            match asked.await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(err)) => Err(TransportError::new(
                    TransportErrorKind::Other,
                    format!("the server did not confirm the settlement on `{subject}`: {err}"),
                )),
                Err(_) => Err(TransportError::new(
                    TransportErrorKind::Other,
                    format!(
                        "the server did not confirm the settlement on `{subject}` within {CONFIRM_TIMEOUT:?}"
                    ),
                )),
            }
        })
    }

    fn resume(
        &self,
        spec: ConsumerSpec,
        start_sequence: u64,
    ) -> BoxFuture<'_, Result<Subscription, TransportError>> {
        Box::pin(async move {
            let deliver_policy = self.resume_policy(&spec, start_sequence).await;
            tracing::info!(
                stream = %spec.stream,
                consumer = spec.durable.as_deref().unwrap_or("(ephemeral)"),
                ?deliver_policy,
                "opening the consumer again from where the registration stood"
            );
            self.consume(ConsumerSpec {
                deliver_policy,
                ..spec
            })
            .await
        })
    }

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
                .map_err(|err| kv_error(&bucket, &key, "read", &err))?;
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
                Err(err) => Err(kv_error(&bucket, &key, "create", &err)),
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
                Err(err) => Err(kv_error(&bucket, &key, "update", &err)),
            }
        })
    }

    fn kv_delete(&self, bucket: String, key: String) -> BoxFuture<'_, Result<(), TransportError>> {
        Box::pin(async move {
            let store = self.kv_store(&bucket, None).await?;
            store
                .delete(key.as_str())
                .await
                .map_err(|err| kv_error(&bucket, &key, "delete", &err))
        })
    }
}

impl NatsTransport {
    /// Where a consumer opened again starts: at `start_sequence`, unless stream `spec.stream`
    /// holds fewer messages than that (it was created again and its sequences started over),
    /// then where `spec` says.
    async fn resume_policy(&self, spec: &ConsumerSpec, start_sequence: u64) -> DeliverPolicy {
        let Ok(mut stream) = self.jetstream.get_stream(&spec.stream).await else {
            // Opening the consumer will say what is wrong.
            return DeliverPolicy::ByStartSequence(start_sequence);
        };
        let last = match stream.info().await {
            Ok(info) => info.state.last_sequence,
            Err(_) => return DeliverPolicy::ByStartSequence(start_sequence),
        };
        if start_sequence > last.saturating_add(1) {
            tracing::warn!(
                stream = %spec.stream,
                last_sequence = last,
                start_sequence,
                "the stream holds fewer messages than where the registration stood (it was created again?): its consumer starts where the descriptor says"
            );
            return spec.deliver_policy;
        }
        DeliverPolicy::ByStartSequence(start_sequence)
    }
}

/// The consumer configuration `spec` asks for. `max_deliver` stays unset: the runtime counts
/// attempts itself.
fn consumer_config(spec: &ConsumerSpec) -> consumer::pull::Config {
    let (deliver_policy, _) = deliver_policy(spec.deliver_policy);
    consumer::pull::Config {
        durable_name: spec.durable.clone(),
        deliver_policy,
        ack_policy: consumer::AckPolicy::Explicit,
        ack_wait: spec.ack_wait,
        filter_subject: spec.filter_subject.clone(),
        max_ack_pending: spec.max_ack_pending.unwrap_or_default(),
        ..Default::default()
    }
}

fn deliver_policy(policy: DeliverPolicy) -> (consumer::DeliverPolicy, &'static str) {
    match policy {
        DeliverPolicy::New => (consumer::DeliverPolicy::New, "new"),
        DeliverPolicy::Last => (consumer::DeliverPolicy::Last, "last"),
        DeliverPolicy::LastPerSubject => {
            (consumer::DeliverPolicy::LastPerSubject, "last per subject")
        }
        DeliverPolicy::ByStartSequence(start_sequence) => (
            consumer::DeliverPolicy::ByStartSequence { start_sequence },
            "by start sequence",
        ),
        // `All`, and anything added later, starts from the beginning.
        _ => (consumer::DeliverPolicy::All, "all"),
    }
}

/// Refuses an existing durable whose settings the server cannot change in place.
fn check_immutable(spec: &ConsumerSpec, current: &consumer::Config) -> Result<(), TransportError> {
    let durable = spec.durable.as_deref().unwrap_or_default();
    let mut conflicts = Vec::new();
    if current.filter_subject != spec.filter_subject {
        conflicts.push(format!(
            "filter subject `{}` (the descriptor reads `{}`)",
            current.filter_subject, spec.filter_subject
        ));
    }
    let (wanted, wanted_name) = deliver_policy(spec.deliver_policy);
    // A start sequence is where the runtime created the durable again after it vanished (or
    // where it asks one created again to start): the deliver policy only says where a new
    // consumer starts, and an existing one goes on from its own position either way.
    let resumed = matches!(
        current.deliver_policy,
        consumer::DeliverPolicy::ByStartSequence { .. }
    ) || matches!(spec.deliver_policy, DeliverPolicy::ByStartSequence(_));
    if current.deliver_policy != wanted && !resumed {
        conflicts.push(format!(
            "deliver policy {:?} (the descriptor asks for {wanted_name})",
            current.deliver_policy
        ));
    }
    if current.deliver_subject.is_some() {
        conflicts.push("a deliver subject (it is a push consumer; RustStream pulls)".to_owned());
    }
    if current.ack_policy != consumer::AckPolicy::Explicit {
        conflicts.push(format!(
            "ack policy {:?} (RustStream settles each message: explicit)",
            current.ack_policy
        ));
    }
    if conflicts.is_empty() {
        return Ok(());
    }
    Err(TransportError::new(
        TransportErrorKind::ConsumerConflict,
        format!(
            "durable consumer `{durable}` of stream `{stream}` exists with {conflicts}, which cannot be changed in place; delete it (`nats consumer rm {stream} {durable}`) or give the descriptor another `.durable(..)` name",
            stream = spec.stream,
            conflicts = conflicts.join(" and "),
        ),
    ))
}

fn get_stream_error(name: &str, err: &jetstream::context::GetStreamError) -> TransportError {
    match err.kind() {
        jetstream::context::GetStreamErrorKind::JetStream(js)
            if js.error_code().0 == STREAM_NOT_FOUND || js.code() == 404 =>
        {
            TransportError::new(
                TransportErrorKind::StreamNotFound,
                format!("stream `{name}` does not exist"),
            )
        }
        jetstream::context::GetStreamErrorKind::InvalidStreamName
        | jetstream::context::GetStreamErrorKind::EmptyName => TransportError::new(
            TransportErrorKind::Invalid,
            format!("`{name}` is not a valid stream name"),
        ),
        _ => TransportError::new(
            TransportErrorKind::Other,
            format!("cannot read stream `{name}` (is JetStream enabled on the server?): {err}"),
        ),
    }
}

fn consumer_error(spec: &ConsumerSpec, err: &dyn std::error::Error) -> TransportError {
    let name = spec.durable.as_deref().unwrap_or("(ephemeral)");
    TransportError::new(
        TransportErrorKind::Other,
        format!(
            "cannot open consumer `{name}` of stream `{}` on `{}`: {err}",
            spec.stream, spec.filter_subject
        ),
    )
}

fn stored_publish_error(subject: &str, err: &jetstream::context::PublishError) -> TransportError {
    use jetstream::context::PublishErrorKind as K;
    let kind = match err.kind() {
        K::StreamNotFound => TransportErrorKind::NoStream,
        K::TimedOut => TransportErrorKind::TimedOut,
        K::WrongLastMessageId | K::WrongLastSequence | K::MaxPayloadExceeded => {
            TransportErrorKind::Refused
        }
        // The server's own refusals (limits with `discard: new`, an expectation) come as
        // `Other` with the server's description.
        K::Other
            if std::error::Error::source(err)
                .is_some_and(|source| source.is::<jetstream::Error>()) =>
        {
            TransportErrorKind::Refused
        }
        _ => TransportErrorKind::Other,
    };
    TransportError::new(kind, format!("stored publish to `{subject}` failed: {err}"))
}

/// `ruststream::Headers` as async-nats headers; a name or value NATS cannot carry is refused.
pub fn to_header_map(headers: &Headers) -> Result<HeaderMap, TransportError> {
    let mut map = HeaderMap::new();
    for (name, value) in headers.iter() {
        let header = HeaderName::from_str(name).map_err(|err| {
            TransportError::new(
                TransportErrorKind::Invalid,
                format!("`{name}` is not a valid header name: {err}"),
            )
        })?;
        let value = HeaderValue::from_str(value).map_err(|err| {
            TransportError::new(
                TransportErrorKind::Invalid,
                format!("the value of header `{name}` is not valid: {err}"),
            )
        })?;
        map.append(header, value);
    }
    Ok(map)
}

/// async-nats headers as `ruststream::Headers`, every value of every name.
pub fn from_header_map(map: Option<&HeaderMap>) -> Headers {
    let mut headers = Headers::new();
    if let Some(map) = map {
        for (name, values) in map.iter() {
            for value in values {
                headers.append(name.to_string(), value.as_str());
            }
        }
    }
    headers
}

fn raw(message: async_nats::Message) -> RawMessage {
    RawMessage {
        subject: Arc::from(message.subject.as_str()),
        reply: message.reply.map(|reply| Arc::from(reply.as_str())),
        headers: from_header_map(message.headers.as_ref()),
        payload: message.payload,
    }
}

/// What a subscription reads from.
enum Pumped {
    Core(async_nats::Subscriber),
    Pull(Box<Puller>),
}

type Item = Result<RawMessage, TransportError>;

/// `source`'s messages, read in the reader's own task (no task or channel in between): a message
/// leaves the client only when the runtime asks for the next one, which it does when a handler
/// is free.
fn reading(source: Pumped) -> Subscription {
    let (stop, stopped) = oneshot::channel();
    let state = Reading::Running {
        source,
        stop: stopped,
        subject: None,
    };
    (
        futures::stream::unfold(state, Reading::step).boxed(),
        Box::new(StopReading {
            request: Mutex::new(Some(stop)),
        }),
    )
}

/// Asks the stream to stop taking new messages: it does at its next read (the runtime reads
/// on at once, to hand over what the client still holds).
struct StopReading {
    request: Mutex<Option<oneshot::Sender<()>>>,
}

impl Unsubscribe for StopReading {
    fn stop(&self) -> BoxFuture<'_, ()> {
        if let Some(request) = self.request.lock().ok().and_then(|mut r| r.take()) {
            // An error means the stream is gone: it takes nothing either way.
            let _ = request.send(());
        }
        Box::pin(std::future::ready(()))
    }
}

enum Reading {
    Running {
        source: Pumped,
        stop: oneshot::Receiver<()>,
        /// The last message's subject: the next one's too, most of the time (shared, not
        /// copied again).
        subject: Option<Arc<str>>,
    },
    /// Stopped: the last messages of a drained Core subscription.
    Draining(async_nats::Subscriber),
    /// Stopped: what a pull had already brought into the client.
    Leftovers(std::vec::IntoIter<async_nats::Message>),
}

impl Reading {
    async fn step(mut self) -> Option<(Item, Self)> {
        loop {
            self = match self {
                Self::Running {
                    mut source,
                    mut stop,
                    mut subject,
                } => {
                    tokio::select! {
                        biased;
                        // Asked to stop, or the handle is gone.
                        _ = &mut stop => Self::stopped(source).await,
                        item = next(&mut source) => {
                            let item = item?.map(|message| raw_sharing(message, &mut subject));
                            return Some((item, Self::Running { source, stop, subject }));
                        }
                    }
                }
                Self::Draining(mut subscriber) => {
                    let message = subscriber.next().await?;
                    return Some((Ok(raw(message)), Self::Draining(subscriber)));
                }
                Self::Leftovers(mut rest) => {
                    let message = rest.next()?;
                    return Some((Ok(raw(message)), Self::Leftovers(rest)));
                }
            };
        }
    }

    /// Takes no new messages from `source`; what the client already holds is still handed
    /// over.
    async fn stopped(source: Pumped) -> Self {
        match source {
            Pumped::Core(mut subscriber) => {
                if let Err(err) = subscriber.drain().await {
                    // The connection is gone, and with it the subscription: the stream ends.
                    tracing::debug!(%err, "draining a subscription failed");
                }
                Self::Draining(subscriber)
            }
            // Nothing more is asked for; the inbox closes with the puller.
            Pumped::Pull(mut puller) => Self::Leftovers(puller.ready().into_iter()),
        }
    }
}

async fn next(source: &mut Pumped) -> Option<Result<async_nats::Message, TransportError>> {
    match source {
        Pumped::Core(subscriber) => subscriber.next().await.map(Ok),
        Pumped::Pull(puller) => puller.next().await,
    }
}

/// [`raw`], sharing the subject with the previous message when it is the same.
fn raw_sharing(message: async_nats::Message, last: &mut Option<Arc<str>>) -> RawMessage {
    let subject = match last {
        Some(subject) if **subject == *message.subject => Arc::clone(subject),
        _ => Arc::clone(last.insert(Arc::from(message.subject.as_str()))),
    };
    RawMessage {
        subject,
        reply: message.reply.map(|reply| Arc::from(reply.as_str())),
        headers: from_header_map(message.headers.as_ref()),
        payload: message.payload,
    }
}

impl NatsTransport {
    /// For `check`: whether durable consumer `durable` of `stream` exists and agrees with a
    /// registration reading `filter` (the settings the server cannot change in place), changing
    /// nothing. Says what it found.
    pub(crate) async fn check_durable(
        &self,
        stream: &str,
        durable: &str,
        filter: &str,
    ) -> Result<String, TransportError> {
        let handle = self
            .jetstream
            .get_stream(stream)
            .await
            .map_err(|err| get_stream_error(stream, &err))?;
        let existing = match handle.consumer_info(durable).await {
            Ok(info) => info,
            Err(err) => match err.kind() {
                jetstream::context::ConsumerInfoErrorKind::NotFound => {
                    return Ok(format!(
                        "durable consumer `{durable}` does not exist yet; it is created at startup"
                    ));
                }
                jetstream::context::ConsumerInfoErrorKind::JetStream(js) if js.code() == 404 => {
                    return Ok(format!(
                        "durable consumer `{durable}` does not exist yet; it is created at startup"
                    ));
                }
                _ => {
                    return Err(TransportError::new(
                        TransportErrorKind::Other,
                        format!("cannot read consumer `{durable}` of stream `{stream}`: {err}"),
                    ));
                }
            },
        };
        let mut conflicts = Vec::new();
        if existing.config.filter_subject != filter {
            conflicts.push(format!(
                "filter subject `{}` (the descriptor reads `{filter}`)",
                existing.config.filter_subject
            ));
        }
        if existing.config.deliver_subject.is_some() {
            conflicts
                .push("a deliver subject (it is a push consumer; RustStream pulls)".to_owned());
        }
        if existing.config.ack_policy != consumer::AckPolicy::Explicit {
            conflicts.push(format!(
                "ack policy {:?} (RustStream settles each message: explicit)",
                existing.config.ack_policy
            ));
        }
        if conflicts.is_empty() {
            return Ok(format!(
                "durable consumer `{durable}` exists and agrees with the descriptor"
            ));
        }
        Err(TransportError::new(
            TransportErrorKind::ConsumerConflict,
            format!(
                "durable consumer `{durable}` of stream `{stream}` exists with {}, which cannot be changed in place; delete it (`nats consumer rm {stream} {durable}`) or give the descriptor another `.durable(..)` name",
                conflicts.join(" and ")
            ),
        ))
    }
}

fn kv_error(bucket: &str, key: &str, what: &str, err: &dyn std::fmt::Display) -> TransportError {
    TransportError::new(
        TransportErrorKind::Other,
        format!("cannot {what} key `{key}` of key-value bucket `{bucket}`: {err}"),
    )
}
