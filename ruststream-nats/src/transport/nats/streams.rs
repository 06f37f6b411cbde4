//! Streams on the production transport: listing them, asking whether one exists or which one
//! stores a subject, and declaring one (created, or its subjects updated).

use async_nats::jetstream::{self, stream};
use futures::StreamExt;
use ruststream::BoxError;

use super::NatsTransport;
use super::errors::{get_stream_error, is_stream_not_found};
use crate::transport::{StreamSpec, TransportError, TransportErrorKind};

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

    /// Creates stream `spec`, or updates its subjects.
    pub(super) async fn declare(&self, spec: StreamSpec) -> Result<(), TransportError> {
        let declare_error = |err: BoxError| {
            TransportError::new(
                TransportErrorKind::Other,
                format!("cannot declare stream `{}`", spec.name),
            )
            .with_cause(err)
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
                    .map_err(|err| declare_error(err.into()))?;
                Ok(())
            }
            Err(err) if is_stream_not_found(&err) => {
                tracing::info!(stream = %spec.name, subjects = ?spec.subjects, "creating the declared stream");
                self.jetstream
                    .create_stream(stream::Config {
                        name: spec.name.clone(),
                        subjects: spec.subjects.clone(),
                        ..Default::default()
                    })
                    .await
                    .map_err(|err| declare_error(err.into()))?;
                Ok(())
            }
            Err(err) => Err(declare_error(err.into())),
        }
    }
}
