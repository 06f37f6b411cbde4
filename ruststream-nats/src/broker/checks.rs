//! What the broker checks and says against the server before it starts serving: `check`'s
//! read-only look, every JetStream registration's stream, dead letters no stream stores, and
//! which outputs are stored.

use ruststream::registration::RegistrationInfo;
use ruststream::settle::DeliveryModel;
use ruststream::{Endpoint, Error, ErrorKind};

use crate::publish::NatsPublisher;
use crate::transport::nats::NatsTransport;
use crate::transport::{StreamSpec, Transport};

/// `check` against the server, changing nothing: every stream a JetStream registration reads
/// exists or is declared, and every durable consumer that exists agrees with its descriptor.
pub(super) async fn check_on_server(
    transport: &NatsTransport,
    registrations: &[RegistrationInfo],
    declared: &[StreamSpec],
) -> Result<Vec<String>, Error> {
    let mut done = Vec::new();
    for info in registrations {
        let dead_letter = info
            .policy
            .dead_letter
            .as_deref()
            .map(|dl| ("dead letters", dl, dl.to_owned()));
        // A template (`orders.{tenant}.placed`) is asked as the pattern it fills.
        let outputs = info
            .output_patterns()
            .into_iter()
            .map(|(subject, pattern)| ("outputs", subject, pattern));
        for (what, subject, asked) in dead_letter.into_iter().chain(outputs) {
            done.push(match transport.stream_by_subject(&asked).await {
                Ok(Some(stream)) => format!(
                    "{what} of registration `{}` go to `{subject}`, stored in stream `{stream}`: each publish waits for the stream's acknowledgement before the delivery is settled",
                    info.name
                ),
                Ok(None) => format!(
                    "{what} of registration `{}` go to `{subject}`, which no stream stores: each is a Core publish that only a subscriber listening at that moment gets",
                    info.name
                ),
                Err(err) => format!(
                    "{what} of registration `{}` go to `{subject}`; whether a stream stores it is unknown: {err}",
                    info.name
                ),
            });
        }
        if info.descriptor.model != DeliveryModel::JetStream {
            continue;
        }
        let name = &info.name;
        let Some(stream) = info.descriptor.stream.as_deref() else {
            continue;
        };
        let exists = stream_exists(transport, stream, name).await?;
        if !exists {
            if declared.iter().any(|d| d.name == stream) {
                done.push(format!(
                    "stream `{stream}` of registration `{name}` does not exist yet; the broker declares it at startup"
                ));
                continue;
            }
            let subject = &info.descriptor.subject;
            return Err(Error::new(
                ErrorKind::Broker,
                format!(
                    "registration `{name}` reads stream `{stream}`, which does not exist; create it with `nats stream add {stream} --subjects \"{subject}\"`, or declare it on the broker: `NatsBroker::new(url).declare_stream(\"{stream}\", [\"{subject}\"])`"
                ),
            ));
        }
        done.push(format!("stream `{stream}` of registration `{name}` exists"));
        if let Some(durable) = info.descriptor.consumer.as_deref() {
            let state = transport
                .check_durable(stream, durable, &info.descriptor.subject)
                .await
                .map_err(|err| {
                    Error::new(
                        ErrorKind::Broker,
                        format!("registration `{name}` cannot read stream `{stream}`"),
                    )
                    .with_source(err)
                })?;
            done.push(format!("registration `{name}`: {state}"));
        }
    }
    Ok(done)
}

/// Says, for every registration, which of its outputs a stream stores (confirmed and
/// deduplicated) and which are Core publishes; and warns when a Core retry copy goes to a
/// subject a stream stores (the stream stores every copy as a new message).
pub(super) fn log_outputs(publisher: &NatsPublisher, endpoints: &[Endpoint]) {
    for endpoint in endpoints {
        let info = endpoint.info();
        for subject in &info.publishes {
            // A template (`orders.{tenant}.placed`): any value of each placeholder.
            let any: String = subject
                .split('.')
                .map(|t| if t.starts_with('{') { "any" } else { t })
                .collect::<Vec<_>>()
                .join(".");
            match publisher.stream_of(&any) {
                Some(stream) => tracing::info!(
                    registration = %info.name,
                    output = subject,
                    %stream,
                    "output stored by stream `{stream}`: each publish waits for the stream's acknowledgement, and a redelivered input does not store it twice"
                ),
                None => tracing::info!(
                    registration = %info.name,
                    output = subject,
                    "output stored by no stream: a Core publish, not confirmed"
                ),
            }
        }
        if info.descriptor.model == DeliveryModel::Core
            && let Some(target) = info.copy_target()
            && let Some(stream) = publisher.stream_of(target)
        {
            tracing::warn!(
                registration = %info.name,
                retry_to = target,
                %stream,
                "Core retry copies go to `{target}`, which stream `{stream}` stores: the stream keeps every copy as a new message, and every other subscriber sees it; set `.retry_to(\"a.subject.of.its.own\")` to keep copies apart (docs/at-most-once.md)"
            );
        }
    }
}

/// Whether stream `stream`, which registration `name` reads, exists; an error when the server
/// cannot say.
async fn stream_exists(transport: &dyn Transport, stream: &str, name: &str) -> Result<bool, Error> {
    transport.stream_exists(stream).await.map_err(|err| {
        Error::new(
            ErrorKind::Broker,
            format!(
                "cannot check stream `{stream}` of registration `{name}` (is JetStream enabled on the server?)"
            ),
        )
        .with_source(err)
    })
}

/// Every stream a JetStream registration reads must exist.
pub(super) async fn check_streams(
    transport: &dyn Transport,
    endpoints: &[Endpoint],
) -> Result<(), Error> {
    for endpoint in endpoints {
        let info = endpoint.info();
        if info.descriptor.model != DeliveryModel::JetStream {
            continue;
        }
        let Some(stream) = info.descriptor.stream.as_deref() else {
            continue;
        };
        let exists = stream_exists(transport, stream, &info.name).await?;
        if !exists {
            let subject = &info.descriptor.subject;
            return Err(Error::new(
                ErrorKind::Broker,
                format!(
                    "registration `{name}` reads stream `{stream}`, which does not exist; create it with `nats stream add {stream} --subjects \"{subject}\"`, or declare it on the broker: `NatsBroker::new(url).declare_stream(\"{stream}\", [\"{subject}\"])`",
                    name = info.name,
                ),
            ));
        }
    }
    Ok(())
}

/// A JetStream registration whose dead-letter subject no stream stores: the dead letter is a
/// Core publish (confirmed by a flush) that only a subscriber listening at that moment
/// receives, while the original is terminated. Said once at startup, as a warning; the app
/// still starts, since a service listening on that subject is a legitimate design.
pub(super) async fn warn_unstored_dead_letters(transport: &dyn Transport, endpoints: &[Endpoint]) {
    for endpoint in endpoints {
        let info = endpoint.info();
        if info.descriptor.model != DeliveryModel::JetStream {
            continue;
        }
        let Some(dead_letter) = info.policy.dead_letter.as_deref() else {
            continue;
        };
        match transport.stream_by_subject(dead_letter).await {
            Ok(Some(_)) => {}
            Ok(None) => tracing::warn!(
                registration = %info.name,
                dead_letter,
                "no stream stores the dead-letter subject: a dead letter is a Core publish that only a subscriber listening at that moment receives, and the original is terminated all the same; store it in a stream (`nats stream add DEAD --subjects \"{dead_letter}\"`, or `.declare_stream(\"DEAD\", [\"{dead_letter}\"])` on the broker)"
            ),
            Err(err) => tracing::debug!(
                registration = %info.name,
                dead_letter,
                %err,
                "cannot ask which stream stores the dead-letter subject"
            ),
        }
    }
}
