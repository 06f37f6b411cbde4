//! Pull consumers on the production transport: opening a durable (created, kept, updated, or
//! refused when a setting the server cannot change differs), resuming one that vanished, and
//! `check`'s read-only look at a durable.

use async_nats::jetstream::consumer::FromConsumer;
use async_nats::jetstream::{self, consumer};

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use ruststream::Headers;

use super::errors::{consumer_error, get_stream_error};
use super::pull::{Lookahead, Puller};
use super::reading::{Pumped, reading};
use super::{NatsTransport, core_publish_error};
use crate::transport::DeliverPolicy;
use crate::transport::{
    ConsumerSpec, CorePubSub, PullConsumer, ReplySubject, StreamPlace, Subscription,
    TransportError, TransportErrorKind,
};

/// The most messages a registration of single messages keeps ahead of its handlers (a batch
/// handler: its batch size, when larger). `pull.rs` says how much it actually keeps.
const PULL_MAX: usize = 256;

/// How long a confirmed settlement waits for the server's answer.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(2);

impl NatsTransport {
    /// Where the durable consumer `spec` stands: created, kept, updated, or in conflict.
    pub(super) async fn open_consumer(
        &self,
        spec: &ConsumerSpec,
    ) -> Result<consumer::PullConsumer, TransportError> {
        let stream = self
            .jetstream
            .get_stream(&spec.stream)
            .await
            .map_err(|err| get_stream_error(&spec.stream, err))?;
        let wanted = consumer_config(spec);
        let Some(durable) = &spec.durable else {
            return stream
                .create_consumer(wanted)
                .await
                .map_err(|err| consumer_error(spec, err));
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
                            "cannot read consumer `{durable}` of stream `{}`",
                            spec.stream
                        ),
                    )
                    .with_cause(err));
                }
            },
        };
        let Some(existing) = existing else {
            return stream
                .create_consumer(wanted)
                .await
                .map_err(|err| consumer_error(spec, err));
        };
        check_immutable(spec, &existing.config)?;
        let current = consumer::pull::Config::try_from_consumer_config(existing.config)
            .map_err(|err| consumer_error(spec, err))?;
        let mut updated = current.clone();
        updated.ack_wait = spec.ack_wait;
        if let Some(max) = spec.max_ack_pending {
            updated.max_ack_pending = max;
        }
        if updated == current {
            return stream
                .get_consumer(durable)
                .await
                .map_err(|err| consumer_error(spec, err));
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
            .map_err(|err| consumer_error(spec, err))
    }

    /// Which stream `stream` is now: its creation time and its first sequence.
    pub(super) async fn place_of(&self, stream: &str) -> Result<StreamPlace, TransportError> {
        let mut handle = self
            .jetstream
            .get_stream(stream)
            .await
            .map_err(|err| get_stream_error(stream, err))?;
        let info = handle.info().await.map_err(|err| {
            TransportError::new(
                TransportErrorKind::Other,
                format!("cannot read the info of stream `{stream}`"),
            )
            .with_cause(err)
        })?;
        Ok(StreamPlace {
            created: format!("{:?}", info.created),
            first_sequence: info.state.first_sequence,
            messages: info.state.messages,
        })
    }

    /// Where a consumer opened again starts: at `start_sequence`, unless stream `spec.stream`
    /// holds fewer messages than that (it was created again and its sequences started over),
    /// then where `spec` says.
    pub(super) async fn resume_policy(
        &self,
        spec: &ConsumerSpec,
        start_sequence: u64,
    ) -> DeliverPolicy {
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
            .map_err(|err| get_stream_error(stream, err))?;
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
                        format!("cannot read consumer `{durable}` of stream `{stream}`"),
                    )
                    .with_cause(err));
                }
            },
        };
        let conflicts = fixed_conflicts(&existing.config, filter, None);
        if conflicts.is_empty() {
            return Ok(format!(
                "durable consumer `{durable}` exists and agrees with the descriptor"
            ));
        }
        Err(conflict_error(stream, durable, &conflicts))
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
    let (wanted, wanted_name) = deliver_policy(spec.deliver_policy);
    // A start sequence is where the runtime created the durable again after it vanished (or
    // where it asks one created again to start): the deliver policy only says where a new
    // consumer starts, and an existing one goes on from its own position either way.
    let resumed = matches!(
        current.deliver_policy,
        consumer::DeliverPolicy::ByStartSequence { .. }
    ) || matches!(spec.deliver_policy, DeliverPolicy::ByStartSequence(_));
    let policy = (current.deliver_policy != wanted && !resumed).then(|| {
        format!(
            "deliver policy {:?} (the descriptor asks for {wanted_name})",
            current.deliver_policy
        )
    });
    let conflicts = fixed_conflicts(current, &spec.filter_subject, policy);
    if conflicts.is_empty() {
        return Ok(());
    }
    Err(conflict_error(&spec.stream, durable, &conflicts))
}

/// What an existing durable has that the server cannot change in place and that differs from
/// what a registration reading `filter` needs: the filter subject, `policy` (the deliver
/// policy, when the caller compares it), a deliver subject, the ack policy; in that order.
fn fixed_conflicts(
    current: &consumer::Config,
    filter: &str,
    policy: Option<String>,
) -> Vec<String> {
    let mut conflicts = Vec::new();
    if current.filter_subject != filter {
        conflicts.push(format!(
            "filter subject `{}` (the descriptor reads `{filter}`)",
            current.filter_subject
        ));
    }
    conflicts.extend(policy);
    if current.deliver_subject.is_some() {
        conflicts.push("a deliver subject (it is a push consumer; RustStream pulls)".to_owned());
    }
    if current.ack_policy != consumer::AckPolicy::Explicit {
        conflicts.push(format!(
            "ack policy {:?} (RustStream settles each message: explicit)",
            current.ack_policy
        ));
    }
    conflicts
}

/// A durable whose `conflicts` the server cannot change in place, and what to do about it.
fn conflict_error(stream: &str, durable: &str, conflicts: &[String]) -> TransportError {
    TransportError::new(
        TransportErrorKind::ConsumerConflict,
        format!(
            "durable consumer `{durable}` of stream `{stream}` exists with {}, which cannot be changed in place; delete it (`nats consumer rm {stream} {durable}`) or give the descriptor another `.durable(..)` name",
            conflicts.join(" and ")
        ),
    )
}

impl PullConsumer for NatsTransport {
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
                (*self.client).clone(),
                &info.stream_name,
                &info.name,
                lookahead,
            )
            .await?;
            if let (Some(events), Some(sid)) = (&self.events, puller.sid()) {
                events.pulling(sid, &info.name, &info.stream_name);
            }
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
                    format!("the server did not confirm the settlement on `{subject}`"),
                )
                .with_cause(err)),
                Err(_) => Err(TransportError::new(
                    TransportErrorKind::Other,
                    format!(
                        "the server did not confirm the settlement on `{subject}` within {CONFIRM_TIMEOUT:?}"
                    ),
                )),
            }
        })
    }

    fn acknowledge(
        &self,
        subject: &ReplySubject,
        payload: Bytes,
    ) -> BoxFuture<'_, Result<(), TransportError>> {
        let headers = crate::telemetry::with_context(Headers::new());
        if !headers.is_empty() {
            // A trace context to carry: published as any message with headers.
            return self.publish(subject.to_shared(), headers, payload);
        }
        let subject = subject.clone();
        Box::pin(async move {
            // The delivery's own subject, as the client handed it over: no copy.
            self.client
                .publish(subject.to_client(), payload)
                .await
                .map_err(|err| core_publish_error(&subject, err))
        })
    }

    fn stream_place(
        &self,
        stream: String,
    ) -> BoxFuture<'_, Result<Option<StreamPlace>, TransportError>> {
        Box::pin(async move { self.place_of(&stream).await.map(Some) })
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
}
