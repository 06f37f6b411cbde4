//! The publisher against a wire whose stream answers as the test says.

use std::sync::Mutex;

use ruststream::{Delivery, Headers};

use super::*;
use crate::transport::{
    ConsumerSpec, CorePubSub, JetStreamPublish, KeyValue, PullConsumer, StreamAdmin, StreamSpec,
    Subscription, TransportError,
};

/// A wire whose stream `OUT` stores `out.>` and answers stored publishes with `answer`.
struct Wire {
    answer: fn() -> Result<StoredAck, TransportError>,
    /// A subject whose Core publish fails.
    failing: Option<&'static str>,
    sent: Mutex<Vec<(String, Headers)>>,
    /// Streams besides `OUT`, created as the test goes.
    more: Mutex<Vec<StreamSpec>>,
    /// What [`CorePubSub::hands_writes_to_a_task`] answers.
    hands_off: bool,
    /// What [`StreamAdmin::stream_by_subject`] answers: no stream by default (`Err(())`: the
    /// server cannot say).
    storing_now: Mutex<Result<Option<&'static str>, ()>>,
}

impl CorePubSub for Wire {
    fn publish(
        &self,
        subject: Arc<str>,
        headers: Headers,
        _payload: Bytes,
    ) -> BoxFuture<'_, Result<(), TransportError>> {
        if self.failing == Some(&*subject) {
            return Box::pin(async {
                Err(TransportError::new(
                    TransportErrorKind::Other,
                    "connection lost",
                ))
            });
        }
        self.sent
            .lock()
            .expect("not poisoned")
            .push((format!("core {subject}"), headers));
        Box::pin(async { Ok(()) })
    }

    fn hands_writes_to_a_task(&self) -> bool {
        self.hands_off
    }

    fn flush(&self) -> BoxFuture<'_, Result<(), TransportError>> {
        Box::pin(async { Ok(()) })
    }

    fn subscribe(
        &self,
        _subject: String,
        _queue_group: Option<String>,
    ) -> BoxFuture<'_, Result<Subscription, TransportError>> {
        Box::pin(async { Err(TransportError::new(TransportErrorKind::Other, "unused")) })
    }
}

impl JetStreamPublish for Wire {
    fn publish_stored(
        &self,
        _subject: Arc<str>,
        _headers: Headers,
        _payload: Bytes,
    ) -> BoxFuture<'_, Result<u64, TransportError>> {
        Box::pin(async { Err(TransportError::new(TransportErrorKind::Other, "unused")) })
    }

    fn publish_confirmed(
        &self,
        subject: Arc<str>,
        headers: Headers,
        _payload: Bytes,
    ) -> BoxFuture<'_, Result<StoredAck, TransportError>> {
        self.sent
            .lock()
            .expect("not poisoned")
            .push((format!("stored {subject}"), headers));
        let answer = (self.answer)();
        Box::pin(async move { answer })
    }
}

impl StreamAdmin for Wire {
    fn streams(&self) -> BoxFuture<'_, Result<Vec<StreamSpec>, TransportError>> {
        let mut streams = vec![StreamSpec {
            name: "OUT".into(),
            subjects: vec!["out.>".into()],
        }];
        streams.extend(self.more.lock().expect("not poisoned").iter().cloned());
        Box::pin(async move { Ok(streams) })
    }

    fn stream_exists(&self, _name: &str) -> BoxFuture<'_, Result<bool, TransportError>> {
        Box::pin(async { Ok(true) })
    }

    fn stream_by_subject(
        &self,
        _subject: &str,
    ) -> BoxFuture<'_, Result<Option<String>, TransportError>> {
        let answer = match *self.storing_now.lock().expect("not poisoned") {
            Ok(stream) => Ok(stream.map(str::to_owned)),
            Err(()) => Err(TransportError::new(
                TransportErrorKind::TimedOut,
                "no answer",
            )),
        };
        Box::pin(async move { answer })
    }

    fn declare_stream(&self, _spec: StreamSpec) -> BoxFuture<'_, Result<(), TransportError>> {
        Box::pin(async { Ok(()) })
    }
}

impl PullConsumer for Wire {
    fn consume(&self, _spec: ConsumerSpec) -> BoxFuture<'_, Result<Subscription, TransportError>> {
        Box::pin(async { Err(TransportError::new(TransportErrorKind::Other, "unused")) })
    }
}

impl KeyValue for Wire {}

impl Wire {
    /// Creates stream `name` storing `subject` (the wire announces nothing: its `subscribe`
    /// fails).
    fn create_stream(&self, name: &str, subject: &str) {
        self.more.lock().expect("not poisoned").push(StreamSpec {
            name: name.into(),
            subjects: vec![subject.into()],
        });
    }

    /// What was sent, in order: `"<core|stored> <subject>"` and the headers.
    fn sent(&self) -> Vec<(String, Headers)> {
        self.sent.lock().expect("not poisoned").clone()
    }

    /// Where it was sent, in order: `"<core|stored> <subject>"`.
    fn subjects(&self) -> Vec<String> {
        self.sent()
            .into_iter()
            .map(|(subject, _)| subject)
            .collect()
    }
}

fn publisher(answer: fn() -> Result<StoredAck, TransportError>) -> (Arc<Wire>, NatsPublisher) {
    failing_publisher(answer, None)
}

/// [`publisher`], whose Core publish to `failing` fails.
fn failing_publisher(
    answer: fn() -> Result<StoredAck, TransportError>,
    failing: Option<&'static str>,
) -> (Arc<Wire>, NatsPublisher) {
    wire_publisher(answer, failing, false)
}

/// [`publisher`] over a wire whose publishes are written by a task of its own, as
/// async-nats's are.
fn handing_off_publisher(
    answer: fn() -> Result<StoredAck, TransportError>,
) -> (Arc<Wire>, NatsPublisher) {
    wire_publisher(answer, None, true)
}

fn wire_publisher(
    answer: fn() -> Result<StoredAck, TransportError>,
    failing: Option<&'static str>,
    hands_off: bool,
) -> (Arc<Wire>, NatsPublisher) {
    let wire = Arc::new(Wire {
        answer,
        failing,
        sent: Mutex::new(Vec::new()),
        more: Mutex::new(Vec::new()),
        hands_off,
        storing_now: Mutex::new(Ok(None)),
    });
    let publisher = NatsPublisher::new(Arc::clone(&wire) as Arc<dyn Transport>);
    (wire, publisher)
}

/// The stream `OUT` stored the message.
fn stored_ack() -> Result<StoredAck, TransportError> {
    Ok(StoredAck {
        stream: "OUT".into(),
        sequence: 1,
        duplicate: false,
    })
}

fn jetstream_input() -> Delivery {
    let mut delivery = Delivery::new("orders.placed", Bytes::from_static(b"{}"));
    let info = JetStreamInfo::parse("$JS.ACK.ORDERS.worker.2.17.21.1700000000000000000.0")
        .expect("an acknowledgement subject");
    delivery.extensions_mut().insert(info);
    delivery
}

fn message(subject: &str) -> OutboundMessage {
    OutboundMessage::new(subject, Bytes::from_static(b"{}"))
}

#[tokio::test]
async fn a_stored_output_carries_the_id_derived_from_its_input() {
    let (wire, publisher) = publisher(stored_ack);
    let input = jetstream_input();
    let origin = Origin {
        delivery: &input,
        registration: "audit",
        output: 1,
    };
    publisher
        .publish_output(message("out.audited"), origin)
        .await
        .expect("stored");
    publisher
        .publish_output(message("elsewhere"), origin)
        .await
        .expect("published");
    let sent = wire.sent();
    assert_eq!(sent[0].0, "stored out.audited");
    assert_eq!(
        sent[0].1.get(MSG_ID_HEADER),
        Some("ORDERS:17:1700000000000000000:audit:1")
    );
    assert_eq!(sent[1].0, "core elsewhere");
    assert_eq!(
        sent[1].1.get(MSG_ID_HEADER),
        None,
        "Core outputs carry no id"
    );
}

#[tokio::test]
async fn a_stream_that_does_not_answer_in_time_is_not_stored_naming_the_stream() {
    let (_wire, publisher) = publisher(|| {
        Err(TransportError::new(
            TransportErrorKind::TimedOut,
            "timed out",
        ))
    });
    let err = publisher
        .publish(message("out.audited"))
        .await
        .expect_err("not confirmed");
    assert_eq!(err.kind(), PublishErrorKind::NotStored);
    assert!(
        err.to_string()
            .contains("stream `OUT` did not confirm the message in time"),
        "{err}"
    );
}

#[tokio::test]
async fn a_refusal_is_not_stored_with_the_reason() {
    let (_wire, publisher) = publisher(|| {
        Err(TransportError::new(
            TransportErrorKind::Refused,
            "maximum messages exceeded",
        ))
    });
    let err = publisher
        .publish(message("out.audited"))
        .await
        .expect_err("refused");
    assert_eq!(err.kind(), PublishErrorKind::NotStored);
    assert!(
        err.to_string()
            .contains("stream `OUT` refused the message: maximum messages exceeded"),
        "{err}"
    );
}

/// A Core request on `orders.placed` whose reply inbox is `_INBOX.r.1`.
fn request_input() -> Delivery {
    Delivery::new("orders.placed", Bytes::from_static(b"{}"))
        .with_reply(Some(Arc::from("_INBOX.r.1")))
}

/// `subject`'s value with a `content-type`, as output 0 of handling `input`, answering its
/// request when it is one.
fn encoded<'a>(subject: &'static str, input: &'a Delivery) -> EncodedOutput<'a> {
    let mut headers = Headers::new();
    headers.insert(ruststream::codec::CONTENT_TYPE, "application/json");
    let origin = Origin {
        delivery: input,
        registration: "answer",
        output: 0,
    };
    EncodedOutput::new(
        std::borrow::Cow::Borrowed(subject),
        headers,
        Bytes::from_static(b"{}"),
        origin,
    )
    .responding_to(input.reply_arc())
}

#[tokio::test]
async fn a_response_goes_before_a_core_output_with_the_same_headers() {
    let (wire, publisher) = publisher(|| Err(TransportError::new(TransportErrorKind::Other, "")));
    let input = request_input();
    publisher
        .publish_encoded(encoded("answered", &input))
        .await
        .expect("published");
    let sent = wire.sent();
    assert_eq!(wire.subjects(), ["core _INBOX.r.1", "core answered"]);
    assert_eq!(sent[0].1, sent[1].1);
    assert_eq!(
        sent[0].1.get(ruststream::codec::CONTENT_TYPE),
        Some("application/json")
    );
}

#[tokio::test]
async fn a_response_goes_after_its_confirmed_output_and_not_after_a_refused_one() {
    let (wire, storing) = publisher(stored_ack);
    let input = request_input();
    storing
        .publish_encoded(encoded("out.answered", &input))
        .await
        .expect("stored, then answered");
    assert_eq!(wire.subjects(), ["stored out.answered", "core _INBOX.r.1"]);

    let (wire, refusing) = publisher(|| {
        Err(TransportError::new(
            TransportErrorKind::Refused,
            "maximum messages exceeded",
        ))
    });
    let err = refusing
        .publish_encoded(encoded("out.answered", &input))
        .await
        .expect_err("refused");
    assert_eq!(err.kind(), PublishErrorKind::NotStored);
    assert_eq!(err.subject(), "out.answered");
    let sent = wire.sent();
    assert_eq!(
        sent.len(),
        1,
        "no response after a refused output: {sent:?}"
    );
}

#[tokio::test]
async fn the_response_to_a_stored_output_carries_no_message_id() {
    let (wire, publisher) = publisher(stored_ack);
    // A stream's delivery with an inbox: an output id is derived from it.
    let input = jetstream_input().with_reply(Some(Arc::from("_INBOX.r.1")));
    publisher
        .publish_encoded(encoded("out.answered", &input))
        .await
        .expect("stored, then answered");
    let sent = wire.sent();
    assert_eq!(wire.subjects(), ["stored out.answered", "core _INBOX.r.1"]);
    assert_eq!(
        sent[0].1.get(MSG_ID_HEADER),
        Some("ORDERS:17:1700000000000000000:answer:0")
    );
    assert_eq!(sent[1].1.get(MSG_ID_HEADER), None, "{:?}", sent[1].1);
    assert_eq!(
        sent[1].1.get(ruststream::codec::CONTENT_TYPE),
        Some("application/json")
    );
}

#[tokio::test]
async fn a_stream_gone_since_learned_publishes_the_output_on_core_then_the_response() {
    let (wire, publisher) = publisher(|| {
        Err(TransportError::new(
            TransportErrorKind::NoStream,
            "no stream",
        ))
    });
    let input = request_input();
    publisher
        .publish_encoded(encoded("out.answered", &input))
        .await
        .expect("published unconfirmed, then answered");
    let sent = wire.sent();
    assert_eq!(
        wire.subjects(),
        [
            "stored out.answered",
            "core out.answered",
            "core _INBOX.r.1"
        ]
    );
    assert_eq!(sent[1].1, sent[2].1);
}

/// No responder while the server still names a stream for the subject (its node is down), or
/// cannot say: the output is not stored, and not published on Core either; no response goes
/// out. The input must come back (a transient error).
#[tokio::test]
async fn a_stream_not_answering_is_an_error_not_a_core_publish() {
    for storing_now in [Ok(Some("OUT")), Err(())] {
        let (wire, publisher) = publisher(|| {
            Err(TransportError::new(
                TransportErrorKind::NoStream,
                "no responders",
            ))
        });
        *wire.storing_now.lock().expect("not poisoned") = storing_now;
        let input = request_input();
        let err = publisher
            .publish_encoded(encoded("out.answered", &input))
            .await
            .expect_err("not stored");
        assert_eq!(err.kind(), PublishErrorKind::NotStored, "{err}");
        assert!(!err.kind().is_permanent());
        assert!(err.to_string().contains("did not answer"), "{err}");
        assert_eq!(wire.subjects(), ["stored out.answered"], "{storing_now:?}");

        let err = publisher
            .send_stored(message("out.answered"))
            .await
            .expect_err("not stored");
        assert_eq!(err.kind(), PublishErrorKind::NotStored, "{err}");
        assert!(err.to_string().contains("did not answer"), "{err}");
    }
}

/// A message the stream refuses as too large is a permanent error, of its own kind.
#[tokio::test]
async fn a_message_too_large_is_a_permanent_error() {
    let (_, large) = publisher(|| {
        Err(TransportError::refused(
            crate::transport::Refusal::TooLarge,
            "message size exceeds maximum allowed",
        ))
    });
    let input = jetstream_input();
    let origin = Origin {
        delivery: &input,
        registration: "audit",
        output: 0,
    };
    let err = large
        .publish_output(message("out.audited"), origin)
        .await
        .expect_err("too large");
    assert_eq!(err.kind(), PublishErrorKind::TooLarge, "{err}");
    assert!(err.kind().is_permanent());
    let (_, full) = publisher(|| {
        Err(TransportError::refused(
            crate::transport::Refusal::StreamFull,
            "maximum messages exceeded",
        ))
    });
    let err = full
        .publish_output(message("out.audited"), origin)
        .await
        .expect_err("full");
    assert_eq!(err.kind(), PublishErrorKind::NotStored, "{err}");
    assert!(
        !err.kind().is_permanent(),
        "a full stream may take it later"
    );
}

/// Over a transport whose own task writes what is published (async-nats), the publish that
/// answers an awaited request yields once after handing the response over, so that task writes
/// it before the handler's task goes on; a request from a backlog, an output without a
/// response, or a transport that writes as it publishes, does not yield.
#[tokio::test]
async fn a_response_handed_to_a_writing_task_is_followed_by_one_yield() {
    // (wire, input, output subject, expected sent before the yield, whether it yields)
    let mut request = request_input();
    let backlog = request_input();
    request.extensions_mut().insert(AwaitedRequest);
    let plain = Delivery::new("orders.placed", Bytes::from_static(b"{}"));
    let cases: [(_, _, &'static str, &[&str], bool); 7] = [
        (
            handing_off_publisher(stored_ack),
            &backlog,
            "answered",
            &["core _INBOX.r.1", "core answered"],
            false,
        ),
        (
            handing_off_publisher(stored_ack),
            &backlog,
            "out.answered",
            &["stored out.answered", "core _INBOX.r.1"],
            false,
        ),
        (
            handing_off_publisher(stored_ack),
            &request,
            "answered",
            &["core _INBOX.r.1", "core answered"],
            true,
        ),
        (
            handing_off_publisher(stored_ack),
            &request,
            "out.answered",
            &["stored out.answered", "core _INBOX.r.1"],
            true,
        ),
        (
            handing_off_publisher(stored_ack),
            &plain,
            "answered",
            &["core answered"],
            false,
        ),
        (
            publisher(stored_ack),
            &request,
            "answered",
            &["core _INBOX.r.1", "core answered"],
            false,
        ),
        (
            publisher(stored_ack),
            &request,
            "out.answered",
            &["stored out.answered", "core _INBOX.r.1"],
            false,
        ),
    ];
    for ((wire, publisher), input, subject, sent, yields) in cases {
        publisher.learn().await;
        let mut publishing = publisher.publish_encoded(encoded(subject, input));
        let first = futures::poll!(&mut publishing);
        assert_eq!(wire.subjects(), sent, "{subject}: all handed over at once");
        if yields {
            assert!(first.is_pending(), "{subject}: yields after the response");
            publishing.await.expect("published");
        } else {
            assert!(
                matches!(first, std::task::Poll::Ready(Ok(()))),
                "{subject}, {:?}: done without a yield",
                input.reply()
            );
        }
        assert_eq!(
            wire.subjects(),
            sent,
            "{subject}: nothing more after the yield"
        );
    }
}

#[test]
fn an_output_failing_after_its_response_is_the_error_and_the_response_is_counted() {
    let (wire, publisher) = failing_publisher(
        || Err(TransportError::new(TransportErrorKind::Other, "")),
        Some("answered"),
    );
    let input = request_input();
    let recorder = crate::test_metrics::Capture::counter(
        "ruststream_published_total",
        Some(("subject_kind", "core")),
    );
    let err = metrics::with_local_recorder(&recorder, || {
        futures::executor::block_on(publisher.publish_encoded(encoded("answered", &input)))
    })
    .expect_err("the output fails");
    assert_eq!(err.kind(), PublishErrorKind::Broker);
    assert_eq!(err.subject(), "answered", "{err}");
    assert_eq!(wire.subjects(), ["core _INBOX.r.1"]);
    assert_eq!(
        recorder.counted(),
        1,
        "the response went out and is counted"
    );
}

#[tokio::test]
async fn an_inbox_that_is_not_a_subject_is_refused_before_anything_is_sent() {
    let (wire, publisher) = publisher(|| Err(TransportError::new(TransportErrorKind::Other, "")));
    let input = Delivery::new("orders.placed", Bytes::from_static(b"{}"))
        .with_reply(Some(Arc::from("_INBOX.*")));
    let err = publisher
        .publish_encoded(encoded("answered", &input))
        .await
        .expect_err("a pattern is no inbox");
    assert_eq!(err.kind(), PublishErrorKind::InvalidSubject);
    assert_eq!(err.subject(), "_INBOX.*");
    assert!(wire.sent().is_empty());
}

#[test]
fn an_output_id_is_the_same_for_a_redelivery_and_new_for_a_recreated_stream() {
    let id = |ack: &str| {
        let mut input = Delivery::new("orders.placed", Bytes::from_static(b"{}"));
        let info = JetStreamInfo::parse(ack).expect("an acknowledgement subject");
        input.extensions_mut().insert(info);
        let origin = Origin {
            delivery: &input,
            registration: "audit",
            output: 0,
        };
        output_message_id(&origin)
    };
    let first = id("$JS.ACK.ORDERS.worker.1.17.21.1700000000000000000.0");
    // Delivered again by another consumer, later: the same stored message.
    let again = id("$JS.ACK.ORDERS.other.3.17.40.1700000000000000000.5");
    // Sequence 17 of the stream created again: stored at another time.
    let recreated = id("$JS.ACK.ORDERS.worker.1.17.17.1700000000500000000.0");
    assert_eq!(first, again);
    assert_ne!(first, recreated);
}

#[test]
fn a_core_input_has_no_output_id() {
    let input = Delivery::new("orders.placed", Bytes::from_static(b"{}"));
    let origin = Origin {
        delivery: &input,
        registration: "audit",
        output: 0,
    };
    assert_eq!(output_message_id(&origin), None);
}

mod filter {
    use super::super::streams::Filter;

    include!("../subject/match_table.rs");

    #[test]
    fn a_prepared_filter_answers_every_row_of_the_shared_match_table() {
        for &(pattern, subject, expected) in MATCH_TABLE {
            assert_eq!(
                Filter::new(pattern.to_owned()).matches(subject),
                expected,
                "{pattern} against {subject}"
            );
        }
    }
}

/// A running app's publisher whose connection cannot see the stream advisories (this wire's
/// `subscribe` fails) still learns a new stream, at the periodic look; and at once when a
/// publish found a stream gone.
#[tokio::test(start_paused = true)]
async fn without_the_advisories_a_new_stream_is_learned_at_the_periodic_look() {
    let (wire, publisher) = publisher(stored_ack);
    let watch = publisher.watch_streams().await;
    publisher.learn().await;
    let (stop, signal) = tokio::sync::watch::channel(None);
    let watching = tokio::spawn(watch.run(signal));

    wire.create_stream("LATE", "late.>");
    tokio::time::sleep(RELEARN_AFTER / 2).await;
    assert_eq!(
        publisher.stream_of("late.issued"),
        None,
        "not before the look"
    );
    tokio::time::sleep(RELEARN_AFTER / 2 + Duration::from_millis(1)).await;
    assert_eq!(publisher.stream_of("late.issued").as_deref(), Some("LATE"));

    // A publish that found its stream gone wakes the watcher: no time passes.
    wire.create_stream("LATER", "later.>");
    publisher.stored.forget();
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_eq!(
        publisher.stream_of("later.issued").as_deref(),
        Some("LATER")
    );

    stop.send(Some(tokio::time::Instant::now()))
        .expect("the watcher listens");
    watching.await.expect("the watcher stops");
}
