//! One app test body, two servers: the production app on `TestApp` (NATS in process, paused
//! clock), and the same app on a real nats-server (real clock), asked the same questions.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ruststream::{App, Env, HandlerOutcome, Headers, RunningApp};
use ruststream_nats::testing::{ConsumerFacts, Recorder, StoredMessage, TestApp, streams_of};
use ruststream_nats::transport::RawMessage;
use ruststream_test_server::{NatsServer, client};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use super::PATIENCE;

/// A running app and the server it runs on.
pub enum AppWire {
    /// The app on NATS emulated in the process.
    InProcess(TestApp),
    /// The app on a real nats-server.
    Live(Box<Live>),
}

pub struct Live {
    running: Mutex<Option<RunningApp>>,
    recorder: Arc<Recorder>,
    client: async_nats::Client,
    jetstream: async_nats::jetstream::Context,
    wire: client::Recorder,
    // Last: killed after the app stopped.
    _server: NatsServer,
}

impl AppWire {
    /// `make(url)` on the NATS emulated in the process (the URL is not used).
    pub async fn in_process<A: App>(make: impl FnOnce(&str) -> A) -> Self {
        let t = TestApp::start(make("nats://unused:4222"))
            .await
            .expect("the app starts in process");
        Self::InProcess(t)
    }

    /// `make(url)` on a real nats-server, with the streams its descriptors read declared and
    /// every message on the app's subjects (the first token of each, then `>`) and every
    /// acknowledgement recorded from before the app starts.
    pub async fn live<A: App>(make: impl FnOnce(&str) -> A) -> Self {
        let server = NatsServer::start();
        let (client, jetstream) = client::connect_jetstream(&server).await;
        let app = make(&server.url());
        // Everything but the JetStream API: a subscriber there would answer for missing
        // responders and slow the client's API calls down to their timeouts.
        let mut subjects = vec!["$JS.ACK.>".to_owned()];
        for r in app.registrations() {
            let policy = &r.policy;
            let named = [
                Some(&r.descriptor.subject),
                policy.dead_letter.as_ref(),
                policy.retry_to.as_ref(),
            ];
            let published = r
                .publishes
                .iter()
                .map(|s| (*s).to_owned())
                .collect::<Vec<_>>();
            for subject in named.into_iter().flatten().chain(published.iter()) {
                let root = format!("{}.>", subject.split('.').next().unwrap_or(subject));
                if !subjects.contains(&root) {
                    subjects.push(root);
                }
            }
        }
        let wire = client::Recorder::start(&client, subjects).await;

        for spec in streams_of(&app.registrations()) {
            client::create_stream(&jetstream, &spec.name, spec.subjects).await;
        }
        let recorder = Arc::new(Recorder::new());
        let observer: Arc<dyn ruststream::Observer> = Arc::clone(&recorder) as _;
        let running = app
            .start(Env::new().with_observer(observer))
            .await
            .expect("the app starts on the live server");
        Self::Live(Box::new(Live {
            running: Mutex::new(Some(running)),
            recorder,
            client,
            jetstream,
            wire,
            _server: server,
        }))
    }

    pub fn is_live(&self) -> bool {
        matches!(self, Self::Live(_))
    }

    /// Publishes `value` as JSON to `subject`.
    pub async fn publish<T: Serialize>(&self, subject: &str, value: &T) {
        let payload = serde_json::to_vec(value).expect("encode");
        self.publish_raw(subject, Headers::new(), payload).await;
    }

    /// Publishes `payload` as it is.
    pub async fn publish_raw(&self, subject: &str, headers: Headers, payload: Vec<u8>) {
        match self {
            Self::InProcess(t) => t
                .publish_raw(subject, headers, payload)
                .await
                .expect("publish"),
            Self::Live(live) => {
                let headers: Vec<(&str, &str)> = headers.iter().collect();
                client::publish_core(&live.client, subject, &headers, payload).await;
            }
        }
    }

    /// Sends `value` as JSON in a Core request to `subject` and decodes the JSON response;
    /// panics when none came within [`PATIENCE`].
    pub async fn request<T: Serialize, R: DeserializeOwned>(&self, subject: &str, value: &T) -> R {
        match self {
            Self::InProcess(t) => t
                .request(subject, value, PATIENCE)
                .await
                .expect("a response in process"),
            Self::Live(live) => {
                let payload = serde_json::to_vec(value).expect("encode");
                let asked = live.client.request(subject.to_owned(), payload.into());
                let answer = tokio::time::timeout(PATIENCE, asked)
                    .await
                    .expect("a response within PATIENCE")
                    .expect("a response");
                serde_json::from_slice(&answer.payload).expect("a JSON response")
            }
        }
    }

    /// Lets `duration` pass (in process: on the paused clock).
    pub async fn pass(&self, duration: Duration) {
        match self {
            Self::InProcess(t) => t.advance(duration).await,
            Self::Live(_) => tokio::time::sleep(duration).await,
        }
    }

    /// Lets time pass until `condition` holds; panics after [`PATIENCE`].
    pub async fn wait_until(&self, mut condition: impl FnMut(&Self) -> bool) {
        let deadline = Instant::now() + PATIENCE;
        if let Self::InProcess(t) = self {
            t.settle().await;
        }
        while !condition(self) {
            assert!(
                Instant::now() < deadline,
                "the condition did not hold within {PATIENCE:?}"
            );
            self.pass(Duration::from_millis(10)).await;
        }
    }

    /// Lets the app finish what it is doing: settles in process; live, waits a moment.
    pub async fn quiet(&self) {
        match self {
            Self::InProcess(t) => t.settle().await,
            Self::Live(_) => tokio::time::sleep(super::QUIET).await,
        }
    }

    fn recorder(&self) -> &Recorder {
        match self {
            Self::InProcess(t) => t.recorder(),
            Self::Live(live) => &live.recorder,
        }
    }

    pub fn outcomes(&self, registration: &str) -> Vec<HandlerOutcome> {
        self.recorder().outcomes(registration)
    }

    pub fn delivered(&self, registration: &str) -> Vec<Option<u64>> {
        self.recorder().delivered(registration)
    }

    pub fn attempts(&self, registration: &str) -> Vec<u32> {
        self.recorder()
            .handled(registration)
            .iter()
            .map(|h| h.attempt)
            .collect()
    }

    /// The subject each delivery of `registration` arrived on.
    pub fn subjects(&self, registration: &str) -> Vec<String> {
        self.recorder()
            .handled(registration)
            .into_iter()
            .map(|h| h.subject)
            .collect()
    }

    pub fn decode_failures(&self, registration: &str) -> usize {
        self.recorder().decode_failures(registration).len()
    }

    /// Every message published to a subject `pattern` matches, in order.
    pub fn messages(&self, pattern: &str) -> Vec<RawMessage> {
        match self {
            Self::InProcess(t) => t.nats().published(pattern),
            Self::Live(live) => live
                .wire
                .matching(pattern)
                .into_iter()
                .map(raw_message)
                .collect(),
        }
    }

    /// Every message published to `pattern` that decodes as `T`.
    pub fn published<T: DeserializeOwned>(&self, pattern: &str) -> Vec<T> {
        self.messages(pattern)
            .iter()
            .filter_map(|m| serde_json::from_slice(&m.payload).ok())
            .collect()
    }

    /// The acknowledgements sent for `consumer` of `stream`, as their wire forms.
    pub fn acks(&self, stream: &str, consumer: &str) -> Vec<String> {
        match self {
            Self::InProcess(t) => t.nats().acknowledgements(stream, consumer),
            Self::Live(live) => live.wire.acks(stream, consumer),
        }
    }

    pub async fn consumer_info(&self, stream: &str, consumer: &str) -> ConsumerFacts {
        match self {
            Self::InProcess(t) => t
                .nats()
                .consumer_info(stream, consumer)
                .expect("the consumer exists"),
            Self::Live(live) => {
                ConsumerFacts::from(&client::consumer_info(&live.jetstream, stream, consumer).await)
            }
        }
    }

    pub async fn stream_messages(&self, name: &str) -> Vec<StoredMessage> {
        match self {
            Self::InProcess(t) => t.nats().stream_messages(name),
            Self::Live(live) => client::stream_messages(&live.jetstream, name)
                .await
                .into_iter()
                .map(StoredMessage::from)
                .collect(),
        }
    }

    /// Drains the app.
    pub async fn shutdown(&self) {
        match self {
            Self::InProcess(t) => t.shutdown().await.expect("a clean shutdown"),
            Self::Live(live) => {
                let running = live
                    .running
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take();
                if let Some(running) = running {
                    running.stop().await.expect("a clean shutdown");
                }
            }
        }
    }
}

/// A message the live server carried, as the in-process one records it.
fn raw_message(m: async_nats::Message) -> RawMessage {
    RawMessage {
        subject: Arc::from(m.subject.as_str()),
        reply: m.reply.map(Into::into),
        headers: m.headers.as_ref().map(headers_of).unwrap_or_default(),
        payload: m.payload,
        jetstream: None,
    }
}

fn headers_of(map: &async_nats::HeaderMap) -> Headers {
    let mut entries: Vec<(String, String)> = map
        .iter()
        .flat_map(|(name, values)| {
            values
                .iter()
                .map(move |v| (name.to_string(), v.as_str().to_owned()))
        })
        .collect();
    entries.sort();
    entries.into_iter().collect()
}

impl AppWire {
    /// The value key `key` holds in key-value bucket `bucket` on the server, if any.
    pub async fn kv_value(&self, bucket: &str, key: &str) -> Option<String> {
        let value = match self {
            Self::InProcess(t) => ruststream_nats::transport::KeyValue::kv_get(
                t.nats(),
                bucket.to_owned(),
                key.to_owned(),
            )
            .await
            .expect("the bucket exists in process")
            .map(|entry| entry.value),
            Self::Live(live) => live
                .jetstream
                .get_key_value(bucket)
                .await
                .expect("the bucket exists on the server")
                .get(key)
                .await
                .expect("the key reads"),
        };
        value.map(|v| String::from_utf8_lossy(&v).into_owned())
    }

    /// Writes `value` to `key` of bucket `bucket` on the server (in process, created when
    /// missing, with `max_age`), as another process would.
    pub async fn kv_put(&self, bucket: &str, max_age: Duration, key: &str, value: &str) {
        use ruststream_nats::transport::KeyValue;
        let value = bytes::Bytes::copy_from_slice(value.as_bytes());
        match self {
            Self::InProcess(t) => {
                t.nats()
                    .kv_bucket(bucket.to_owned(), max_age)
                    .await
                    .expect("the bucket is created in process");
                t.nats()
                    .kv_create(bucket.to_owned(), key.to_owned(), value)
                    .await
                    .expect("the key is written in process")
                    .expect("the key was free");
            }
            Self::Live(live) => {
                // The app created the bucket when it started.
                let store = live
                    .jetstream
                    .get_key_value(bucket)
                    .await
                    .expect("the bucket exists on the server");
                store.put(key, value).await.expect("the key is written");
            }
        }
    }
}
