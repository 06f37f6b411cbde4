//! The embedded NATS: an app run with `run --embedded` (or `RUSTSTREAM_EMBEDDED=1`) uses the
//! in-process NATS of the tests, on the real clock, instead of a server. For a first run and
//! for development: nothing is persisted and nothing outside the process can reach it.
//!
//! At startup it declares the streams the app's JetStream registrations read (each storing the
//! subjects they read from it) and the streams the broker declares, so a first run needs no
//! setup. A person feeds it messages with lines of the form
//!
//! ```text
//! publish payments.authorized {"id": 1, "card": "visa", "amount_cents": 1250}
//! ```
//!
//! on standard input, or in a `--seed FILE` published once the app started (blank lines and
//! lines starting with `#` are skipped). The generated `main` prints what each handler did.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use ruststream::broker::Embedded;
use ruststream::registration::RegistrationInfo;
use ruststream::settle::DeliveryModel;
use ruststream::{Error, ErrorKind, Headers};
use tokio::io::{AsyncBufRead, AsyncBufReadExt as _, BufReader};

pub use crate::transport::in_process::InProcessNats;
use crate::transport::{CorePubSub, StreamAdmin, StreamDeclaration, StreamSpec};

/// The streams an app's JetStream descriptors read, each with the subjects they read from it:
/// what the embedded NATS and `TestApp` declare before the app starts, and what a live test
/// declares on a real server.
pub fn streams_of(registrations: &[RegistrationInfo]) -> Vec<StreamSpec> {
    let mut streams: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in registrations {
        let d = &r.descriptor;
        if d.model != DeliveryModel::JetStream {
            continue;
        }
        let Some(stream) = &d.stream else { continue };
        let subjects = streams.entry(stream.clone()).or_default();
        if !subjects.contains(&d.subject) {
            subjects.push(d.subject.clone());
        }
    }
    streams
        .into_iter()
        .map(|(name, subjects)| StreamSpec { name, subjects })
        .collect()
}

/// Declares `spec` on `nats`: created, or the subjects it lacks added to the stream of that
/// name (which keeps its own).
pub(crate) async fn declare_merged(
    nats: &InProcessNats,
    spec: impl Into<StreamDeclaration>,
) -> Result<(), Error> {
    let spec = spec.into();
    let name = spec.name.clone();
    nats.declare_stream_with(spec).await.map(drop).map_err(|e| {
        Error::new(
            ErrorKind::Broker,
            format!("the in-process NATS refused stream `{name}`"),
        )
        .with_source(e)
    })
}

/// Starts the embedded NATS for an app whose registrations are `registrations` and whose broker
/// declares `declared`: declares the streams, says what it is, and starts reading the seed
/// file and standard input.
pub(crate) async fn start(
    embedded: &Embedded,
    registrations: &[RegistrationInfo],
    declared: &[StreamDeclaration],
) -> Result<InProcessNats, Error> {
    let nats = InProcessNats::new();
    for spec in streams_of(registrations) {
        declare_merged(&nats, spec).await?;
    }
    for declaration in declared {
        declare_merged(&nats, declaration.clone()).await?;
    }
    println!(
        "[embedded] NATS inside this process, for development: nothing is persisted and nothing outside the process can reach it"
    );
    for name in nats.stream_names() {
        let subjects = nats.stream_subjects(&name).unwrap_or_default();
        println!("[embedded] stream {name} stores {}", subjects.join(", "));
    }
    let seed = match &embedded.seed {
        Some(path) => Some(std::fs::read_to_string(path).map_err(|err| {
            Error::new(
                ErrorKind::Config,
                format!(
                    "cannot read the seed file {}; give --seed a file of `publish SUBJECT JSON` lines",
                    path.display()
                ),
            )
            .with_source(err)
        })?),
        None => None,
    };
    if embedded.stdin {
        println!("[embedded] type `publish SUBJECT JSON` to publish a message");
    }
    let feeder = nats.clone();
    let stdin = embedded.stdin;
    let ended = embedded.input_ended.clone();
    tokio::spawn(async move {
        if let Some(seed) = seed {
            feed(&feeder, BufReader::new(seed.as_bytes())).await;
        }
        if stdin {
            feed(&feeder, BufReader::new(tokio::io::stdin())).await;
            println!("[embedded] standard input ended: stopping once every message is handled");
            // Counted only once the app consumes: a message stored before is pending nowhere.
            ended.started.notified().await;
            until_idle(&feeder).await;
            ended.ended.notify_one();
        }
    });
    Ok(nats)
}

/// Returns once nothing is left to handle: no message in flight or pending for a consumer, and
/// no timer (an ack wait, a `retry_after` delay) that would deliver one again.
async fn until_idle(nats: &InProcessNats) {
    let busy = |nats: &InProcessNats| {
        nats.in_flight() > 0
            || nats.next_deadline().is_some()
            || nats.stream_names().iter().any(|stream| {
                nats.consumer_names(stream).iter().any(|consumer| {
                    nats.consumer_info(stream, consumer)
                        .is_some_and(|c| c.pending > 0 || c.ack_pending > 0)
                })
            })
    };
    while busy(nats) {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Publishes every `publish SUBJECT JSON` line of `input`, saying what became of each.
pub(crate) async fn feed(nats: &InProcessNats, input: impl AsyncBufRead + Unpin) {
    let mut lines = input.lines();
    loop {
        let line = match lines.next_line().await {
            Ok(Some(line)) => line,
            Ok(None) => return,
            Err(err) => {
                println!("[embedded] cannot read more input: {err}");
                return;
            }
        };
        if let Some(said) = publish_line(nats, &line).await {
            println!("{said}");
        }
    }
}

/// Publishes one line; what to print about it (`None` for a blank line or a comment).
pub(crate) async fn publish_line(nats: &InProcessNats, line: &str) -> Option<String> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let Some(rest) = line.strip_prefix("publish ") else {
        return Some(format!(
            "[embedded] not understood: `{line}`; write `publish SUBJECT JSON`"
        ));
    };
    let rest = rest.trim_start();
    let (subject, payload) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    let payload = payload.trim();
    if let Err(err) = serde_json::from_str::<serde_json::Value>(payload) {
        return Some(format!(
            "[embedded] not published: the payload for {subject} is not JSON ({err}); write `publish SUBJECT JSON`"
        ));
    }
    let stored = nats.stream_by_subject(subject).await.ok().flatten();
    match nats
        .publish(
            Arc::from(subject),
            Headers::new(),
            Bytes::copy_from_slice(payload.as_bytes()),
        )
        .await
    {
        Ok(()) => Some(match stored {
            Some(stream) => {
                format!("[embedded] published to {subject} (stored in stream {stream})")
            }
            None => format!("[embedded] published to {subject}"),
        }),
        Err(err) => Some(format!("[embedded] not published to `{subject}`: {err}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_publish_and_bad_lines_say_why() {
        let nats = InProcessNats::new();
        nats.declare_stream(StreamSpec {
            name: "PAYMENTS".into(),
            subjects: vec!["payments.>".into()],
        })
        .await
        .expect("declared");
        assert_eq!(publish_line(&nats, "  # a comment").await, None);
        assert_eq!(
            publish_line(&nats, r#"publish payments.authorized {"id": 1}"#)
                .await
                .as_deref(),
            Some("[embedded] published to payments.authorized (stored in stream PAYMENTS)")
        );
        assert_eq!(
            publish_line(&nats, r#"publish greetings {"name":"ada"}"#)
                .await
                .as_deref(),
            Some("[embedded] published to greetings")
        );
        let said = publish_line(&nats, "publish payments.authorized {oops").await;
        assert!(
            said.as_deref().is_some_and(|s| s.contains("not JSON")),
            "{said:?}"
        );
        let said = publish_line(&nats, "send x {}").await;
        assert!(
            said.as_deref()
                .is_some_and(|s| s.contains("publish SUBJECT JSON")),
            "{said:?}"
        );
        let said = publish_line(&nats, "publish bad..subject {}").await;
        assert!(
            said.as_deref().is_some_and(|s| s.contains("not published")),
            "{said:?}"
        );
        assert_eq!(nats.stream_messages("PAYMENTS").len(), 1);
        assert_eq!(nats.published("greetings").len(), 1);
    }
}
