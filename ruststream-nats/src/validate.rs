//! What the broker refuses before anything connects: invalid subjects and names, a pattern with
//! nowhere to send its retry copies, a registration that would read its own dead letters.
//! Every problem is reported at once.

use ruststream::registration::RegistrationInfo;
use ruststream::settle::DeliveryModel;
use ruststream::{Error, ErrorKind};

use crate::subject::{is_pattern, matches, name_problem, subject_problem};
use crate::transport::{StreamDeclaration, StreamSpec};

/// Checks every registration and declared stream; one `Config` error lists every problem.
pub(crate) fn validate(
    registrations: &[RegistrationInfo],
    streams: &[StreamDeclaration],
) -> Result<(), Error> {
    let mut problems = Vec::new();
    for registration in registrations {
        check_registration(registration, &mut problems);
    }
    for stream in streams {
        check_stream(&stream.spec(), &mut problems);
        problems.extend(stream.problems());
    }
    check_shared_durables(registrations, &mut problems);
    let declared: Vec<StreamSpec> = streams.iter().map(StreamDeclaration::spec).collect();
    problems.extend(crate::stream_checks::requests_captured_by_streams(
        registrations,
        &declared,
    ));
    report(problems)
}

/// What the broker runs but warns about at startup and in `check`: a registration that can
/// retry forever.
pub(crate) fn warnings(registrations: &[RegistrationInfo]) -> Vec<String> {
    registrations
        .iter()
        .filter(|r| r.descriptor.model == DeliveryModel::JetStream && r.policy.max_attempts.is_none())
        .map(|r| {
            format!(
                "registration `{}` has no attempt cap: a message its handler keeps answering `retry()` is delivered again at once, forever; add `.max_attempts(nonzero!(5))` (and a `.dead_letter(..)`) at its mount site",
                r.name
            )
        })
        .collect()
}

/// Two registrations of one app on one durable consumer would share its messages and
/// reconfigure it in turn.
fn check_shared_durables(registrations: &[RegistrationInfo], problems: &mut Vec<String>) {
    let mut seen: Vec<(&str, &str, &str)> = Vec::new();
    for r in registrations {
        let d = &r.descriptor;
        let (DeliveryModel::JetStream, Some(stream), Some(durable)) =
            (d.model, d.stream.as_deref(), d.consumer.as_deref())
        else {
            continue;
        };
        if let Some((_, _, first)) = seen.iter().find(|(s, c, _)| *s == stream && *c == durable) {
            problems.push(format!(
                "registrations `{first}` and `{name}` both read durable consumer `{durable}` of stream `{stream}`; they would share its messages and reconfigure it in turn: give one another `.durable(..)` name",
                name = r.name
            ));
        } else {
            seen.push((stream, durable, &r.name));
        }
    }
}

fn report(mut problems: Vec<String>) -> Result<(), Error> {
    match problems.len() {
        0 => Ok(()),
        1 => Err(Error::new(ErrorKind::Config, problems.remove(0))),
        n => Err(Error::new(
            ErrorKind::Config,
            format!(
                "{n} problems stop the app from starting:\n  - {}",
                problems.join("\n  - ")
            ),
        )),
    }
}

fn check_registration(r: &RegistrationInfo, problems: &mut Vec<String>) {
    let name = &r.name;
    let subject = &r.descriptor.subject;
    match r.descriptor.model {
        DeliveryModel::Core if !r.descriptor.wildcard && is_pattern(subject) => {
            problems.push(format!(
                "registration `{name}` reads `{subject}` as a single subject, but it is a pattern; use `CoreWildcard::new(\"{subject}\")` and add `.retry_to(\"subject\")` at its mount site"
            ));
        }
        _ => {
            if let Some(problem) = subject_problem(subject, true) {
                problems.push(format!(
                    "registration `{name}` reads `{subject}`, which is not a valid subject: {problem}"
                ));
            }
        }
    }
    match r.descriptor.model {
        DeliveryModel::Core => {
            if r.descriptor.wildcard && r.policy.retry_to.is_none() {
                problems.push(format!(
                    "registration `{name}` reads the pattern `{subject}` ({kind}), which publishes to no single subject, so a retry copy has nowhere to go; add `.retry_to(\"subject\")` at its mount site",
                    kind = r.descriptor.kind,
                ));
            }
            // Only a batch handler reads them: on a single handler they would do nothing.
            if !r.batch && (r.descriptor.batch.is_some() || r.descriptor.batch_max_wait.is_some()) {
                problems.push(format!(
                    "registration `{name}` sets `.batch(..)` or `.max_wait(..)` on `{subject}`, but its handler takes one message at a time, so nothing would be gathered: take the payload as a slice (`&[T]`) to handle batches, or remove the option"
                ));
            }
        }
        DeliveryModel::JetStream => check_jetstream(r, problems),
    }
    if let Some(dead_letter) = &r.policy.dead_letter {
        if let Some(problem) = subject_problem(dead_letter, false) {
            problems.push(format!(
                "the dead-letter subject `{dead_letter}` of registration `{name}` is not a subject to publish to: {problem}"
            ));
        } else if let Some(prefix) = ruststream::reserved_prefix(dead_letter) {
            problems.push(format!(
                "the dead-letter subject `{dead_letter}` of registration `{name}` is under the reserved prefix `{prefix}` (a dead letter there would write into a key-value bucket, an object store or the server's API); choose a subject of the app's own, such as `{name}.dead`"
            ));
        } else if matches(subject, dead_letter) {
            problems.push(format!(
                "registration `{name}` would read its own dead letters: `{dead_letter}` matches `{subject}`; choose a dead-letter subject it does not read"
            ));
        }
    }
    if let Some(retry_to) = &r.policy.retry_to {
        if let Some(problem) = subject_problem(retry_to, false) {
            problems.push(format!(
                "the retry subject `{retry_to}` of registration `{name}` is not a subject to publish to: {problem}"
            ));
        } else if r.descriptor.model == DeliveryModel::Core && !matches(subject, retry_to) {
            problems.push(format!(
                "registration `{name}` sends its retry copies to `{retry_to}`, which it does not read (`{subject}`): every copy would be lost and the cap and dead letter would never fire; choose a retry subject that `{subject}` matches"
            ));
        }
    }
}

fn check_jetstream(r: &RegistrationInfo, problems: &mut Vec<String>) {
    let name = &r.name;
    match r.descriptor.stream.as_deref() {
        Some(stream) => {
            if let Some(problem) = name_problem(stream) {
                problems.push(format!(
                    "registration `{name}` reads stream `{stream}`, which is not a valid stream name: {problem}"
                ));
            }
        }
        None => problems.push(format!(
            "registration `{name}` is a JetStream registration without a stream"
        )),
    }
    if let Some(filter) = &crate::descriptor::consumer_options(&r.descriptor).filter_subject
        && let Some(problem) = subject_problem(filter, true)
    {
        problems.push(format!(
            "registration `{name}` filters on `{filter}`, which is not a valid subject: {problem}"
        ));
    }
    if let Some(durable) = &r.descriptor.consumer
        && let Some(problem) = name_problem(durable)
    {
        problems.push(format!(
            "registration `{name}` names the durable consumer `{durable}`, which is not a valid consumer name: {problem}"
        ));
    }
    if r.descriptor.ack_wait.is_some_and(|wait| wait.is_zero()) {
        problems.push(format!(
            "registration `{name}` has an ack_wait of zero: the server cannot wait zero for a settlement (it would deliver every message again at once); give `.ack_wait(..)` more than the handler's worst time, e.g. `Duration::from_secs(60)`"
        ));
    }
    if let Some(retry_to) = &r.policy.retry_to {
        tracing::warn!(
            registration = %name,
            retry_to = %retry_to,
            "`.retry_to(..)` has no effect on a JetStream registration: the server delivers a retry again from the stream"
        );
    }
}

fn check_stream(stream: &StreamSpec, problems: &mut Vec<String>) {
    if let Some(problem) = name_problem(&stream.name) {
        problems.push(format!(
            "the declared stream `{}` has an invalid name: {problem}",
            stream.name
        ));
    }
    if stream.subjects.is_empty() {
        problems.push(format!(
            "the declared stream `{}` stores no subject; name at least one",
            stream.name
        ));
    }
    for subject in &stream.subjects {
        if let Some(problem) = subject_problem(subject, true) {
            problems.push(format!(
                "the declared stream `{}` stores `{subject}`, which is not a valid subject: {problem}",
                stream.name
            ));
        }
    }
}
