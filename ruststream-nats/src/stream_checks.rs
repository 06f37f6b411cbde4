//! Pure checks of the app's registrations against the streams a server has (or the broker
//! declares): a stream that would answer a `reply` handler's requests with its storage receipt,
//! and the stream a misspelt stream name most likely meant. The broker's start, `check` and
//! `TestApp` ask them alike, so the three say the same.

use ruststream::registration::RegistrationInfo;
use ruststream::settle::DeliveryModel;
use ruststream::{Error, ErrorKind};

use crate::subject::overlaps;
use crate::transport::{StreamAdmin, StreamSpec};

/// Every stream that stores a subject a `reply` handler answers requests on, as one sentence
/// each: a request published there is answered by the stream's storage receipt
/// (`{"stream":"ORDERS","seq":3}`), which reaches the requester before the handler's answer.
pub(crate) fn requests_captured_by_streams(
    registrations: &[RegistrationInfo],
    streams: &[StreamSpec],
) -> Vec<String> {
    let mut problems = Vec::new();
    for r in registrations {
        if r.descriptor.model != DeliveryModel::Core || !r.answers_requests {
            continue;
        }
        let subject = &r.descriptor.subject;
        for stream in streams {
            let Some(stored) = stream.subjects.iter().find(|s| overlaps(s, subject)) else {
                continue;
            };
            let line = format!(
                "stream `{name}` stores `{stored}`, which captures `{subject}`, the subject registration `{reg}` answers requests on: the stream would answer each request with its storage receipt (`{{\"stream\":\"{name}\",\"seq\":..}}`) before the handler could; narrow the stream's subjects so that they leave `{subject}` out (for example `{narrow}`), or move the request subject out of `{stored}`",
                name = stream.name,
                reg = r.name,
                narrow = narrowed(stored, subject),
            );
            if !problems.contains(&line) {
                problems.push(line);
            }
        }
    }
    problems
}

/// A hint of how a stream storing `stored` could leave `subject` out: its first token
/// followed by `created`, in the style of the docs (`orders.created`), or the stream's
/// subjects listed one by one.
fn narrowed(stored: &str, subject: &str) -> String {
    match stored.split_once('.') {
        Some((first, _))
            if !first.contains(['*', '>']) && subject != format!("{first}.created") =>
        {
            format!("{first}.created")
        }
        _ => "the subjects its events go to, one by one".to_owned(),
    }
}

/// The stream a registration reading missing stream `missing` (for `subject`) most likely
/// meant, among `streams`: one that already stores `subject`, else one whose name is a typo
/// away. With what it stores, for the message.
pub(crate) fn near_stream<'a>(
    missing: &str,
    subject: &str,
    streams: &'a [StreamSpec],
) -> Option<&'a StreamSpec> {
    let others = || streams.iter().filter(move |s| s.name != missing);
    others()
        .find(|s| s.subjects.iter().any(|p| overlaps(p, subject)))
        .or_else(|| {
            others()
                .map(|s| (edit_distance(&s.name, missing), s))
                .filter(|(d, s)| *d <= typo_allowance(missing.len().min(s.name.len())))
                .min_by_key(|(d, _)| *d)
                .map(|(_, s)| s)
        })
}

/// How many edits a name of `len` characters may be from another to be its typo: none for
/// names too short to tell a typo from another name (`S1`, `S2`).
fn typo_allowance(len: usize) -> usize {
    match len {
        0..=2 => 0,
        3..=7 => 1,
        _ => 2,
    }
}

/// The "did you mean" sentence for `near`, which registration reading `missing` (for
/// `subject`) most likely meant.
pub(crate) fn did_you_mean(missing: &str, subject: &str, near: &StreamSpec) -> String {
    format!(
        "did you mean `{near}`, which stores `{stored}`? A stream `{missing}` for `{subject}` would clash with it; fix the stream name in the registration's descriptor",
        near = near.name,
        stored = near.subjects.join("`, `"),
    )
}

/// The error of registration `info` reading stream `stream`, which does not exist: the
/// stream it most likely meant, when one of `known` is near (creating the named one would
/// clash with it), else how to create it.
pub(crate) fn missing_stream(info: &RegistrationInfo, stream: &str, known: &[StreamSpec]) -> Error {
    let name = &info.name;
    let subject = &info.descriptor.subject;
    if let Some(bucket) = crate::descriptor::bucket_of(&info.descriptor) {
        return missing_bucket(name, bucket, known);
    }
    let message = match near_stream(stream, subject, known) {
        Some(near) => format!(
            "registration `{name}` reads stream `{stream}`, which does not exist; {}",
            did_you_mean(stream, subject, near)
        ),
        None => format!(
            "registration `{name}` reads stream `{stream}`, which does not exist; create it with `nats stream add {stream} --subjects \"{subject}\"`, or declare it on the broker: `NatsBroker::new(url).declare_stream(\"{stream}\", [\"{subject}\"])`"
        ),
    };
    Error::new(ErrorKind::Broker, message)
}

/// The error of registration `name` reading the changes of bucket `bucket`, which does not
/// exist: the bucket a typo away, when one of `known` is, else how to create it. The app does
/// not create a bucket it reads: its history and limits are its writers' choice.
fn missing_bucket(name: &str, bucket: &str, known: &[StreamSpec]) -> Error {
    let near = known
        .iter()
        .filter_map(|s| s.name.strip_prefix("KV_"))
        .filter(|other| *other != bucket)
        .map(|other| (edit_distance(other, bucket), other))
        .filter(|(d, other)| *d <= typo_allowance(bucket.len().min(other.len())))
        .min_by_key(|(d, _)| *d);
    let message = match near {
        Some((_, other)) => format!(
            "registration `{name}` reads the changes of key-value bucket `{bucket}`, which does not exist (no stream `KV_{bucket}`); did you mean bucket `{other}`? Fix the name in `KvChanges::new(..)`"
        ),
        None => format!(
            "registration `{name}` reads the changes of key-value bucket `{bucket}`, which does not exist (no stream `KV_{bucket}`); create the bucket before the app starts, with `nats kv add {bucket} --history 10` or the client that writes it (async-nats: `jetstream.create_key_value(..)`)"
        ),
    };
    Error::new(ErrorKind::Broker, message)
}

/// What `TestApp` refuses instead of creating a stream the app reads but neither has nor
/// declares: one whose name is a typo of a stream `transport` has or the app declares, or
/// whose subject such a stream stores. Production refuses it alike (`missing_stream`).
#[cfg_attr(not(feature = "testing"), allow(dead_code))] // `TestApp`'s
pub(crate) async fn refuse_near_streams(
    transport: &dyn StreamAdmin,
    declared: Vec<(String, Vec<String>)>,
    registrations: &[RegistrationInfo],
) -> Result<(), Error> {
    let mut known = transport.streams().await.unwrap_or_default();
    known.extend(
        declared
            .into_iter()
            .map(|(name, subjects)| StreamSpec { name, subjects }),
    );
    let known = &known;
    for r in registrations {
        let d = &r.descriptor;
        let (DeliveryModel::JetStream, Some(stream)) = (d.model, d.stream.as_deref()) else {
            continue;
        };
        if known.iter().any(|s| s.name == stream) {
            continue;
        }
        if near_stream(stream, &d.subject, known).is_some() {
            return Err(missing_stream(r, stream, known));
        }
    }
    Ok(())
}

/// Levenshtein distance of `a` and `b`, case-insensitive (a name differing only in case is a
/// typo too).
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.to_lowercase().chars().collect();
    let b: Vec<char> = b.to_lowercase().chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(name: &str, subjects: &[&str]) -> StreamSpec {
        StreamSpec {
            name: name.to_owned(),
            subjects: subjects.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    #[test]
    fn edit_distance_counts_single_edits() {
        assert_eq!(edit_distance("ORDER", "ORDERS"), 1);
        assert_eq!(edit_distance("orders", "ORDERS"), 0);
        assert_eq!(edit_distance("PAYMENTS", "PAYMNETS"), 2);
        assert_eq!(edit_distance("", "abc"), 3);
    }

    #[test]
    fn a_typo_finds_the_declared_stream_and_short_names_do_not() {
        let streams = [stream("ORDERS", &["orders.created"])];
        let near = near_stream("ORDER", "orders.shipped", &streams).map(|s| s.name.as_str());
        assert_eq!(near, Some("ORDERS"));
        let short = [stream("S1", &["a.b"])];
        assert!(near_stream("S2", "c.d", &short).is_none());
        assert!(near_stream("INVOICES", "invoices.x", &streams).is_none());
    }

    #[test]
    fn a_stream_storing_the_subject_is_meant_whatever_its_name() {
        let streams = [stream("SHOP", &["orders.>"])];
        let near = near_stream("ORDER", "orders.created", &streams).map(|s| s.name.as_str());
        assert_eq!(near, Some("SHOP"));
    }
}
