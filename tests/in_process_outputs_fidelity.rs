//! The emulation's fidelity for what outputs rely on, proven at the wire: each scenario runs
//! against the NATS emulated in the process (paused clock) and a real nats-server (real clock),
//! through the same `Transport` calls the runtime makes: stored publishes and their
//! acknowledgements, the duplicate window, stream limits with `discard: new`, Core
//! request/reply with no responders and timeouts, and the payload limit.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt as _;
use ruststream::Headers;
use ruststream_nats::testing::{InProcessNats, MAX_PAYLOAD, StreamLimits};
use ruststream_nats::transport::nats::NatsTransport;
use ruststream_nats::transport::{
    Refusal, StoredAck, StreamAdmin as _, StreamSpec, Transport, TransportErrorKind,
};
use ruststream_test_server::{NatsServer, client};

/// A server the scenarios run against, in process or live.
#[allow(clippy::large_enum_variant)] // one per test
enum Server {
    InProcess(InProcessNats),
    Live {
        transport: NatsTransport,
        js: async_nats::jetstream::Context,
        _server: NatsServer,
    },
}

impl Server {
    async fn live() -> Self {
        let server = NatsServer::start();
        let (client, js) = client::connect_jetstream(&server).await;
        Self::Live {
            transport: NatsTransport::new(client),
            js,
            _server: server,
        }
    }

    fn wire(&self) -> &dyn Transport {
        match self {
            Self::InProcess(nats) => nats,
            Self::Live { transport, .. } => transport,
        }
    }

    /// Stream `name` storing `subjects`, with `limits`.
    async fn stream(&self, name: &str, subjects: &[&str], limits: StreamLimits) {
        match self {
            Self::InProcess(nats) => {
                nats.declare_stream(StreamSpec {
                    name: name.into(),
                    subjects: subjects.iter().map(|s| (*s).to_owned()).collect(),
                })
                .await
                .expect("declared");
                assert!(nats.set_stream_limits(name, limits));
            }
            Self::Live { js, .. } => {
                use async_nats::jetstream::stream;
                js.create_stream(stream::Config {
                    name: name.into(),
                    subjects: subjects.iter().map(|s| (*s).to_owned()).collect(),
                    max_messages: limits
                        .max_msgs
                        .map_or(-1, |m| i64::try_from(m).unwrap_or(-1)),
                    discard: if limits.discard_new {
                        stream::DiscardPolicy::New
                    } else {
                        stream::DiscardPolicy::Old
                    },
                    duplicate_window: limits.duplicate_window,
                    ..Default::default()
                })
                .await
                .expect("created");
            }
        }
    }

    async fn stored(&self, stream: &str) -> Vec<String> {
        let messages = match self {
            Self::InProcess(nats) => nats.stream_messages(stream),
            Self::Live { js, .. } => client::stream_messages(js, stream)
                .await
                .into_iter()
                .map(Into::into)
                .collect(),
        };
        messages
            .into_iter()
            .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
            .collect()
    }

    async fn confirmed(
        &self,
        subject: &str,
        id: Option<&str>,
        payload: &'static str,
    ) -> Result<StoredAck, ruststream_nats::transport::TransportError> {
        let mut headers = Headers::new();
        if let Some(id) = id {
            headers.insert("Nats-Msg-Id", id);
        }
        self.wire()
            .publish_confirmed(
                Arc::from(subject),
                headers,
                Bytes::from_static(payload.as_bytes()),
            )
            .await
    }
}

macro_rules! both {
    ($($name:ident),* $(,)?) => {
        mod in_process {
            $(
                #[tokio::test(start_paused = true)]
                async fn $name() {
                    super::$name(&super::Server::InProcess(super::InProcessNats::new())).await;
                }
            )*
        }
        mod live {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(&super::Server::live().await).await;
                }
            )*
        }
    };
}

both!(
    a_stored_publish_is_acknowledged_with_stream_and_sequence,
    a_full_stream_with_discard_new_refuses_and_core_subscribers_still_get_it,
    a_full_stream_with_discard_old_drops_its_oldest,
    the_duplicate_window_drops_a_second_copy_until_it_ends,
    a_request_gets_the_first_response,
    a_request_nobody_listens_to_fails_at_once,
    a_request_nobody_answers_times_out,
    a_message_past_max_payload_is_refused,
);

async fn a_stored_publish_is_acknowledged_with_stream_and_sequence(server: &Server) {
    server
        .stream("OUT", &["out.>"], StreamLimits::default())
        .await;
    let ack = server.confirmed("out.a", None, "1").await.expect("stored");
    assert_eq!(
        (ack.stream.as_str(), ack.sequence, ack.duplicate),
        ("OUT", 1, false)
    );
    let ack = server.confirmed("out.b", None, "2").await.expect("stored");
    assert_eq!(
        (ack.stream.as_str(), ack.sequence, ack.duplicate),
        ("OUT", 2, false)
    );
    let err = server
        .confirmed("elsewhere.a", None, "3")
        .await
        .expect_err("no stream stores it");
    assert_eq!(err.kind, TransportErrorKind::NoStream, "{err}");
    let streams = server.wire().streams().await.expect("listed");
    assert_eq!(
        streams,
        [StreamSpec {
            name: "OUT".into(),
            subjects: vec!["out.>".into()],
        }]
    );
}

async fn a_full_stream_with_discard_new_refuses_and_core_subscribers_still_get_it(server: &Server) {
    server
        .stream("OUT", &["out.>"], StreamLimits::refuse_past(2))
        .await;
    let (mut core, _stop) = server
        .wire()
        .subscribe("out.>".into(), None)
        .await
        .expect("subscribed");
    server.confirmed("out.a", None, "1").await.expect("stored");
    server.confirmed("out.a", None, "2").await.expect("stored");
    let err = server
        .confirmed("out.a", None, "3")
        .await
        .expect_err("the stream is full");
    assert_eq!(err.kind, TransportErrorKind::Refused, "{err}");
    assert_eq!(err.refusal(), Some(Refusal::StreamFull), "{err}");
    assert_eq!(server.stored("OUT").await, ["1", "2"]);
    for expected in ["1", "2", "3"] {
        let message = tokio::time::timeout(Duration::from_secs(5), core.next())
            .await
            .expect("in time")
            .expect("open")
            .expect("a message");
        assert_eq!(&message.payload[..], expected.as_bytes());
    }
}

async fn a_full_stream_with_discard_old_drops_its_oldest(server: &Server) {
    server
        .stream("OUT", &["out.>"], StreamLimits::drop_oldest_past(2))
        .await;
    for payload in ["1", "2", "3"] {
        server
            .confirmed("out.a", None, payload)
            .await
            .expect("stored");
    }
    assert_eq!(server.stored("OUT").await, ["2", "3"]);
}

async fn the_duplicate_window_drops_a_second_copy_until_it_ends(server: &Server) {
    let limits = StreamLimits::default().with_duplicate_window(Duration::from_secs(1));
    server.stream("OUT", &["out.>"], limits).await;
    let first = server
        .confirmed("out.a", Some("m1"), "1")
        .await
        .expect("stored");
    assert_eq!((first.sequence, first.duplicate), (1, false));
    let again = server
        .confirmed("out.a", Some("m1"), "1")
        .await
        .expect("acknowledged");
    assert_eq!((again.sequence, again.duplicate), (1, true));
    let other = server
        .confirmed("out.a", Some("m2"), "2")
        .await
        .expect("stored");
    assert_eq!((other.sequence, other.duplicate), (2, false));
    assert_eq!(server.stored("OUT").await, ["1", "2"]);

    // Past the window the id is forgotten.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let later = server
        .confirmed("out.a", Some("m1"), "1")
        .await
        .expect("stored");
    assert_eq!((later.sequence, later.duplicate), (3, false));
    assert_eq!(server.stored("OUT").await, ["1", "2", "1"]);
}

async fn a_request_gets_the_first_response(server: &Server) {
    let (mut requests, _stop) = server
        .wire()
        .subscribe("svc.echo".into(), None)
        .await
        .expect("subscribed");
    let wire = server.wire();
    let answer = async {
        let request = requests.next().await.expect("open").expect("a request");
        let inbox = request.reply.clone().expect("a request carries its inbox");
        let mut payload = request.payload.to_vec();
        payload.extend_from_slice(b"!");
        wire.publish(inbox.into(), Headers::new(), payload.into())
            .await
            .expect("answered");
    };
    let ask = wire.request(
        Arc::from("svc.echo"),
        Headers::new(),
        Bytes::from_static(b"hi"),
        Duration::from_secs(5),
    );
    let (response, ()) = tokio::join!(ask, answer);
    assert_eq!(&response.expect("a response").payload[..], b"hi!");
}

async fn a_request_nobody_listens_to_fails_at_once(server: &Server) {
    let started = tokio::time::Instant::now();
    let err = server
        .wire()
        .request(
            Arc::from("svc.nobody"),
            Headers::new(),
            Bytes::from_static(b"hi"),
            Duration::from_secs(30),
        )
        .await
        .expect_err("no responders");
    assert_eq!(err.kind, TransportErrorKind::NoResponders, "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

async fn a_request_nobody_answers_times_out(server: &Server) {
    let (_requests, _stop) = server
        .wire()
        .subscribe("svc.silent".into(), None)
        .await
        .expect("subscribed");
    let started = tokio::time::Instant::now();
    let err = server
        .wire()
        .request(
            Arc::from("svc.silent"),
            Headers::new(),
            Bytes::from_static(b"hi"),
            Duration::from_millis(300),
        )
        .await
        .expect_err("a timeout");
    assert_eq!(err.kind, TransportErrorKind::TimedOut, "{err}");
    assert!(started.elapsed() >= Duration::from_millis(300));
}

async fn a_message_past_max_payload_is_refused(server: &Server) {
    let big = Bytes::from(vec![b'x'; MAX_PAYLOAD + 1]);
    let err = server
        .wire()
        .publish(Arc::from("big.a"), Headers::new(), big)
        .await
        .expect_err("past max_payload");
    assert_eq!(err.kind, TransportErrorKind::Refused, "{err}");
    assert_eq!(err.refusal(), Some(Refusal::TooLarge), "{err}");
    let fits = Bytes::from(vec![b'x'; 1000]);
    server
        .wire()
        .publish(Arc::from("big.a"), Headers::new(), fits)
        .await
        .expect("within the limit");
}
