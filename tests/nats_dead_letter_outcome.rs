//! `HandlerOutcome::dead_letter()`, the handler's choice on any attempt: the delivery goes to the
//! registration's dead-letter subject as it arrived (payload and headers) and ends, JetStream's
//! `+TERM` sent once the dead letter is stored, counted in `ruststream_dead_letters_total`;
//! without a dead-letter subject the message is dropped and an error names the registration.
//! `Ctx<LastAttempt>` tells a handler that the cap allows no further attempt.
//!
//! Each body runs on `TestApp` (NATS in process, paused clock) and on a real nats-server, and
//! asks the server what it saw: the acknowledgements, the consumer's counters, the stored
//! dead letter.

mod support;

use std::time::Duration;

use ruststream::{App, Headers};
use ruststream_nats::prelude::*;
use ruststream_nats::testing::{ConsumerFacts, StreamLimits, TestApp};
use serde::{Deserialize, Serialize};
use support::fidelity::ACK_WAIT;
use support::fidelity::app::AppWire;
use support::logs::Logs;
use support::ops::LocalMetrics;

/// The stream the JetStream registrations read.
const STREAM: &str = "PARCELS";
/// The stream the app declares for its JetStream dead letters.
const DEAD_STREAM: &str = "DEAD";
/// The JetStream registrations' dead-letter subject, stored by [`DEAD_STREAM`].
const DEAD: &str = "dead.parcels";
/// The Core registrations' dead-letter subject, which no stream stores.
const CORE_DEAD: &str = "dead.notices";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Parcel {
    id: u64,
}

fn ack_wait() -> NonZeroDuration {
    NonZeroDuration::new(ACK_WAIT).unwrap_or_else(|| unreachable!("ACK_WAIT is not zero"))
}

/// Damaged beyond repair: no attempt can succeed, so the first one keeps it for a person.
#[derive(Clone, Copy)]
struct Damaged;

impl Handle<Parcel> for Damaged {
    async fn handle(
        &self,
        _parcel: &Parcel,
        _outs: &(),
        _ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        Err(HandlerOutcome::dead_letter())
    }
}

/// Retries while the cap allows another attempt; on the last one, keeps the parcel for a person.
#[subscriber(JetStreamSubject::new("parcels.late", STREAM).durable("late").ack_wait(ack_wait()))]
async fn late(_parcel: &Parcel, Ctx(last): Ctx<LastAttempt>) -> HandlerOutcome {
    if last {
        HandlerOutcome::dead_letter()
    } else {
        HandlerOutcome::retry()
    }
}

/// The same on Core, where the cap counts the runtime's copies.
#[subscriber("parcels.core_late")]
async fn core_late(_parcel: &Parcel, Ctx(last): Ctx<LastAttempt>) -> HandlerOutcome {
    if last {
        HandlerOutcome::dead_letter()
    } else {
        HandlerOutcome::retry()
    }
}

/// A batch handler: one outcome per parcel, odd ids kept for a person.
#[subscriber(
    JetStreamSubject::new("parcels.sorted", STREAM)
        .durable("sorted")
        .ack_wait(ack_wait())
        .batch(nonzero!(10))
)]
async fn sorted(parcels: &[Parcel]) -> Vec<HandlerOutcome> {
    parcels
        .iter()
        .map(|p| {
            if p.id % 2 == 1 {
                HandlerOutcome::dead_letter()
            } else {
                HandlerOutcome::ack()
            }
        })
        .collect()
}

/// | registration | reads | policy |
/// | --- | --- | --- |
/// | `damaged` | `parcels.damaged` from `PARCELS` | 3 attempts, dead letter `dead.parcels` (stored) |
/// | `lost` | `parcels.lost` from `PARCELS` | 3 attempts, no dead letter |
/// | `late` | `parcels.late` from `PARCELS` | 3 attempts, dead letter `dead.parcels` |
/// | `core_damaged` | Core `parcels.core` | 3 attempts, dead letter `dead.notices` (Core) |
/// | `core_lost` | Core `parcels.core_lost` | no cap, no dead letter |
/// | `core_late` | Core `parcels.core_late` | 2 attempts, dead letter `dead.notices` |
/// | `sorted` | `parcels.sorted` from `PARCELS`, batches of up to 10 | dead letter `dead.parcels` |
fn parcels_app(url: &str) -> impl App + use<> {
    let broker = NatsBroker::new(url).declare_stream(DEAD_STREAM, [DEAD]);
    let three = nonzero!(3);
    RustStream::new(AppInfo::new("parcels", "0.1.0")).with_broker(broker, |b| {
        let reads = |subject: &str, durable: &str| {
            JetStreamSubject::new(subject, STREAM)
                .durable(durable)
                .ack_wait(ack_wait())
                .handler(Damaged)
        };
        b.include(reads("parcels.damaged", "damaged"))
            .name("damaged")
            .max_attempts(three)
            .dead_letter(DEAD);
        b.include(reads("parcels.lost", "lost"))
            .name("lost")
            .max_attempts(three);
        b.include(late).max_attempts(three).dead_letter(DEAD);
        b.include(CoreSubject::new("parcels.core").handler(Damaged))
            .name("core_damaged")
            .max_attempts(three)
            .dead_letter(CORE_DEAD);
        b.include(CoreSubject::new("parcels.core_lost").handler(Damaged))
            .name("core_lost");
        b.include(core_late)
            .max_attempts(nonzero!(2))
            .dead_letter(CORE_DEAD);
        b.include(sorted).dead_letter(DEAD);
    })
}

/// What a scenario reads besides the server: the app's metrics and log lines.
struct Seen {
    metrics: LocalMetrics,
    logs: Logs,
}

impl Seen {
    fn dead_letters(&self, registration: &str) -> f64 {
        self.metrics.value(&format!(
            r#"ruststream_dead_letters_total{{handler="{registration}"}}"#
        ))
    }

    fn deliveries(&self, registration: &str, outcome: &str) -> f64 {
        self.metrics.value(&format!(
            r#"ruststream_deliveries_total{{handler="{registration}",outcome="{outcome}"}}"#
        ))
    }

    /// The error lines that name `registration`.
    fn errors_naming(&self, registration: &str) -> Vec<String> {
        self.logs
            .lines_with(&["ERROR", &format!("registration={registration}")])
    }
}

/// Runs each scenario on the app in process (paused clock) and live (real server and clock),
/// with the app's metrics and logs recorded on the test's thread from before it starts.
macro_rules! both {
    ($($name:ident),* $(,)?) => {
        mod in_process {
            $(
                #[tokio::test(start_paused = true)]
                async fn $name() {
                    let seen = super::Seen { metrics: super::LocalMetrics::new(), logs: super::Logs::default() };
                    let _metrics = seen.metrics.install();
                    let _logs = seen.logs.install();
                    let wire = super::AppWire::in_process(super::parcels_app).await;
                    super::$name(&wire, &seen).await;
                    wire.shutdown().await;
                }
            )*
        }
        mod live {
            $(
                #[tokio::test]
                async fn $name() {
                    let seen = super::Seen { metrics: super::LocalMetrics::new(), logs: super::Logs::default() };
                    let _metrics = seen.metrics.install();
                    let _logs = seen.logs.install();
                    let wire = super::AppWire::live(super::parcels_app).await;
                    super::$name(&wire, &seen).await;
                    wire.shutdown().await;
                }
            )*
        }
    };
}

both!(
    jetstream_dead_letter_on_the_first_attempt_is_stored_then_terminated,
    jetstream_dead_letter_without_a_subject_is_terminated_and_logged,
    jetstream_the_last_attempt_is_known_to_the_handler,
    core_dead_letter_goes_to_the_dead_letter_subject,
    core_dead_letter_without_a_subject_is_let_go_and_logged,
    core_the_last_attempt_is_known_to_the_handler,
    a_batch_dead_letters_the_messages_it_says,
);

fn parcel(id: u64) -> Vec<u8> {
    serde_json::to_vec(&Parcel { id }).expect("a parcel encodes")
}

fn tagged(id: &str) -> Headers {
    [("x-parcel", id)].into_iter().collect()
}

async fn jetstream_dead_letter_on_the_first_attempt_is_stored_then_terminated(
    wire: &AppWire,
    seen: &Seen,
) {
    wire.publish_raw("parcels.damaged", tagged("p-1"), parcel(1))
        .await;
    wire.wait_until(|w| w.acks(STREAM, "damaged").len() == 1)
        .await;
    // Past ack_wait: a message that was not settled would come back.
    wire.pass(ACK_WAIT + Duration::from_millis(300)).await;

    assert_eq!(wire.outcomes("damaged"), [HandlerOutcome::dead_letter()]);
    assert_eq!(
        wire.delivered("damaged"),
        [Some(1)],
        "never delivered again"
    );
    assert_eq!(wire.acks(STREAM, "damaged"), ["+TERM"]);
    // Delivered once, the ack floor past it: nothing pending, nothing waiting.
    assert_eq!(
        wire.consumer_info(STREAM, "damaged").await,
        ConsumerFacts::new(1, 1, 0, 0, 0)
    );
    let stored = wire.stream_messages(DEAD_STREAM).await;
    assert_eq!(stored.len(), 1, "the dead letter is stored: {stored:?}");
    assert_eq!(&*stored[0].subject, DEAD);
    assert_eq!(stored[0].payload, parcel(1), "the payload as it arrived");
    assert_eq!(
        stored[0].headers.get("x-parcel"),
        Some("p-1"),
        "the headers as they arrived"
    );
    assert_eq!(seen.dead_letters("damaged"), 1.0);
    assert_eq!(seen.deliveries("damaged", "dead_letter"), 1.0);
    assert!(seen.errors_naming("damaged").is_empty());
}

async fn jetstream_dead_letter_without_a_subject_is_terminated_and_logged(
    wire: &AppWire,
    seen: &Seen,
) {
    wire.publish_raw("parcels.lost", tagged("p-2"), parcel(2))
        .await;
    wire.wait_until(|w| w.acks(STREAM, "lost").len() == 1).await;
    wire.pass(ACK_WAIT + Duration::from_millis(300)).await;

    assert_eq!(wire.outcomes("lost"), [HandlerOutcome::dead_letter()]);
    assert_eq!(wire.delivered("lost"), [Some(1)]);
    assert_eq!(wire.acks(STREAM, "lost"), ["+TERM"]);
    assert_eq!(
        wire.consumer_info(STREAM, "lost").await,
        ConsumerFacts::new(1, 1, 0, 0, 0)
    );
    assert!(wire.stream_messages(DEAD_STREAM).await.is_empty());
    assert_eq!(seen.dead_letters("lost"), 0.0);
    let errors = seen.errors_naming("lost");
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(
        errors[0].contains("no dead-letter subject") && errors[0].contains(".dead_letter("),
        "says why and the fix: {}",
        errors[0]
    );
}

async fn jetstream_the_last_attempt_is_known_to_the_handler(wire: &AppWire, seen: &Seen) {
    wire.publish_raw("parcels.late", tagged("p-3"), parcel(3))
        .await;
    wire.wait_until(|w| w.acks(STREAM, "late").len() == 3).await;
    wire.pass(ACK_WAIT + Duration::from_millis(300)).await;

    // Not the last attempt twice, then the last one of three: the handler's own dead letter.
    assert_eq!(
        wire.outcomes("late"),
        [
            HandlerOutcome::retry(),
            HandlerOutcome::retry(),
            HandlerOutcome::dead_letter()
        ]
    );
    assert_eq!(wire.delivered("late"), [Some(1), Some(2), Some(3)]);
    assert_eq!(wire.acks(STREAM, "late"), ["-NAK", "-NAK", "+TERM"]);
    assert_eq!(
        wire.consumer_info(STREAM, "late").await,
        ConsumerFacts::new(3, 1, 0, 0, 0)
    );
    let stored = wire.stream_messages(DEAD_STREAM).await;
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!(stored[0].payload, parcel(3));
    assert_eq!(seen.dead_letters("late"), 1.0);
}

async fn core_dead_letter_goes_to_the_dead_letter_subject(wire: &AppWire, seen: &Seen) {
    wire.publish_raw("parcels.core", tagged("c-1"), parcel(4))
        .await;
    wire.wait_until(|w| !w.messages(CORE_DEAD).is_empty()).await;
    wire.quiet().await;

    assert_eq!(
        wire.outcomes("core_damaged"),
        [HandlerOutcome::dead_letter()]
    );
    assert_eq!(wire.attempts("core_damaged"), [1]);
    assert_eq!(
        wire.messages("parcels.core").len(),
        1,
        "the original, no copy"
    );
    let dead = wire.messages(CORE_DEAD);
    assert_eq!(dead.len(), 1);
    assert_eq!(&dead[0].payload[..], parcel(4), "the payload as it arrived");
    assert_eq!(dead[0].headers.get("x-parcel"), Some("c-1"));
    assert_eq!(seen.dead_letters("core_damaged"), 1.0);
    assert_eq!(seen.deliveries("core_damaged", "dead_letter"), 1.0);
}

async fn core_dead_letter_without_a_subject_is_let_go_and_logged(wire: &AppWire, seen: &Seen) {
    wire.publish_raw("parcels.core_lost", tagged("c-2"), parcel(5))
        .await;
    wire.wait_until(|w| !w.outcomes("core_lost").is_empty())
        .await;
    wire.quiet().await;

    assert_eq!(wire.outcomes("core_lost"), [HandlerOutcome::dead_letter()]);
    assert_eq!(wire.messages("parcels.core_lost").len(), 1, "no copy");
    assert!(wire.messages("dead.>").is_empty());
    assert_eq!(seen.dead_letters("core_lost"), 0.0);
    assert_eq!(seen.errors_naming("core_lost").len(), 1);
}

async fn core_the_last_attempt_is_known_to_the_handler(wire: &AppWire, seen: &Seen) {
    wire.publish_raw("parcels.core_late", tagged("c-3"), parcel(6))
        .await;
    wire.wait_until(|w| !w.messages(CORE_DEAD).is_empty()).await;
    wire.quiet().await;

    assert_eq!(
        wire.outcomes("core_late"),
        [HandlerOutcome::retry(), HandlerOutcome::dead_letter()]
    );
    assert_eq!(wire.attempts("core_late"), [1, 2]);
    let dead = wire.messages(CORE_DEAD);
    assert_eq!(dead.len(), 1);
    // As the last attempt arrived: the runtime's first copy.
    assert_eq!(
        dead[0].headers.get(ruststream_nats::RETRY_COUNT_HEADER),
        Some("1")
    );
    assert_eq!(seen.dead_letters("core_late"), 1.0);
}

async fn a_batch_dead_letters_the_messages_it_says(wire: &AppWire, seen: &Seen) {
    for id in 10..=13 {
        wire.publish_raw("parcels.sorted", tagged(&format!("b-{id}")), parcel(id))
            .await;
    }
    wire.wait_until(|w| w.acks(STREAM, "sorted").len() == 4)
        .await;
    wire.pass(ACK_WAIT + Duration::from_millis(300)).await;

    let mut acks = wire.acks(STREAM, "sorted");
    acks.sort();
    assert_eq!(acks, ["+ACK", "+ACK", "+TERM", "+TERM"]);
    assert_eq!(
        wire.consumer_info(STREAM, "sorted").await,
        ConsumerFacts::new(4, 4, 0, 0, 0)
    );
    let mut dead: Vec<(Vec<u8>, Option<String>)> = wire
        .stream_messages(DEAD_STREAM)
        .await
        .into_iter()
        .map(|m| {
            let tag = m.headers.get("x-parcel").map(str::to_owned);
            (m.payload.to_vec(), tag)
        })
        .collect();
    dead.sort();
    assert_eq!(
        dead,
        [
            (parcel(11), Some("b-11".to_owned())),
            (parcel(13), Some("b-13".to_owned()))
        ]
    );
    assert_eq!(seen.dead_letters("sorted"), 2.0);
    assert_eq!(seen.deliveries("sorted", "dead_letter"), 2.0);
    assert_eq!(seen.deliveries("sorted", "ack"), 2.0);
}

/// A dead letter the stream refuses: the original is held back, not terminated, and comes back
/// to the handler; once the stream takes messages again the dead letter is stored and the
/// original terminated. Nothing is lost.
#[tokio::test(start_paused = true)]
async fn a_refused_dead_letter_holds_the_original_back_until_it_is_stored() {
    let metrics = LocalMetrics::new();
    let _metrics = metrics.install();
    let t = TestApp::start(parcels_app("nats://unused:4222"))
        .await
        .expect("the app starts");
    t.nats()
        .set_stream_limits(DEAD_STREAM, StreamLimits::refuse_past(0));
    t.publish_raw("parcels.damaged", tagged("p-9"), parcel(9))
        .await
        .expect("published");
    t.settle().await;
    assert_eq!(
        t.nats().acknowledgements(STREAM, "damaged"),
        [ruststream_test_server::client::nak_with(
            ruststream::settle::DEAD_LETTER_HOLD_FIRST
        )],
        "held back, not terminated"
    );
    assert!(t.nats().stream_messages(DEAD_STREAM).is_empty());

    t.nats()
        .set_stream_limits(DEAD_STREAM, StreamLimits::default());
    t.advance(Duration::from_secs(2)).await;
    assert_eq!(t.delivered("damaged"), [Some(1), Some(2)]);
    let acks = t.nats().acknowledgements(STREAM, "damaged");
    assert_eq!(acks.last().map(String::as_str), Some("+TERM"), "{acks:?}");
    let stored = t.nats().stream_messages(DEAD_STREAM);
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].payload, parcel(9));
    assert_eq!(
        t.nats().consumer_info(STREAM, "damaged"),
        Some(ConsumerFacts::new(2, 1, 0, 0, 0))
    );
    assert_eq!(
        metrics.value(r#"ruststream_dead_letters_total{handler="damaged"}"#),
        1.0
    );
    t.shutdown().await.expect("a clean shutdown");
}
