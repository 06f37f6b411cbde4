//! What `describe` prints: every registration of an app as a table (subject, model, stream and
//! consumer, ack_wait, cap, dead letter, retry target) or as JSON. Reached as
//! `ruststream::app::cli::describe` and `describe_json`.

use std::fmt::Write as _;

use crate::app::App;
use crate::registration::RegistrationInfo;
use crate::settle::DeliveryModel;

/// The `describe` table of `app`.
pub fn describe<A: App>(app: &A) -> String {
    let info = app.info();
    let streams = app.declared_streams();
    let mut out = String::new();
    let _ = writeln!(out, "{} {}", info.name(), info.version());
    for (kind, address) in app.brokers() {
        let _ = writeln!(out, "broker: {kind} at {address}");
    }
    let header = [
        "handler",
        "subject",
        "model",
        "stream/consumer",
        "ack_wait",
        "cap",
        "concurrency",
        "dead letter",
        "retry to",
        "replies",
    ];
    let rows: Vec<[String; 10]> = app
        .registrations()
        .iter()
        .map(|r| row(r, &streams))
        .collect();
    let mut widths = header.map(str::len);
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: &[&str]| {
        let mut l = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i > 0 {
                l.push_str("  ");
            }
            let _ = write!(l, "{cell:<w$}");
        }
        l.trim_end().to_owned()
    };
    let _ = writeln!(out, "{}", line(&header));
    for r in &rows {
        let cells: Vec<&str> = r.iter().map(String::as_str).collect();
        let _ = writeln!(out, "{}", line(&cells));
    }
    for r in app.registrations() {
        let notes = crate::registration::policy_notes(&r);
        if !notes.is_empty() {
            let _ = writeln!(out, "{}: {}", r.name, notes.join(", "));
        }
    }
    if streams.is_empty() {
        let _ = writeln!(
            out,
            "declared streams: none (the app declares nothing; streams it reads must exist)"
        );
    }
    for (name, subjects) in &streams {
        let _ = writeln!(
            out,
            "declared stream: {name} storing {}",
            subjects.join(", ")
        );
    }
    if let Some(service) = app.service_identity() {
        let endpoints: Vec<String> = app
            .registrations()
            .iter()
            .filter(|r| crate::app::is_endpoint(r))
            .map(|r| {
                format!(
                    "{} ({})",
                    crate::app::service_name(&r.name),
                    r.descriptor.subject
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "micro service: {} {}, endpoints {}",
            service.name,
            service.version,
            endpoints.join(", ")
        );
    }
    out
}

/// The `describe --json` document of `app`.
pub fn describe_json<A: App>(app: &A) -> serde_json::Value {
    let info = app.info();
    let streams = app.declared_streams();
    let registrations: Vec<serde_json::Value> = app
        .registrations()
        .iter()
        .map(|r| {
            let d = &r.descriptor;
            serde_json::json!({
                "name": r.name,
                "subject": d.subject,
                "model": match d.model {
                    DeliveryModel::JetStream => "jetstream",
                    DeliveryModel::Core => "core",
                },
                "pattern": d.wildcard,
                "queue_group": d.queue_group,
                "stream": d.stream,
                "consumer": d.consumer,
                "bucket": d.bucket.as_ref().map(|b| serde_json::json!({"name": b, "changes": d.bucket_changes})),
                "ack_wait_ms": d.ack_wait.map(|w| u64::try_from(w.as_millis()).unwrap_or(u64::MAX)),
                "handler_timeout_ms": r.policy.handler_timeout.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
                "progress_until_ms": r.policy.progress_until.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
                "confirm_acks": r.policy.confirm_acks,
                "max_attempts": r.policy.max_attempts.map(|n| n.get()),
                "concurrency": r.policy.concurrency.get(),
                "lane_key": r.policy.lanes.as_ref().map(crate::registration::LaneKey::source),
                "threads": r.policy.threads.map(|n| n.get()),
                "batch": r.batch,
                "batch_max_wait_ms": d.batch_max_wait.map(|w| u64::try_from(w.as_millis()).unwrap_or(u64::MAX)),
                "dead_letter": r.policy.dead_letter,
                "dead_letter_stored_in": r.policy.dead_letter.as_deref().and_then(|dl| storing(&streams, dl)),
                "retry_to": match d.model {
                    DeliveryModel::JetStream => None,
                    DeliveryModel::Core => r.copy_target(),
                },
                "replies": r.publishes,
                "replies_stored_in": r.output_patterns().iter().map(|(s, p)| ((*s).to_owned(), storing(&streams, p).into())).collect::<serde_json::Map<_, _>>(),
                "idempotency": r.policy.idempotency.as_ref().map(|i| serde_json::json!({"bucket": i.bucket, "window_ms": u64::try_from(i.window.as_millis()).unwrap_or(u64::MAX), "claim_ms": u64::try_from(i.claim.as_millis()).unwrap_or(u64::MAX), "key": i.key})),
            })
        })
        .collect();
    serde_json::json!({
        "name": info.name(),
        "version": info.version(),
        "brokers": app.brokers().iter().map(|(kind, address)| serde_json::json!({"kind": kind, "address": address})).collect::<Vec<_>>(),
        "declared_streams": streams.iter().map(|(name, subjects)| serde_json::json!({"name": name, "subjects": subjects})).collect::<Vec<_>>(),
        "registrations": registrations,
        "micro_service": app.service_identity().map(|s| serde_json::json!({"name": s.name, "version": s.version, "description": s.description})),
    })
}

/// The declared stream whose subjects match `subject`, if any.
fn storing<'a>(streams: &'a [(String, Vec<String>)], subject: &str) -> Option<&'a str> {
    streams
        .iter()
        .find(|(_, subjects)| subjects.iter().any(|p| subject_matches(p, subject)))
        .map(|(name, _)| name.as_str())
}

/// Whether NATS pattern `pattern` (`*` one token, `>` the rest) matches `subject`. The rules
/// are ruststream-nats's (`subject.rs`), which the core cannot depend on: both matchers are
/// tested against one table, `ruststream-nats/src/subject/match_table.rs`.
fn subject_matches(pattern: &str, subject: &str) -> bool {
    let mut subject = subject.split('.');
    for token in pattern.split('.') {
        match (token, subject.next()) {
            (">", Some(_)) => return true,
            ("*", Some(_)) => {}
            (t, Some(s)) if t == s => {}
            _ => return false,
        }
    }
    subject.next().is_none()
}

/// The ack_wait cell, with the handler's timeout and automatic progress when declared.
fn ack_wait_cell(r: &RegistrationInfo) -> String {
    let mut cell = r
        .descriptor
        .ack_wait
        .map_or_else(|| "-".to_owned(), |w| format!("{w:?}"));
    if let Some(deadline) = r.policy.progress_until {
        let _ = write!(cell, ", progress up to {deadline:?}");
    }
    if let Some(limit) = r.policy.handler_timeout {
        let _ = write!(cell, ", timeout {limit:?}");
    }
    if r.policy.confirm_acks {
        cell.push_str(", confirmed acks");
    }
    cell
}

fn row(r: &RegistrationInfo, streams: &[(String, Vec<String>)]) -> [String; 10] {
    let d = &r.descriptor;
    let model = match (d.model, d.wildcard) {
        (DeliveryModel::JetStream, _) => match (&d.bucket, d.bucket_changes) {
            (Some(bucket), Some(changes)) => {
                format!("jetstream, changes of bucket {bucket} ({changes})")
            }
            _ => "jetstream".to_owned(),
        },
        (DeliveryModel::Core, true) => "core (pattern)".to_owned(),
        (DeliveryModel::Core, false) => "core".to_owned(),
    };
    let model = match &d.queue_group {
        Some(q) => format!("{model}, queue group {q}"),
        None => model,
    };
    let model = match (r.batch, d.batch_max_wait) {
        (true, Some(wait)) => format!("{model}, batch (max wait {wait:?})"),
        (true, None) => format!("{model}, batch"),
        (false, _) => model,
    };
    let consumer = match (&d.stream, &d.consumer) {
        (Some(s), Some(c)) => format!("{s}/{c}"),
        (Some(s), None) => format!("{s}/(ephemeral)"),
        _ => "-".to_owned(),
    };
    let dash = || "-".to_owned();
    let stored = |subject: &str, pattern: &str| match storing(streams, pattern) {
        Some(stream) => format!("{subject} (stored in {stream})"),
        None => format!("{subject} (not in a declared stream)"),
    };
    let dead_letter = r
        .policy
        .dead_letter
        .as_deref()
        .map_or_else(dash, |dl| stored(dl, dl));
    [
        r.name.clone(),
        d.subject.clone(),
        model,
        consumer,
        ack_wait_cell(r),
        r.policy
            .max_attempts
            .map_or_else(|| "none".to_owned(), |n| n.to_string()),
        match &r.policy.lanes {
            Some(lanes) => format!("{} by key ({})", r.policy.concurrency, lanes.source()),
            None => r.policy.concurrency.to_string(),
        },
        dead_letter,
        match d.model {
            DeliveryModel::JetStream => "(redelivered)".to_owned(),
            DeliveryModel::Core => r.copy_target().map_or_else(dash, str::to_owned),
        },
        if r.publishes.is_empty() {
            dash()
        } else {
            let outputs: Vec<String> = r
                .output_patterns()
                .iter()
                .map(|(subject, pattern)| stored(subject, pattern))
                .collect();
            outputs.join(", ")
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::subject_matches;

    // The table `ruststream-nats`'s matcher is tested against: the two cannot disagree.
    include!("../../../ruststream-nats/src/subject/match_table.rs");

    #[test]
    fn patterns_match_as_nats_does() {
        for &(pattern, subject, expected) in MATCH_TABLE {
            assert_eq!(
                subject_matches(pattern, subject),
                expected,
                "{pattern:?} on {subject:?}"
            );
        }
    }
}
