//! The two servers of the differential test behind one interface. What the runtime does goes
//! through the [`Transport`] trait (stored publishes, confirmed acknowledgements, key-value);
//! what only a test's own client does (create, delete and fetch from a consumer, consumer and
//! stream info) goes to `InProcessNats`'s test methods or to async-nats on a real server.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use futures::StreamExt;
use ruststream_nats::testing::{ConsumerFacts, InProcessNats};
use ruststream_nats::transport::nats::NatsTransport;
use ruststream_nats::transport::{ConsumerSpec, Transport};
use ruststream_test_server::{NatsServer, client};

use super::{ACK_WAIT, FETCH_EXPIRES};

/// A delivery a fetch handed over: its subject, payload and acknowledgement subject.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub subject: String,
    pub payload: String,
    pub reply: String,
}

/// What `consumer info` says, with the ack floor: (consumer seq, stream seq).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerState {
    pub facts: ConsumerFacts,
    pub ack_floor: (u64, u64),
}

/// What `stream info` says: messages, first and last sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamState {
    pub messages: u64,
    pub first: u64,
    pub last: u64,
}

/// A server the interpreter runs a case on.
pub enum Server {
    InProcess(InProcessNats),
    Live(Box<Live>),
}

/// A real nats-server, one for a whole run, and the two clients of the test: the transport
/// the runtime uses, and JetStream for the questions.
pub struct Live {
    transport: NatsTransport,
    jetstream: jetstream::Context,
    _server: NatsServer,
}

impl Live {
    /// Starts a nats-server (it fails clearly when none is found) and connects.
    pub async fn start() -> Self {
        let server = NatsServer::start();
        let (client, jetstream) = client::connect_jetstream(&server).await;
        Self {
            transport: NatsTransport::new(client),
            jetstream,
            _server: server,
        }
    }

    async fn stream(&self, name: &str) -> Option<jetstream::stream::Stream> {
        self.jetstream.get_stream(name).await.ok()
    }
}

/// The consumer `name` reading `filter` of `stream`: durable, explicit acks, [`ACK_WAIT`].
pub fn spec(stream: &str, name: &str, filter: &str) -> ConsumerSpec {
    ConsumerSpec {
        stream: stream.to_owned(),
        durable: Some(name.to_owned()),
        filter_subject: filter.to_owned(),
        ack_wait: ACK_WAIT,
        max_ack_pending: None,
        deliver_policy: ruststream_nats::DeliverPolicy::All,
        batch: 1,
        expires: FETCH_EXPIRES,
    }
}

impl Server {
    /// The wire, as the runtime uses it.
    pub fn wire(&self) -> &dyn Transport {
        match self {
            Self::InProcess(nats) => nats,
            Self::Live(live) => &live.transport,
        }
    }

    /// Creates consumer `spec` (or finds it as it is); the error's words otherwise.
    pub async fn create_consumer(&self, spec: &ConsumerSpec) -> Result<(), String> {
        match self {
            Self::InProcess(nats) => nats
                .create_consumer(spec)
                .map(drop)
                .map_err(|e| format!("{:?}", e.kind)),
            Self::Live(live) => {
                let Some(stream) = live.stream(&spec.stream).await else {
                    return Err("StreamNotFound".to_owned());
                };
                stream
                    .create_consumer(consumer::pull::Config {
                        durable_name: spec.durable.clone(),
                        filter_subject: spec.filter_subject.clone(),
                        ack_policy: consumer::AckPolicy::Explicit,
                        ack_wait: spec.ack_wait,
                        deliver_policy: consumer::DeliverPolicy::All,
                        ..Default::default()
                    })
                    .await
                    .map(drop)
                    .map_err(|e| format!("{e}"))
            }
        }
    }

    /// Deletes consumer `name` of `stream`; whether there was one.
    pub async fn delete_consumer(&self, stream: &str, name: &str) -> bool {
        match self {
            Self::InProcess(nats) => nats.delete_consumer(stream, name),
            Self::Live(live) => match live.stream(stream).await {
                Some(s) => s.delete_consumer(name).await.is_ok(),
                None => false,
            },
        }
    }

    /// One pull request of up to `batch` messages; `None` without such a consumer.
    pub async fn fetch(&self, stream: &str, name: &str, batch: usize) -> Option<Vec<Delivery>> {
        match self {
            Self::InProcess(nats) => {
                let got = nats.fetch(stream, name, batch, FETCH_EXPIRES).await.ok()?;
                Some(
                    got.into_iter()
                        .map(|m| Delivery {
                            subject: m.subject.to_string(),
                            payload: String::from_utf8_lossy(&m.payload).into_owned(),
                            reply: m.reply.map(|r| r.to_string()).unwrap_or_default(),
                        })
                        .collect(),
                )
            }
            Self::Live(live) => {
                let consumer: consumer::PullConsumer =
                    live.stream(stream).await?.get_consumer(name).await.ok()?;
                let mut messages = consumer
                    .fetch()
                    .max_messages(batch)
                    .expires(FETCH_EXPIRES)
                    .messages()
                    .await
                    .expect("a fetch from an existing consumer");
                let mut got = Vec::new();
                // Past the expiry: the server ends the request and the client the batch.
                let end = tokio::time::Instant::now() + FETCH_EXPIRES + Duration::from_secs(5);
                while let Ok(Some(message)) = tokio::time::timeout_at(end, messages.next()).await {
                    let message = message.expect("a delivery of the fetch");
                    got.push(Delivery {
                        subject: message.subject.to_string(),
                        payload: String::from_utf8_lossy(&message.payload).into_owned(),
                        reply: message
                            .reply
                            .as_ref()
                            .map(ToString::to_string)
                            .unwrap_or_default(),
                    });
                }
                Some(got)
            }
        }
    }

    /// Consumer `name` of `stream` as `consumer info` reports it; `None` without one.
    pub async fn consumer(&self, stream: &str, name: &str) -> Option<ConsumerState> {
        match self {
            Self::InProcess(nats) => Some(ConsumerState {
                facts: nats.consumer_info(stream, name)?,
                ack_floor: nats.ack_floor(stream, name)?,
            }),
            Self::Live(live) => {
                let info = live.stream(stream).await?.consumer_info(name).await.ok()?;
                Some(ConsumerState {
                    facts: ConsumerFacts::from(&info),
                    ack_floor: (
                        info.ack_floor.consumer_sequence,
                        info.ack_floor.stream_sequence,
                    ),
                })
            }
        }
    }

    /// Stream `name` as `stream info` reports it.
    pub async fn stream(&self, name: &str) -> StreamState {
        match self {
            Self::InProcess(nats) => {
                let messages = nats.stream_messages(name);
                StreamState {
                    messages: messages.len() as u64,
                    first: messages.first().map_or(0, |m| m.sequence),
                    last: messages.last().map_or(0, |m| m.sequence),
                }
            }
            Self::Live(live) => {
                let mut stream = live.stream(name).await.expect("the case's stream exists");
                let info = stream.info().await.expect("the stream's info");
                StreamState {
                    messages: info.state.messages,
                    first: info.state.first_sequence,
                    last: info.state.last_sequence,
                }
            }
        }
    }

    /// Settles the delivery whose acknowledgement subject is `reply` with `wire`, waiting for
    /// the server to confirm it acted on it; the error's kind otherwise.
    pub async fn settle(&self, reply: &str, wire: String) -> Result<(), String> {
        self.wire()
            .settle_confirmed(Arc::from(reply), wire.into())
            .await
            .map_err(|e| format!("{:?}", e.kind))
    }
}
