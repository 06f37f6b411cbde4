//! The one per-delivery hook of operations: a span per delivery following OpenTelemetry's
//! messaging conventions, and the registration's metrics (`ruststream::telemetry`).
//!
//! The span (`ruststream.delivery`) has two audiences, and each gets what it reads without
//! paying for what the other reads:
//!
//! - **every subscriber** (log lines included) gets the fields that tell one delivery from
//!   another: `messaging.destination.name` (the subject), `messaging.message.id` (the
//!   `Nats-Msg-Id` header, when set), `messaging.nats.stream_sequence` and
//!   `messaging.nats.delivered` (JetStream), `ruststream.registration`, and once handled
//!   `ruststream.outcome` (what the handler said) and `ruststream.sent` (what went to the
//!   server: the acknowledgement, a dead letter, a retry copy);
//! - **the OpenTelemetry layer** (feature `opentelemetry`) also gets the span's name
//!   (`process <subject>`) and kind (consumer), and the attributes that are the same for every
//!   delivery of a registration: `messaging.system = "nats"`, `messaging.operation.type/name =
//!   "process"`, `messaging.consumer.group.name` (the durable consumer or queue group),
//!   `messaging.nats.stream`, and `messaging.message.body.size`. They go to the OpenTelemetry
//!   span directly, so a log formatter never formats them.
//!
//! When the installed log subscriber asks for it (the generated `main`'s, which leaves the span
//! out of its lines), the delivery's [`DeliveryLog`] is kept in the handler's task while it runs:
//! its lines name the delivery without the span being formatted.
//!
//! The handler's events, and the settlement's, happen inside it. The subject, the registration's
//! name, the outcome and what was sent are recorded as `Display` values: a log formatter writes
//! them as they are, where a `&str` is written with `Debug` (quoted, each character checked for
//! escaping: most of what a formatted span cost); a subject or a name that is not plain printable
//! ASCII is still quoted and escaped ([`Plain`]). The message id, which the publisher chooses, is
//! a `&str`.

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use ruststream::__private::panic_message;
use ruststream::registration::Handled;
use ruststream::settle::{Decision, Settle};
use ruststream::telemetry::{DeliveryLog, HandlerMetrics, Plain, outcome_label};
use ruststream::{Delivery, Endpoint};
use std::sync::OnceLock;
use tracing::Instrument;

use crate::jetstream_info::JetStreamInfo;

/// A delivery's span, and what the generated `main`'s log lines say about the delivery when
/// its subscriber asks for that instead of the span ([`DeliveryLog`]).
pub(crate) struct DeliverySpan {
    span: tracing::Span,
    /// Current while the handler runs ([`observed`]) and while its decision is carried out
    /// ([`DeliverySpan::around`]): cloned for each (two shared names, two integers).
    log: Option<DeliveryLog>,
}

impl DeliverySpan {
    /// No span and no log: for a delivery nothing can listen to, or whose span could not be
    /// made.
    fn none() -> Self {
        Self {
            span: tracing::Span::none(),
            log: None,
        }
    }

    /// Runs `future` (what follows the handler: the settlement, a wait before a retry, the
    /// idempotency record) inside the delivery's span and with its [`DeliveryLog`], so that a
    /// warning it writes names the delivery in the generated `main`'s lines as in any other
    /// subscriber's.
    pub(crate) async fn around<F: Future>(&self, future: F) -> F::Output {
        let future = future.instrument(self.span.clone());
        match &self.log {
            Some(log) => log.clone().scope(future).await,
            None => future.await,
        }
    }

    /// Whether nothing listens: no subscriber wants the span and no delivery log is written,
    /// so what runs inside it needs neither (and is not wrapped, or moved, for them).
    pub(crate) fn is_quiet(&self) -> bool {
        self.log.is_none() && self.span.is_disabled()
    }
}

impl std::ops::Deref for DeliverySpan {
    type Target = tracing::Span;

    fn deref(&self) -> &tracing::Span {
        &self.span
    }
}

/// The span of one delivery, with the fields known before the handler runs.
///
/// Making it runs the subscriber's layers (`on_new_span`: the user's code). A panic there is
/// caught and the delivery goes on without a span: it is already taken, and a panic out of here
/// would leave it unsettled (a Core message lost, a JetStream one waiting for `ack_wait`). The
/// guard costs nothing while nothing panics.
pub(crate) fn delivery_span(endpoint: &Endpoint, delivery: &Delivery) -> DeliverySpan {
    // Nothing can listen (no subscriber takes info-level spans, no delivery log is written):
    // the span would be disabled, so none is made. The span macro checks the same first.
    if !tracing::level_enabled!(tracing::Level::INFO) && !DeliveryLog::wanted() {
        return DeliverySpan::none();
    }
    std::panic::catch_unwind(AssertUnwindSafe(|| span_and_log(endpoint, delivery))).unwrap_or_else(
        |panic| {
            tracing::error!(
                registration = endpoint.name(),
                panic = panic_message(&*panic),
                "making the delivery's span panicked (in a tracing layer); the delivery is handled without it"
            );
            DeliverySpan::none()
        },
    )
}

fn span_and_log(endpoint: &Endpoint, delivery: &Delivery) -> DeliverySpan {
    let js = delivery.extension::<JetStreamInfo>();
    let log = DeliveryLog::wanted().then(|| DeliveryLog {
        subject: Arc::clone(delivery.subject_arc()),
        registration: Arc::clone(endpoint.name_arc()),
        stream_sequence: js.map(|js| js.stream_sequence),
        delivered: delivery.delivered(),
    });
    DeliverySpan {
        span: span_of(endpoint, delivery, js),
        log,
    }
}

fn span_of(endpoint: &Endpoint, delivery: &Delivery, js: Option<&JetStreamInfo>) -> tracing::Span {
    let span = tracing::info_span!(
        "ruststream.delivery",
        messaging.destination.name = %Plain(delivery.subject()),
        messaging.message.id = delivery.headers().get("Nats-Msg-Id"),
        messaging.nats.stream_sequence = js.map(|js| js.stream_sequence),
        messaging.nats.delivered = delivery.delivered(),
        ruststream.registration = %Plain(endpoint.name()),
        ruststream.outcome = tracing::field::Empty,
        ruststream.sent = tracing::field::Empty,
        otel.name = tracing::field::Empty,
        otel.kind = tracing::field::Empty,
    );
    #[cfg(feature = "opentelemetry")]
    if otel::exported(&span) {
        let info = endpoint.info();
        let group = js
            .map(|js| &*js.consumer)
            .or(info.descriptor.queue_group.as_deref());
        otel::describe(
            &span,
            delivery.subject(),
            group,
            js.map(|js| &*js.stream),
            Some(delivery.payload().len()),
        );
        otel::adopt_parent(&span, delivery);
    }
    span
}

/// What was sent to the server for a decision: `+ACK`, `-NAK`, `+TERM`, `nothing`, with
/// `dead letter` and `retry copy` added. Formatted only by a subscriber that prints it.
struct Sent<'a>(&'a Decision);

impl fmt::Display for Sent<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.settle {
            Settle::Send(kind) => write!(f, "{kind}")?,
            Settle::Unsupported(_) | Settle::Nothing => f.write_str("nothing")?,
        }
        if self.0.dead_letter {
            f.write_str(", dead letter")?;
        }
        if self.0.copy.is_some() {
            f.write_str(", retry copy")?;
        }
        Ok(())
    }
}

/// What a dispatch hands back: one delivery's handling and decision, or a batch's.
pub(crate) trait Decided {
    fn each(&self) -> &[(Handled, Decision)];
}

impl Decided for (Handled, Decision) {
    fn each(&self) -> &[(Handled, Decision)] {
        std::slice::from_ref(self)
    }
}

/// A dispatcher's: the delivery back with its handling and decision.
impl Decided for (ruststream::Delivery, (Handled, Decision)) {
    fn each(&self) -> &[(Handled, Decision)] {
        std::slice::from_ref(&self.1)
    }
}

/// A dispatcher's batch: the deliveries back with each one's handling and decision.
impl Decided for (Vec<ruststream::Delivery>, Vec<(Handled, Decision)>) {
    fn each(&self) -> &[(Handled, Decision)] {
        &self.1
    }
}

/// The clock the handler's duration is read from: the CPU's time-stamp counter, scaled to
/// nanoseconds, where it is invariant (`quanta`), the OS's monotonic clock otherwise: two reads
/// a delivery, cheaper than the OS clock's (`docs/benchmarks.md`). Made once, by
/// [`warm_clock`] when a registration starts: making it measures the counter's rate (about a
/// millisecond).
fn clock() -> &'static quanta::Clock {
    static CLOCK: OnceLock<quanta::Clock> = OnceLock::new();
    CLOCK.get_or_init(quanta::Clock::new)
}

/// Makes the handler-duration clock now, before a delivery waits on it.
pub(crate) fn warm_clock() {
    clock();
}

/// Runs `dispatch` (the handler and its decision) for `deliveries` inside `span`, counted in
/// the registration's metrics; records the outcomes on the span (only when a subscriber
/// listens to it: nothing is formatted otherwise).
pub(crate) async fn observed<T: Decided>(
    span: &DeliverySpan,
    metrics: &HandlerMetrics,
    deliveries: usize,
    dispatch: impl Future<Output = T>,
) -> T {
    for _ in 0..deliveries {
        metrics.started();
    }
    // Not tokio's clock: the handler's real duration, and cheaper where tokio's clock can be
    // paused (its `test-util`), which looks the runtime's clock up on every read.
    let clock = clock();
    let began = clock.raw();
    let decided = if span.is_quiet() {
        dispatch.await
    } else {
        let dispatch = dispatch.instrument(span.span.clone());
        match &span.log {
            Some(log) => log.clone().scope(dispatch).await,
            None => dispatch.await,
        }
    };
    let took = clock.delta(began, clock.raw());
    let each = decided.each();
    for (handled, _) in each {
        metrics.finished(handled, took);
    }
    // A unit handed no decision back still leaves the in-flight gauge.
    for _ in each.len()..deliveries {
        metrics.finished(&Handled::NoOutcome(String::new()), took);
    }
    if let [(handled, decision)] = each
        && !span.is_disabled()
    {
        span.record(
            "ruststream.outcome",
            tracing::field::display(outcome_label(handled)),
        );
        span.record("ruststream.sent", tracing::field::display(Sent(decision)));
    }
    decided
}

/// The span of one batch handler call (`messaging.batch.message_count`, and for the
/// OpenTelemetry layer `process <subject>` and the constant attributes); its deliveries'
/// settlements happen inside it.
pub(crate) fn batch_span(endpoint: &Endpoint, deliveries: &[&Delivery]) -> DeliverySpan {
    let subject = &endpoint.info().descriptor.subject;
    let span = tracing::info_span!(
        "ruststream.batch",
        messaging.destination.name = %Plain(subject),
        messaging.batch.message_count = deliveries.len(),
        ruststream.registration = %Plain(endpoint.name()),
        otel.name = tracing::field::Empty,
        otel.kind = tracing::field::Empty,
    );
    #[cfg(feature = "opentelemetry")]
    if otel::exported(&span) {
        otel::describe(&span, subject, None, None, None);
    }
    DeliverySpan { span, log: None }
}

/// The W3C trace context header.
#[cfg(feature = "opentelemetry")]
const TRACEPARENT: &str = "traceparent";

/// `headers` with the current span's W3C `traceparent` (feature `opentelemetry`): what every
/// message the runtime sends goes through (replies, publishes, requests, dead letters, retry
/// copies). Unchanged when no OpenTelemetry span is current, or without the feature.
pub(crate) fn with_context(headers: ruststream::Headers) -> ruststream::Headers {
    #[cfg(feature = "opentelemetry")]
    {
        otel::inject(headers)
    }
    #[cfg(not(feature = "opentelemetry"))]
    {
        headers
    }
}

#[cfg(feature = "opentelemetry")]
mod otel;

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::Mutex;

    use ruststream::app::cli::{LogFormat, log_subscriber};

    use super::*;

    /// The lines a subscriber wrote.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("not poisoned").extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'w> tracing_subscriber::fmt::MakeWriter<'w> for Lines {
        type Writer = Self;

        fn make_writer(&'w self) -> Self {
            self.clone()
        }
    }

    /// A warning written while a delivery is settled (an `+ACK` that could not be sent, a dead
    /// letter refused) names the delivery in the generated `main`'s lines, which have no
    /// delivery span: the settlement runs with the delivery's log, as the handler does.
    #[tokio::test]
    async fn a_warning_written_while_settling_names_the_delivery() {
        let lines = Lines::default();
        let subscriber = log_subscriber(LogFormat::Human, lines.clone(), false);
        let _guard = tracing::dispatcher::set_default(&subscriber);
        let span = DeliverySpan {
            span: tracing::Span::none(),
            log: Some(DeliveryLog {
                subject: "orders.created".into(),
                registration: "orders".into(),
                stream_sequence: Some(7),
                delivered: Some(2),
            }),
        };
        span.around(async { tracing::warn!("the +ACK could not be sent") })
            .await;
        tracing::warn!("outside");
        let text =
            String::from_utf8(lines.0.lock().expect("not poisoned").clone()).expect("UTF-8 lines");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[0].contains(
                "ruststream.delivery{messaging.destination.name=orders.created messaging.nats.stream_sequence=7 messaging.nats.delivered=2 ruststream.registration=orders}"
            ) && lines[0].ends_with("the +ACK could not be sent"),
            "{lines:?}"
        );
        assert!(!lines[1].contains("ruststream.delivery"), "{lines:?}");
    }

    /// The handler's duration comes from [`clock`] (the time-stamp counter): a handling that
    /// takes 40 ms of real time is recorded as that, and at most what the test saw. The two
    /// are different clocks (the counter is calibrated against the OS clock once), so each
    /// bound allows 1 % for the calibration.
    #[tokio::test]
    async fn the_handler_duration_is_the_time_the_handling_took() {
        let durations =
            crate::test_metrics::Capture::histogram(ruststream::telemetry::names::HANDLER_DURATION);
        let metrics = metrics::with_local_recorder(&durations, || HandlerMetrics::new("timed"));
        let span = DeliverySpan::none();
        warm_clock();
        let started = std::time::Instant::now();
        let decision = Decision {
            dead_letter: false,
            copy: None,
            settle: Settle::Nothing,
        };
        observed(&span, &metrics, 1, async {
            tokio::time::sleep(std::time::Duration::from_millis(40)).await;
            (
                Handled::Outcome(ruststream::HandlerOutcome::ack()),
                decision,
            )
        })
        .await;
        let seen = started.elapsed().as_secs_f64();
        let recorded = durations.recorded();
        assert_eq!(recorded.len(), 1, "one duration for one delivery");
        // What the calibration may be off by, either way.
        const CALIBRATION: f64 = 0.01;
        assert!(
            (0.040 * (1.0 - CALIBRATION)..=seen * (1.0 + CALIBRATION)).contains(&recorded[0]),
            "recorded {} s for a 40 ms handling the test saw take {seen} s",
            recorded[0]
        );
    }
}
