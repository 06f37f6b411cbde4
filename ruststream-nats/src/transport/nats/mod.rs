//! The production transport: one async-nats client, for Core NATS and JetStream.
//!
//! A subscription or a pull consumer is read in the runtime's own task, straight from the
//! client's buffer (no task or channel in between, which cost more per message than the rest of
//! the delivery path): the runtime asks for the next message only when a handler is free, and
//! a batch handler finds what arrived together ready at once. A pull consumer is read by the
//! puller of `pull.rs`, which says how much it asks the server for. Stopping
//! ([`Unsubscribe::stop`]) takes effect at the stream's next read, the same way for both:
//!
//! - Core: the subscription is drained (unsubscribed on the server); the messages the client
//!   already received are still handed over, then the stream ends.
//! - JetStream: the continuous pull stops, takes in what was already pulled into the client and
//!   what was still on its way (`pull.rs`, "Stopping"), closes its inbox, hands all of it over,
//!   then the stream ends. They are deliveries like any other: the runtime handles them (and
//!   were it to drop them, the server would deliver them again after `ack_wait`).
//!
//! One concept a file: `streams.rs` (listing, finding and declaring streams), `consumer.rs`
//! (opening, resuming and checking pull consumers),
//! `kv.rs` (key-value buckets), `bounded.rs` (a Core subscription held to
//! `.subscription_capacity(n)`), `answer.rs` (a stream's answer to a stored publish), `homes.rs`
//! (stored publishes' futures kept for the next one), `pull.rs` (the continuous pull of one
//! consumer), `reading.rs` (reading a subscription or a pull in the runtime's
//! task, and stopping it), `headers.rs` (headers to and from async-nats), `errors.rs` (async-nats
//! errors as [`TransportError`]s). This file holds the transport and its Core and JetStream
//! publishes; `streams.rs`, `consumer.rs` and `kv.rs` hold the other capabilities' impls.

mod answer;
mod bounded;
mod consumer;
mod errors;
mod headers;
mod homes;
mod kv;
mod pull;
mod reading;
mod streams;

use std::sync::Arc;
use std::time::Duration;

use async_nats::{HeaderMap, jetstream};
use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;
use ruststream::{BoxError, Headers};

use self::answer::read_stored_ack;
use self::errors::{stored_publish_error, stored_request_error};
pub use self::headers::{from_header_map, to_header_map};
use self::homes::Homes;
use self::reading::{Pumped, raw, reading};
use super::{
    CorePubSub, JetStreamPublish, RawMessage, Refusal, StoredAck, Subscription, Target,
    TransportError, TransportErrorKind,
};
use crate::events::{Events, subscription_id};

/// How long [`NatsTransport::round_trip`] waits for the server.
const ROUND_TRIP_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a stored publish waits for the stream's acknowledgement: async-nats's JetStream
/// default, which it waited before [`NatsTransport::stored`] sent the request itself.
const STORED_ACK_TIMEOUT: Duration = Duration::from_secs(5);

/// [`Transport`](super::Transport) over one async-nats client: Core publishes and
/// subscriptions, and JetStream (streams, pull consumers, stored publishes) on the same
/// connection.
#[derive(Clone)]
pub struct NatsTransport {
    /// Shared, so that a stored publish's future owns its client (and can be kept in
    /// `homes` after it finished) for the price of one reference count.
    client: Arc<async_nats::Client>,
    /// The finished stored publishes' boxes, for the next ones (`homes.rs`).
    homes: Arc<Homes>,
    jetstream: jetstream::Context,
    /// Where Core subscriptions are recorded, to name them when they drop messages.
    events: Option<Arc<Events>>,
    /// `.subscription_capacity(n)`: how many messages a Core subscription keeps for its
    /// handlers (`bounded.rs`); `None`: async-nats's buffer alone.
    core_capacity: Option<usize>,
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
            client: Arc::new(client),
            homes: Arc::default(),
            jetstream,
            events: None,
            core_capacity: None,
            kv: Arc::default(),
        }
    }

    /// Records each Core subscription in `events`, which reports what it drops.
    pub(crate) fn with_events(mut self, events: Arc<Events>) -> Self {
        self.events = Some(events);
        self
    }

    /// Keeps at most `capacity` messages for each Core subscription's handlers, counting what
    /// it drops past that (`bounded.rs`); JetStream pulls are not bounded by it.
    pub(crate) fn with_core_capacity(mut self, capacity: Option<usize>) -> Self {
        self.core_capacity = capacity;
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
        let failed = |what: &str, err: BoxError| {
            TransportError::new(
                TransportErrorKind::Other,
                format!("the server did not confirm the subscription ({what})"),
            )
            .with_cause(err)
        };
        let subject = self.client.new_inbox();
        let mut echo = self
            .client
            .subscribe(subject.clone())
            .await
            .map_err(|err| failed("subscribe", err.into()))?;
        self.client
            .publish(subject, bytes::Bytes::new())
            .await
            .map_err(|err| failed("publish", err.into()))?;
        self.client
            .flush()
            .await
            .map_err(|err| failed("flush", err.into()))?;
        let answered = tokio::time::timeout(ROUND_TRIP_TIMEOUT, echo.next()).await;
        let _ = echo.unsubscribe().await;
        match answered {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(failed("echo", "the connection closed".into())),
            Err(_) => Err(failed("echo", "no answer in time".into())),
        }
    }

    /// Publishes to a stream and waits for its acknowledgement ([`stored`]), in a kept home
    /// (`homes.rs`): what [`JetStreamPublish::publish_stored`] and
    /// [`JetStreamPublish::publish_confirmed`]
    /// do.
    fn stored(
        &self,
        subject: Target,
        headers: HeaderMap,
        payload: Bytes,
    ) -> impl Future<Output = Result<StoredAck, TransportError>> + Send + '_ {
        let client = Arc::clone(&self.client);
        self.homes
            .run(move || stored(client, subject, headers, payload))
    }
}

/// Publishes to a stream and waits for its acknowledgement. `headers` carry the trace context
/// already (taken when the publish is asked for, not when it is polled).
///
/// The same message on the wire as async-nats's JetStream publish (a request on the client's
/// shared inbox, answered by the stream), and the same errors (`answer.rs`), without what
/// that publish adds around it for every message: an in-flight permit, a boxed
/// acknowledgement future, and a generic reading of the answer that buffers it whole, tries
/// it as an error first and formats that attempt's failure (the cost: `docs/benchmarks.md`,
/// "Confirmed reply to a stream"). The
/// request waits for room in the client's command queue as every Core publish does, then up
/// to [`STORED_ACK_TIMEOUT`] for the answer. It owns its client (a shared one), so that its
/// box can be kept for the next publish ([`NatsTransport::stored`]).
async fn stored(
    client: Arc<async_nats::Client>,
    subject: Target,
    headers: HeaderMap,
    payload: Bytes,
) -> Result<StoredAck, TransportError> {
    let request = async_nats::Request::new()
        .headers(headers)
        .payload(payload)
        .timeout(Some(STORED_ACK_TIMEOUT));
    let answer = client
        .send_request(nats_subject(&subject), request)
        .await
        .map_err(|err| stored_publish_error(&subject, stored_request_error(err)))?;
    read_stored_ack(&answer.payload).map_err(|err| stored_publish_error(&subject, err))
}

/// `subject` as async-nats keeps it: a static subject as it is, a shared one copied once
/// (async-nats keeps subjects as bytes).
fn nats_subject(subject: &Target) -> async_nats::Subject {
    match subject {
        Target::Static(subject) => async_nats::Subject::from_static(subject),
        Target::Shared(subject) => async_nats::Subject::from(&**subject),
    }
}

/// A Core publish of one message to `$subject` (a [`Target`]) with `$headers` (an async-nats
/// `HeaderMap`, sent only when not empty), as a `Result<(), TransportError>`: the one body of
/// `publish` and `publish_each`. A macro, not an `async fn`: a nested future would move the
/// arguments once more on every publish and make `publish_each`'s boxed future larger than
/// the allocator's small-size caches (`docs/benchmarks.md`, "Request/reply, one at a time").
macro_rules! core_publish {
    ($client:expr, $subject:expr, $headers:expr, $payload:expr) => {{
        let subject: &Target = $subject;
        let headers: HeaderMap = $headers;
        let target = nats_subject(subject);
        let result = if headers.is_empty() {
            drop(headers);
            $client.publish(target, $payload).await
        } else {
            $client
                .publish_with_headers(target, headers, $payload)
                .await
        };
        result.map_err(|err| core_publish_error(subject, err))
    }};
}

/// A Core publish's error from async-nats as a [`TransportError`].
fn core_publish_error(subject: &str, err: async_nats::client::PublishError) -> TransportError {
    use async_nats::client::PublishErrorKind as K;
    let message = format!("publishing to `{subject}` failed");
    match err.kind() {
        K::InvalidSubject => TransportError::new(TransportErrorKind::Invalid, message),
        K::MaxPayloadExceeded => TransportError::refused(Refusal::TooLarge, message),
        _ => TransportError::new(TransportErrorKind::Other, message),
    }
    .with_cause(err)
}

impl CorePubSub for NatsTransport {
    fn publish(
        &self,
        subject: Arc<str>,
        headers: Headers,
        payload: Bytes,
    ) -> BoxFuture<'_, Result<(), TransportError>> {
        let headers = to_header_map(&crate::telemetry::with_context(headers));
        Box::pin(
            async move { core_publish!(self.client, &Target::Shared(subject), headers?, payload) },
        )
    }

    fn publish_each<'a>(
        &'a self,
        subjects: &'a [Target],
        headers: &'a Headers,
        payload: Bytes,
    ) -> BoxFuture<'a, Result<(), (usize, TransportError)>> {
        // Converted once, before the future is made: the first subjects get a clone of the
        // map (what async-nats takes by value), the last one the map itself.
        let converted = self::headers::header_map_with_context(headers);
        Box::pin(async move {
            let last = subjects.len().saturating_sub(1);
            // Headers NATS cannot carry fail before anything is sent; the error names the last
            // subject, the output a response goes before (the inbox's headers are the same).
            let mut map = converted.map_err(|err| (last, err))?;
            for (index, subject) in subjects.iter().enumerate() {
                let headers = if index == last {
                    std::mem::take(&mut map)
                } else {
                    map.clone()
                };
                core_publish!(self.client, subject, headers, payload.clone())
                    .map_err(|err| (index, err))?;
            }
            Ok(())
        })
    }

    // async-nats's `publish` sends the message to the connection's task, which writes it.
    fn hands_writes_to_a_task(&self) -> bool {
        true
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
                    let (kind, why) = match err.kind() {
                        K::NoResponders => {
                            (TransportErrorKind::NoResponders, "nobody listens on it")
                        }
                        K::TimedOut => (TransportErrorKind::TimedOut, "no response in time"),
                        K::InvalidSubject => {
                            (TransportErrorKind::Invalid, "the subject is not valid")
                        }
                        _ => (TransportErrorKind::Other, "the client could not send it"),
                    };
                    TransportError::new(kind, format!("the request to `{subject}` failed ({why})"))
                        .with_cause(err)
                })?;
            Ok(raw(response, None))
        })
    }

    fn flush(&self) -> BoxFuture<'_, Result<(), TransportError>> {
        Box::pin(async move {
            self.client.flush().await.map_err(|err| {
                TransportError::new(TransportErrorKind::Other, "flush failed").with_cause(err)
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
                TransportError::new(kind, format!("cannot subscribe to `{subject}`"))
                    .with_cause(err)
            })?;
            // The subscription is registered on the server before this returns: a message
            // published afterwards, from any connection, reaches it.
            self.round_trip().await.map_err(|err| {
                TransportError::new(
                    TransportErrorKind::Other,
                    format!("cannot subscribe to `{subject}`"),
                )
                .with_cause(err)
            })?;
            let sid = subscription_id(&subscriber);
            if let Some(events) = &self.events {
                match sid {
                    Some(sid) => events.subscribed(sid, &subject, queue_group.as_deref()),
                    None => tracing::debug!(
                        subject = %subject,
                        "the subscription's id is unknown: messages it drops are not counted"
                    ),
                }
            }
            Ok(match self.core_capacity {
                Some(capacity) => bounded::bounded(subscriber, capacity, self.events.clone(), sid),
                None => reading(Pumped::Core(subscriber)),
            })
        })
    }
}

impl JetStreamPublish for NatsTransport {
    fn publish_stored(
        &self,
        subject: Arc<str>,
        headers: Headers,
        payload: Bytes,
    ) -> BoxFuture<'_, Result<u64, TransportError>> {
        let headers = to_header_map(&crate::telemetry::with_context(headers));
        Box::pin(async move {
            let ack = self
                .stored(Target::Shared(subject), headers?, payload)
                .await?;
            Ok(ack.sequence)
        })
    }

    fn publish_confirmed(
        &self,
        subject: Arc<str>,
        headers: Headers,
        payload: Bytes,
    ) -> BoxFuture<'_, Result<StoredAck, TransportError>> {
        match to_header_map(&crate::telemetry::with_context(headers)) {
            Ok(headers) => Box::pin(self.stored(Target::Shared(subject), headers, payload)),
            Err(err) => Box::pin(std::future::ready(Err(err))),
        }
    }

    fn publish_confirmed_lent(
        &self,
        subject: Target,
        headers: &Headers,
        msg_id: Option<String>,
        payload: Bytes,
    ) -> BoxFuture<'_, Result<StoredAck, TransportError>> {
        // Converted before the future is made, so that the boxed future is the publish's own
        // rather than an `async` block wrapping it (one state machine fewer to move).
        let converted = self::headers::header_map_with_context(headers).and_then(|mut map| {
            if let Some(id) = msg_id {
                self::headers::insert_msg_id(&mut map, id)?;
            }
            Ok(map)
        });
        match converted {
            Ok(headers) => Box::pin(self.stored(subject, headers, payload)),
            Err(err) => Box::pin(std::future::ready(Err(err))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`stored`]'s future is what every stored output writes into its home (`homes.rs`), and
    /// what each kept home holds. A new async-nats version or another await in `stored` that makes it larger should be a
    /// choice, not an accident.
    #[tokio::test]
    async fn a_stored_publish_does_not_grow_unnoticed() {
        // Connecting in the background: nothing is sent, the future is only measured.
        let client = async_nats::ConnectOptions::new()
            .retry_on_initial_connect()
            .connect("nats://127.0.0.1:1")
            .await
            .expect("a client that connects later");
        let transport = NatsTransport::new(client);
        let publish = stored(
            Arc::clone(&transport.client),
            Target::Static("orders.placed"),
            HeaderMap::new(),
            Bytes::new(),
        );
        let size = std::mem::size_of_val(&publish);
        assert!(
            size <= 1280,
            "the stored publish's future is {size} bytes; it was 1 256"
        );
    }
}
