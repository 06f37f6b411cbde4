//! The typed JetStream publisher, `NatsClient::stored`: the stream's acknowledgement (stream,
//! sequence, duplicate), message ids, the `Nats-Expected-*` checks and headers, outside a
//! handler (the running app's client) and inside one (`NatsClient::from_context`); errors name
//! the stream and the failed expectation. The same scenario bodies run against the in-process
//! NATS (`TestApp::client`) and a real nats-server, which also proves the emulation's duplicate
//! window, expectations and payload limit.

mod support;

use std::sync::Arc;
use std::time::Duration;

use ruststream::{App as _, PublishErrorKind};
use ruststream_nats::prelude::*;
use ruststream_nats::testing::{InProcessNats, StoredMessage, TestApp};
use ruststream_nats::transport::{StreamAdmin as _, StreamSpec, TransportOverride};
use ruststream_nats::{NatsClient, StoredAck};
use serde::Deserialize;

use ruststream_test_server::client::{connect_jetstream, create_stream, stream_messages};
use support::nats::PATIENCE;

#[derive(Debug, Deserialize)]
struct Command {
    id: u64,
}

/// Records a command as an event, stored with an id of its own, from inside the handler.
#[subscriber("commands.record")]
async fn record(command: &Command, ctx: &mut Context<'_>) -> HandlerOutcome {
    let Some(nats) = NatsClient::from_context(ctx) else {
        return HandlerOutcome::drop();
    };
    match nats
        .stored(
            "events.recorded",
            &serde_json::json!({ "command": command.id }),
        )
        .message_id(format!("command-{}", command.id))
        .send()
        .await
    {
        Ok(_) => HandlerOutcome::ack(),
        Err(_) => HandlerOutcome::retry(),
    }
}

fn app() -> impl App<State = ()> {
    RustStream::new(AppInfo::new("events", "0.1.0")).with_broker(
        NatsBroker::new("nats://127.0.0.1:1"),
        |b| {
            b.include(record);
        },
    )
}

#[allow(clippy::large_enum_variant)] // one per test
enum Server {
    InProcess(TestApp),
    Live {
        _server: ruststream_test_server::NatsServer,
        js: async_nats::jetstream::Context,
        client: async_nats::Client,
        running: ruststream::RunningApp,
    },
}

impl Server {
    /// The app on a server whose `EVENTS` stores `events.>`.
    async fn start(live: bool) -> Self {
        if live {
            support::nats::logs();
            let server = ruststream_test_server::NatsServer::start();
            let (client, js) = connect_jetstream(&server).await;
            create_stream(&js, "EVENTS", ["events.>"]).await;
            let transport = ruststream_nats::transport::nats::NatsTransport::new(client.clone());
            let env = ruststream::Env::new().with(TransportOverride(Arc::new(transport)));
            let running = app().start(env).await.expect("the app starts");
            Self::Live {
                _server: server,
                js,
                client,
                running,
            }
        } else {
            let nats = InProcessNats::new();
            nats.declare_stream(StreamSpec {
                name: "EVENTS".into(),
                subjects: vec!["events.>".into()],
            })
            .await
            .expect("declared");
            Self::InProcess(
                TestApp::start_on(app(), nats)
                    .await
                    .expect("the app starts"),
            )
        }
    }

    fn client(&self) -> NatsClient {
        match self {
            Self::InProcess(t) => t.client(),
            Self::Live { running, .. } => NatsClient::of(running).expect("a NATS broker"),
        }
    }

    async fn stored(&self) -> Vec<StoredMessage> {
        match self {
            Self::InProcess(t) => t.nats().stream_messages("EVENTS"),
            Self::Live { js, .. } => stream_messages(js, "EVENTS")
                .await
                .into_iter()
                .map(StoredMessage::from)
                .collect(),
        }
    }

    async fn publish_core(&self, subject: &str, payload: &'static str) {
        match self {
            Self::InProcess(t) => {
                t.publish_raw(subject, ruststream::Headers::new(), payload)
                    .await
                    .expect("published");
            }
            Self::Live { client, .. } => {
                client
                    .publish(subject.to_owned(), payload.into())
                    .await
                    .expect("published");
                client.flush().await.expect("flushed");
            }
        }
    }

    async fn until_stored(&self, n: usize) -> Vec<StoredMessage> {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            if let Self::InProcess(t) = self {
                t.settle().await;
            }
            let stored = self.stored().await;
            if stored.len() >= n {
                return stored;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {n} events; the stream holds {stored:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn stop(self) {
        match self {
            Self::InProcess(t) => t.shutdown().await.expect("a clean stop"),
            Self::Live { running, .. } => running.stop().await.expect("a clean stop"),
        }
    }
}

macro_rules! both {
    ($($name:ident),* $(,)?) => {
        mod in_process {
            $(
                #[tokio::test(start_paused = true)]
                async fn $name() {
                    super::$name(super::Server::start(false).await).await;
                }
            )*
        }
        mod live {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(super::Server::start(true).await).await;
                }
            )*
        }
    };
}

both!(
    a_stored_publish_returns_the_acknowledgement_and_deduplicates,
    expectations_refuse_with_the_stream_and_the_expectation,
    headers_are_stored,
    a_handler_publishes_through_its_context,
    a_message_past_the_payload_limit_is_refused,
);

fn ack(sequence: u64, duplicate: bool) -> StoredAck {
    StoredAck {
        stream: "EVENTS".into(),
        sequence,
        duplicate,
    }
}

async fn a_stored_publish_returns_the_acknowledgement_and_deduplicates(server: Server) {
    let nats = server.client();
    let first = nats
        .stored("events.a", &1)
        .message_id("m1")
        .send()
        .await
        .expect("stored");
    assert_eq!(first, ack(1, false));
    let again = nats
        .stored("events.a", &1)
        .message_id("m1")
        .send()
        .await
        .expect("acknowledged");
    assert_eq!(again, ack(1, true), "a duplicate within the window");
    let other = nats
        .stored("events.a", &2)
        .message_id("m2")
        .send()
        .await
        .expect("stored");
    assert_eq!(other, ack(2, false));
    assert_eq!(server.stored().await.len(), 2);

    let err = nats
        .stored("nowhere.a", &1)
        .send()
        .await
        .expect_err("no stream stores it");
    assert_eq!(err.kind(), PublishErrorKind::NotStored, "{err}");
    assert!(err.to_string().contains("no stream stores"), "{err}");
    server.stop().await;
}

async fn expectations_refuse_with_the_stream_and_the_expectation(server: Server) {
    let nats = server.client();
    let stored = nats
        .stored("events.a", &1)
        .message_id("m1")
        .expected_last_sequence(0)
        .send()
        .await
        .expect("the stream was empty");
    assert_eq!(stored.sequence, 1);

    let refused = |err: ruststream::PublishError, expectation: &str| {
        assert_eq!(err.kind(), PublishErrorKind::NotStored, "{err}");
        let text = err.to_string();
        assert!(text.contains("stream `EVENTS`"), "names the stream: {text}");
        assert!(text.contains(expectation), "names the expectation: {text}");
    };
    refused(
        nats.stored("events.a", &2)
            .expected_last_sequence(7)
            .send()
            .await
            .expect_err("the last sequence is 1"),
        "Nats-Expected-Last-Sequence: 7",
    );
    refused(
        nats.stored("events.a", &2)
            .expected_last_subject_sequence(0)
            .send()
            .await
            .expect_err("events.a has a message"),
        "Nats-Expected-Last-Subject-Sequence: 0",
    );
    refused(
        nats.stored("events.a", &2)
            .expected_last_message_id("m0")
            .send()
            .await
            .expect_err("the last id is m1"),
        "Nats-Expected-Last-Msg-Id: m0",
    );
    refused(
        nats.stored("events.a", &2)
            .expected_stream("OTHER")
            .send()
            .await
            .expect_err("EVENTS stores it"),
        "Nats-Expected-Stream: OTHER",
    );

    // Met expectations store.
    let stored = nats
        .stored("events.b", &3)
        .expected_last_sequence(1)
        .expected_last_subject_sequence(0)
        .expected_last_message_id("m1")
        .expected_stream("EVENTS")
        .send()
        .await
        .expect("every expectation holds");
    assert_eq!(stored.sequence, 2);
    assert_eq!(server.stored().await.len(), 2, "nothing refused was stored");
    server.stop().await;
}

async fn headers_are_stored(server: Server) {
    let nats = server.client();
    nats.stored("events.a", &1)
        .with_header("x-tenant", "acme")
        .message_id("m1")
        .send()
        .await
        .expect("stored");
    let stored = server.stored().await;
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].headers.get("x-tenant"), Some("acme"));
    assert_eq!(stored[0].headers.get("Nats-Msg-Id"), Some("m1"));
    server.stop().await;
}

async fn a_handler_publishes_through_its_context(server: Server) {
    server.publish_core("commands.record", r#"{"id":5}"#).await;
    server.publish_core("commands.record", r#"{"id":5}"#).await;
    server.publish_core("commands.record", r#"{"id":6}"#).await;
    let stored = server.until_stored(2).await;
    let payloads: Vec<_> = stored
        .iter()
        .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
        .collect();
    assert_eq!(payloads, [r#"{"command":5}"#, r#"{"command":6}"#]);
    assert_eq!(stored[0].headers.get("Nats-Msg-Id"), Some("command-5"));
    server.stop().await;
}

async fn a_message_past_the_payload_limit_is_refused(server: Server) {
    let nats = server.client();
    let big = "x".repeat(ruststream_nats::testing::MAX_PAYLOAD + 1);
    let err = nats
        .publish_to("big.payload", &big)
        .await
        .expect_err("past max_payload");
    assert_eq!(err.kind(), PublishErrorKind::TooLarge, "{err}");
    assert!(err.kind().is_permanent());
    assert!(err.to_string().contains("payload"), "{err}");
    let fits = "x".repeat(1000);
    nats.publish_to("big.payload", &fits)
        .await
        .expect("a message within the limit");
    server.stop().await;
}
