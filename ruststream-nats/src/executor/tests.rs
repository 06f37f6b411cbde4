//! The executor against a transport that records what it was asked to send.

use std::num::NonZeroU32;
use std::sync::Mutex;
use std::sync::atomic::Ordering;

use futures::future::BoxFuture;
use ruststream::Registration;
use ruststream::settle::{Facts, decide};
use ruststream::{HandlerOutcome, Headers};

use super::*;
use crate::transport::{
    ConsumerSpec, CorePubSub, JetStreamPublish, KeyValue, PullConsumer, StreamAdmin, StreamSpec,
    Subscription,
};

/// Records what reached the wire; a stored publish answers `stored`.
struct Wire {
    sent: Mutex<Vec<String>>,
    stored: fn() -> Result<u64, TransportError>,
    stream: Option<&'static str>,
}

impl Wire {
    fn new(stored: fn() -> Result<u64, TransportError>, stream: Option<&'static str>) -> Arc<Self> {
        Arc::new(Self {
            sent: Mutex::new(Vec::new()),
            stored,
            stream,
        })
    }

    fn sent(&self) -> Vec<String> {
        self.sent.lock().expect("not poisoned").clone()
    }

    fn record(&self, line: String) {
        self.sent.lock().expect("not poisoned").push(line);
    }
}

impl CorePubSub for Wire {
    fn publish(
        &self,
        subject: Arc<str>,
        _headers: Headers,
        payload: Bytes,
    ) -> BoxFuture<'_, Result<(), TransportError>> {
        self.record(format!(
            "pub {subject} {}",
            String::from_utf8_lossy(&payload)
        ));
        Box::pin(async { Ok(()) })
    }

    fn flush(&self) -> BoxFuture<'_, Result<(), TransportError>> {
        self.record("flush".to_owned());
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
        subject: Arc<str>,
        _headers: Headers,
        _payload: Bytes,
    ) -> BoxFuture<'_, Result<u64, TransportError>> {
        self.record(format!("stored {subject}"));
        let result = (self.stored)();
        Box::pin(async move { result })
    }
}

impl StreamAdmin for Wire {
    fn stream_exists(&self, _name: &str) -> BoxFuture<'_, Result<bool, TransportError>> {
        Box::pin(async { Ok(true) })
    }

    fn stream_by_subject(
        &self,
        _subject: &str,
    ) -> BoxFuture<'_, Result<Option<String>, TransportError>> {
        let stream = self.stream.map(str::to_owned);
        Box::pin(async move { Ok(stream) })
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

struct Noop;

impl ruststream::Handle<serde_json::Value> for Noop {
    async fn handle(
        &self,
        _input: &serde_json::Value,
        _outs: &(),
        _ctx: &mut ruststream::Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        Ok(())
    }
}

fn executor(wire: &Arc<Wire>, model: DeliveryModel, dead_letter: bool) -> Executor {
    let mut registration: Registration<()> = match model {
        DeliveryModel::JetStream => Registration::single::<_, _, serde_json::Value, ()>(
            "worker",
            crate::JetStreamSubject::new("orders.created", "S"),
            Noop,
        ),
        DeliveryModel::Core => Registration::single::<_, _, serde_json::Value, ()>(
            "worker",
            crate::CoreSubject::new("orders.created"),
            Noop,
        ),
    };
    registration.max_attempts(NonZeroU32::new(2).expect("two"));
    if dead_letter {
        registration.dead_letter("dead.orders");
    }
    let transport: Arc<dyn Transport> = Arc::clone(wire) as Arc<dyn Transport>;
    Executor::new(
        Arc::clone(&transport),
        Arc::new(Copies::new(transport)),
        &registration.info(),
    )
}

fn at_cap() -> Incoming {
    let delivery = Delivery::new("orders.created", Bytes::from_static(b"{}"))
        .with_attempt(NonZeroU32::new(2).expect("two"));
    Incoming {
        delivery,
        ack_subject: Some(ReplySubject::from("$JS.ACK.S.C.2.1.2.0.0")),
    }
}

/// Retries `incoming` at the cap: a dead letter. Returns what reached the server.
async fn run(executor: &Executor, incoming: &Incoming) -> Option<AckKind> {
    let facts = Facts::jetstream(incoming.delivery.attempt())
        .with_cap(NonZeroU32::new(2).expect("two"))
        .with_dead_letter();
    let handled = Handled::Outcome(HandlerOutcome::retry());
    let decision = decide(&HandlerOutcome::retry(), &facts);
    executor.execute(incoming, &handled, &decision).await
}

#[tokio::test]
async fn a_dead_letter_is_stored_before_the_original_is_terminated() {
    let wire = Wire::new(|| Ok(1), Some("DEAD"));
    let sent = run(&executor(&wire, DeliveryModel::JetStream, true), &at_cap()).await;
    assert_eq!(
        wire.sent(),
        ["stored dead.orders", "pub $JS.ACK.S.C.2.1.2.0.0 +TERM"]
    );
    assert_eq!(sent, Some(AckKind::Term), "settled for good");
}

#[tokio::test]
async fn a_failed_dead_letter_holds_the_original_back_and_never_terminates_it() {
    let wire = Wire::new(
        || {
            Err(TransportError::new(
                TransportErrorKind::Other,
                "maximum messages exceeded",
            ))
        },
        Some("DEAD"),
    );
    let sent = run(&executor(&wire, DeliveryModel::JetStream, true), &at_cap()).await;
    assert_eq!(
        wire.sent(),
        [
            "stored dead.orders",
            r#"pub $JS.ACK.S.C.2.1.2.0.0 -NAK {"delay": 1000000000}"#
        ]
    );
    assert_eq!(
        sent,
        Some(AckKind::NakAfter(std::time::Duration::from_secs(1))),
        "the hold is what reached the server: the message is still owed"
    );
}

#[tokio::test]
async fn a_dead_letter_no_stream_stores_is_a_confirmed_core_publish() {
    let wire = Wire::new(|| Ok(1), None);
    run(&executor(&wire, DeliveryModel::JetStream, true), &at_cap()).await;
    assert_eq!(
        wire.sent(),
        [
            "pub dead.orders {}",
            "flush",
            "pub $JS.ACK.S.C.2.1.2.0.0 +TERM"
        ]
    );
}

#[tokio::test]
async fn a_core_retry_below_the_cap_is_a_copy_with_its_count() {
    let wire = Wire::new(|| Ok(1), None);
    let executor = executor(&wire, DeliveryModel::Core, false);
    let incoming = Incoming {
        delivery: Delivery::new("orders.created", Bytes::from_static(b"{}")),
        ack_subject: None,
    };
    let facts = executor_facts(&incoming);
    let decision = decide(&HandlerOutcome::retry(), &facts);
    executor
        .execute(
            &incoming,
            &Handled::Outcome(HandlerOutcome::retry()),
            &decision,
        )
        .await;
    // The copy; the settlement is unsupported on Core and only logged.
    assert_eq!(wire.sent(), ["pub orders.created {}"]);
    assert!(executor.warned_unsupported.load(Ordering::Relaxed));
}

#[test]
fn only_a_decision_with_nothing_to_send_is_carried_out_at_once() {
    let wire = Wire::new(|| Ok(1), None);
    let core = executor(&wire, DeliveryModel::Core, true);
    let incoming = Incoming {
        delivery: Delivery::new("orders.created", Bytes::from_static(b"{}")),
        ack_subject: None,
    };
    let facts = executor_facts(&incoming).with_dead_letter();
    let at_once = |outcome: HandlerOutcome| {
        let decision = decide(&outcome, &facts);
        core.execute_at_once(&incoming, &Handled::Outcome(outcome), &decision)
    };
    // A Core ack and a Core drop: nothing goes out, and nothing is awaited.
    assert_eq!(at_once(HandlerOutcome::ack()), Some(None));
    assert_eq!(at_once(HandlerOutcome::drop()), Some(None));
    // A retry publishes its copy; a dead letter publishes too: both take the awaited path.
    assert_eq!(at_once(HandlerOutcome::retry()), None);
    assert_eq!(at_once(HandlerOutcome::dead_letter()), None);
    assert!(wire.sent().is_empty(), "nothing was sent at once");
    // A JetStream acknowledgement is sent: never at once.
    let jetstream = executor(&wire, DeliveryModel::JetStream, false);
    let decision = decide(&HandlerOutcome::ack(), &Facts::jetstream(NonZeroU32::MIN));
    let handled = Handled::Outcome(HandlerOutcome::ack());
    assert_eq!(
        jetstream.execute_at_once(&incoming, &handled, &decision),
        None
    );
}

#[test]
fn a_decode_error_keeps_its_kind_field_name_and_position_only() {
    let shape = |m: &str| decode_error_shape(m);
    assert_eq!(
        shape(
            "the payload does not decode as app::Payment: invalid type: string \"4111 1111 1111 1111\", expected u64 at line 1 column 24"
        ),
        "the payload does not decode as app::Payment: invalid type (at line 1 column 24)"
    );
    assert_eq!(
        shape(
            "the payload does not decode as app::Kind: unknown variant `secret-plan`, expected one of `a`, `b` at line 1 column 13"
        ),
        "the payload does not decode as app::Kind: unknown variant (at line 1 column 13)"
    );
    assert_eq!(
        shape(
            "the payload does not decode as alloc::vec::Vec<u8>: expected value at line 1 column 1"
        ),
        "the payload does not decode as alloc::vec::Vec<u8>: expected value (at line 1 column 1)"
    );
    assert_eq!(
        shape("the payload does not decode as T: missing field `id` at line 1 column 2"),
        "the payload does not decode as T: missing field `id` (at line 1 column 2)"
    );
    assert_eq!(
        shape("the payload does not decode as T: duplicate field `qty` at line 1 column 9"),
        "the payload does not decode as T: duplicate field `qty` (at line 1 column 9)"
    );
    // An unknown field's name comes from the payload, and a quoted name that is no plain
    // identifier is not kept.
    assert_eq!(
        shape(
            "the payload does not decode as T: unknown field `4111 1111`, expected `id` at line 1 column 9"
        ),
        "the payload does not decode as T: unknown field (at line 1 column 9)"
    );
    assert_eq!(
        shape("the payload does not decode as T: missing field `a b` at line 1 column 2"),
        "the payload does not decode as T: missing field (at line 1 column 2)"
    );
    assert_eq!(shape("\"secret\""), "malformed payload");
}

fn executor_facts(incoming: &Incoming) -> Facts {
    Facts::core(incoming.delivery.attempt())
        .with_cap(NonZeroU32::new(2).expect("two"))
        .with_copy_target()
}

/// An `Incoming` moves in registers (its delivery is boxed): it crosses the source's poll, the
/// handling and the settlement by value (`docs/benchmarks.md`, "Core subscribe").
#[test]
fn an_incoming_is_small() {
    let size = size_of::<super::Incoming>();
    assert!(size <= 64, "{size} bytes");
}
