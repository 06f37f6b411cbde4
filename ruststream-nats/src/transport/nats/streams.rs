//! Streams on the production transport: listing them, asking whether one exists or which one
//! stores a subject, and declaring one (created with its limits, or the subjects it lacks
//! added and its limits raised).

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use futures::StreamExt;
use futures::future::BoxFuture;
use ruststream::BoxError;

use super::NatsTransport;
use super::errors::{get_stream_error, is_stream_not_found};
use crate::transport::{
    Limits, StreamAdmin, StreamChanges, StreamDeclaration, StreamSpec, TransportError,
    TransportErrorKind, add_subjects,
};

/// The duplicate window a stream has when its config leaves it zero.
const DEFAULT_DUPLICATE_WINDOW: Duration = Duration::from_secs(120);

impl NatsTransport {
    /// Every stream and the subjects it stores.
    pub(super) async fn list_streams(&self) -> Result<Vec<StreamSpec>, TransportError> {
        let failed = |err: BoxError| {
            TransportError::new(TransportErrorKind::Other, "cannot list the streams")
                .with_cause(err)
        };
        let mut listed = self.jetstream.streams();
        let mut streams = Vec::new();
        while let Some(info) = listed.next().await {
            let info = info.map_err(|err| failed(err.into()))?;
            streams.push(StreamSpec {
                name: info.config.name,
                subjects: info.config.subjects,
            });
        }
        Ok(streams)
    }

    /// Whether stream `name` exists.
    pub(super) async fn has_stream(&self, name: &str) -> Result<bool, TransportError> {
        match self.jetstream.get_stream(name).await {
            Ok(_) => Ok(true),
            Err(err) if is_stream_not_found(&err) => Ok(false),
            Err(err) => Err(get_stream_error(name, err)),
        }
    }

    /// The stream that stores `subject`, if any.
    pub(super) async fn storing(&self, subject: &str) -> Result<Option<String>, TransportError> {
        match self.jetstream.stream_by_subject(subject).await {
            Ok(name) => Ok(Some(name)),
            Err(err) => match err.kind() {
                jetstream::context::GetStreamByNameErrorKind::NotFound => Ok(None),
                _ => Err(TransportError::new(
                    TransportErrorKind::Other,
                    format!("cannot ask which stream stores `{subject}`"),
                )
                .with_cause(err)),
            },
        }
    }

    /// Creates stream `spec`, or adds the subjects it lacks.
    pub(super) async fn declare(&self, spec: StreamSpec) -> Result<(), TransportError> {
        self.declare_with(spec.into()).await.map(drop)
    }

    /// Creates the declared stream with its limits, or adds the subjects it lacks to the
    /// existing one and raises its limits below the declared ones; returns what changed.
    pub(super) async fn declare_with(
        &self,
        declared: StreamDeclaration,
    ) -> Result<StreamChanges, TransportError> {
        let declare_error = |err: BoxError| {
            TransportError::new(
                TransportErrorKind::Other,
                format!("cannot declare stream `{}`", declared.name),
            )
            .with_cause(err)
        };
        match self.jetstream.get_stream(&declared.name).await {
            Ok(existing) => {
                let mut config = existing.cached_info().config.clone();
                let mut changes = StreamChanges {
                    added_subjects: add_subjects(&mut config.subjects, &declared.subjects),
                    ..StreamChanges::default()
                };
                let mut limits = limits_of(&config);
                limits.raise_to(&declared.limits(), &mut changes);
                if changes.changed() {
                    apply(&mut config, &limits);
                    self.jetstream
                        .update_stream(&config)
                        .await
                        .map_err(|err| declare_error(err.into()))?;
                }
                Ok(changes)
            }
            Err(err) if is_stream_not_found(&err) => {
                tracing::info!(stream = %declared.name, subjects = ?declared.subjects, "creating the declared stream");
                let mut config = stream::Config {
                    name: declared.name.clone(),
                    subjects: declared.subjects.clone(),
                    ..Default::default()
                };
                apply(&mut config, &declared.limits());
                self.jetstream
                    .create_stream(config)
                    .await
                    .map_err(|err| declare_error(err.into()))?;
                Ok(StreamChanges::default())
            }
            Err(err) => Err(declare_error(err.into())),
        }
    }
}

/// The limits of a stream's config (zero or negative is unlimited; a zero duplicate window is
/// the server's two minutes).
fn limits_of(config: &stream::Config) -> Limits {
    let positive = |n: i64| u64::try_from(n).ok().filter(|n| *n > 0);
    let duration = |d: Duration| (!d.is_zero()).then_some(d);
    Limits {
        replicas: Some(u64::try_from(config.num_replicas.max(1)).unwrap_or(u64::MAX)),
        max_age: duration(config.max_age),
        max_bytes: positive(config.max_bytes),
        max_messages: positive(config.max_messages),
        duplicate_window: duration(config.duplicate_window).or(Some(DEFAULT_DUPLICATE_WINDOW)),
    }
}

/// Sets the limits `limits` has in `config`, leaving the others.
fn apply(config: &mut stream::Config, limits: &Limits) {
    let signed = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    if let Some(replicas) = limits.replicas {
        config.num_replicas = usize::try_from(replicas).unwrap_or(usize::MAX);
    }
    if let Some(max_age) = limits.max_age {
        config.max_age = max_age;
    }
    if let Some(max_bytes) = limits.max_bytes {
        config.max_bytes = signed(max_bytes);
    }
    if let Some(max_messages) = limits.max_messages {
        config.max_messages = signed(max_messages);
    }
    if let Some(window) = limits.duplicate_window {
        config.duplicate_window = window;
    }
}

impl StreamAdmin for NatsTransport {
    fn streams(&self) -> BoxFuture<'_, Result<Vec<StreamSpec>, TransportError>> {
        Box::pin(self.list_streams())
    }

    fn stream_exists(&self, name: &str) -> BoxFuture<'_, Result<bool, TransportError>> {
        let name = name.to_owned();
        Box::pin(async move { self.has_stream(&name).await })
    }

    fn stream_by_subject(
        &self,
        subject: &str,
    ) -> BoxFuture<'_, Result<Option<String>, TransportError>> {
        let subject = subject.to_owned();
        Box::pin(async move { self.storing(&subject).await })
    }

    fn declare_stream(&self, spec: StreamSpec) -> BoxFuture<'_, Result<(), TransportError>> {
        Box::pin(self.declare(spec))
    }

    fn declare_stream_with(
        &self,
        declaration: StreamDeclaration,
    ) -> BoxFuture<'_, Result<StreamChanges, TransportError>> {
        Box::pin(self.declare_with(declaration))
    }
}
