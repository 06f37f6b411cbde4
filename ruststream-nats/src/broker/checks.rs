//! What the broker checks and says against the server before it starts serving: `check`'s
//! read-only look, every JetStream registration's stream (or the one a misspelt name meant), a
//! stream that would answer a `reply` handler's requests, dead letters no stream stores, a
//! consumer without a durable name that re-reads its stream, and which outputs are stored.

use crate::descriptor::{DeliverPolicy, consumer_options};
use ruststream::registration::RegistrationInfo;
use ruststream::settle::DeliveryModel;
use ruststream::{Endpoint, Error, ErrorKind};

use crate::publish::NatsPublisher;
use crate::stream_checks::{missing_stream, requests_captured_by_streams};
use crate::transport::nats::NatsTransport;
use crate::transport::{PullConsumer, StreamAdmin, StreamChanges, StreamSpec, Transport};

/// `check` against the server, changing nothing: every stream a JetStream registration reads
/// exists or is declared, and every durable consumer that exists agrees with its descriptor.
pub(super) async fn check_on_server(
    transport: &NatsTransport,
    registrations: &[RegistrationInfo],
    declared: &[StreamSpec],
) -> Result<Vec<String>, Error> {
    let mut known = transport.streams().await.unwrap_or_default();
    for declaration in declared {
        match known.iter_mut().find(|s| s.name == declaration.name) {
            Some(stream) => stream.subjects.extend(declaration.subjects.iter().cloned()),
            None => known.push(declaration.clone()),
        }
    }
    refuse_captured_requests(registrations, &known)?;
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
                // As `run` warns (`warn_unstored_dead_letters`): a dead letter of a JetStream
                // registration terminates the original.
                Ok(None)
                    if what == "dead letters"
                        && info.descriptor.model == DeliveryModel::JetStream =>
                {
                    format!(
                        "warning: registration `{}`: {}",
                        info.name,
                        unstored_dead_letter(subject)
                    )
                }
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
            return Err(missing_stream(info, stream, &known));
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
        if let Some(warning) = reread_warning(transport, info).await {
            done.push(format!("warning: {warning}"));
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
async fn stream_exists(
    transport: &dyn StreamAdmin,
    stream: &str,
    name: &str,
) -> Result<bool, Error> {
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
    // The declared streams are on the server by now. A transport that cannot list its streams
    // (a test double) gets no check and no suggestion.
    let known = transport.streams().await.unwrap_or_default();
    let registrations: Vec<RegistrationInfo> = endpoints.iter().map(|e| e.info().clone()).collect();
    refuse_captured_requests(&registrations, &known)?;
    for info in registrations {
        if info.descriptor.model != DeliveryModel::JetStream {
            continue;
        }
        let Some(stream) = info.descriptor.stream.as_deref() else {
            continue;
        };
        let exists = stream_exists(transport, stream, &info.name).await?;
        if !exists {
            return Err(missing_stream(&info, stream, &known));
        }
    }
    warn_rereads(transport, endpoints).await;
    Ok(())
}

/// Refuses to start when a stream of `streams` stores a subject a `reply` handler answers
/// requests on: the stream's storage receipt would answer each request.
pub(crate) fn refuse_captured_requests(
    registrations: &[RegistrationInfo],
    streams: &[StreamSpec],
) -> Result<(), Error> {
    let problems = requests_captured_by_streams(registrations, streams);
    match problems.len() {
        0 => Ok(()),
        1 => Err(Error::new(ErrorKind::Config, problems.join(""))),
        n => Err(Error::new(
            ErrorKind::Config,
            format!(
                "{n} streams would answer requests:\n  - {}",
                problems.join("\n  - ")
            ),
        )),
    }
}

/// Warns about each consumer without a durable name that will read, from its first message,
/// a stream that already holds messages: every start handles them all again.
async fn warn_rereads(transport: &dyn PullConsumer, endpoints: &[Endpoint]) {
    for endpoint in endpoints {
        let info = endpoint.info();
        if let Some(warning) = reread_warning(transport, info).await {
            tracing::warn!(registration = %info.name, "{warning}");
        }
    }
}

/// What `run` and `check` say of registration `info` when it reads its stream without a
/// durable name from the first message, and the stream holds messages: `None` otherwise, or
/// when the transport cannot tell.
async fn reread_warning(transport: &dyn PullConsumer, info: &RegistrationInfo) -> Option<String> {
    let d = &info.descriptor;
    let (DeliveryModel::JetStream, Some(stream), None, DeliverPolicy::All) = (
        d.model,
        d.stream.as_deref(),
        d.consumer.as_deref(),
        consumer_options(d).deliver_policy,
    ) else {
        return None;
    };
    let place = transport.stream_place(stream.to_owned()).await.ok()??;
    (place.messages > 0).then(|| {
        format!(
            "registration `{name}` reads stream `{stream}` without a durable consumer, from its first message: the {count} message(s) it holds are handled again at every start; give it `.durable(\"{name}\")` to go on where it stopped, or `.deliver_policy(DeliverPolicy::New)` to read only new messages",
            name = info.name,
            count = place.messages,
        )
    })
}

/// A JetStream registration whose dead-letter subject no stream stores: the dead letter is a
/// Core publish (confirmed by a flush) that only a subscriber listening at that moment
/// receives, while the original is terminated. Said once at startup, as a warning; the app
/// still starts, since a service listening on that subject is a legitimate design.
pub(super) async fn warn_unstored_dead_letters(
    transport: &dyn StreamAdmin,
    endpoints: &[Endpoint],
) {
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
                "{}",
                unstored_dead_letter(dead_letter)
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

/// What `run` and `check` say of a JetStream registration's dead-letter subject no stream
/// stores.
fn unstored_dead_letter(dead_letter: &str) -> String {
    format!(
        "no stream stores the dead-letter subject `{dead_letter}`: a dead letter is a Core publish that only a subscriber listening at that moment receives, and the original is terminated all the same; store it in a stream (`nats stream add DEAD --subjects \"{dead_letter}\"`, or `.declare_stream(\"DEAD\", [\"{dead_letter}\"])` on the broker)"
    )
}

/// Warns that declaring stream `name` changed the existing stream, or left a limit it asks
/// for as it was: an operator who shares the stream sees why it changed.
pub(super) fn warn_stream_changes(name: &str, changes: &StreamChanges) {
    if changes.changed() {
        tracing::warn!(
            stream = %name,
            added_subjects = ?changes.added_subjects,
            raised = ?changes.raised,
            "the declared stream existed; added the subjects and raised the limits it lacked (nothing was removed)"
        );
    }
    if !changes.kept.is_empty() {
        tracing::warn!(
            stream = %name,
            kept = ?changes.kept,
            "the declared stream existed with looser limits, left as they are: tightening could discard stored messages; change them on the server if meant"
        );
    }
}
