//! Operations: the metrics every delivery feeds (through the [`metrics`] facade), the health
//! the brokers report, and the small HTTP server that serves both (`run --metrics-addr`):
//! Prometheus text at `/metrics`, liveness at `/healthz`, readiness at `/readyz`. The same
//! endpoints mount in a service's own axum server through [`router`] (feature `axum`).
//!
//! The metrics are recorded whether or not a recorder is installed (without one they cost a
//! no-op call). The generated `main` installs the Prometheus recorder when `--metrics-addr` is
//! given ([`install_prometheus`], feature `prometheus`, on by default); an app that installs
//! its own recorder (OpenTelemetry, StatsD) gets the same names.
//!
//! Recorders are read when a registration starts: install one before `App::start`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram};

mod endpoints;
mod http;
#[cfg(feature = "axum")]
mod router;

pub use self::http::{Server, ServerLimits, serve, serve_with};
#[cfg(feature = "axum")]
pub use self::router::router;
pub use crate::delivery_log::{DeliveryLog, Plain};
use crate::handled::Handled;
use crate::outcome::HandlerOutcome;

/// The metric names (pinned in the API).
pub mod names {
    /// Counter `{handler, outcome}`: deliveries handled, by what the handler said (`ack`,
    /// `retry`, `retry_after`, `drop`) or what happened instead (`undecodable`, `panicked`,
    /// `timed_out`, `no_outcome`, `past_cap`).
    pub const DELIVERIES: &str = "ruststream_deliveries_total";
    /// Histogram `{handler}`: how long the handler ran, in seconds.
    pub const HANDLER_DURATION: &str = "ruststream_handler_duration_seconds";
    /// Gauge `{handler}`: deliveries being handled now.
    pub const IN_FLIGHT: &str = "ruststream_in_flight";
    /// Counter `{handler}`: deliveries published to the dead-letter subject.
    pub const DEAD_LETTERS: &str = "ruststream_dead_letters_total";
    /// Counter `{handler}`: Core retry copies sent (or scheduled) to the retry subject.
    pub const RETRY_COPIES: &str = "ruststream_retry_copies_total";
    /// Counter `{subject_kind}`: messages the app published (replies, outputs, `publish_to`,
    /// publishes from outside a handler): `stored` (a JetStream publish its stream confirmed)
    /// or `core`. Dead letters and retry copies have counters of their own.
    pub const PUBLISHED: &str = "ruststream_published_total";
    /// Counter `{handler}`: Core messages the client dropped because the handlers did not keep
    /// up (slow consumer).
    pub const SLOW_CONSUMER_DROPPED: &str = "ruststream_slow_consumer_dropped_total";
    /// Gauge `{broker}`: 1 while connected to the broker, 0 while disconnected.
    pub const CONNECTED: &str = "ruststream_connected";
    /// Gauge: 1 while `/readyz` answers 200 (connected, every registration consuming, not
    /// draining), 0 otherwise.
    pub const READY: &str = "ruststream_ready";
}

/// The histogram buckets of [`names::HANDLER_DURATION`], in seconds.
pub const DURATION_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// The label value of what a handler said about a delivery.
pub fn outcome_label(handled: &Handled) -> &'static str {
    match handled {
        Handled::Outcome(HandlerOutcome::Ack) => "ack",
        Handled::Outcome(HandlerOutcome::Retry) => "retry",
        Handled::Outcome(HandlerOutcome::RetryAfter(_)) => "retry_after",
        Handled::Outcome(HandlerOutcome::Drop) => "drop",
        Handled::Outcome(HandlerOutcome::DeadLetter) => "dead_letter",
        Handled::Undecodable(_) => "undecodable",
        Handled::Panicked(_) => "panicked",
        Handled::TimedOut(_) => "timed_out",
        Handled::NoOutcome(_) => "no_outcome",
        Handled::PastCap => "past_cap",
        Handled::Failed(_) => "error",
        Handled::Unpublishable(_) => "unpublishable",
    }
}

const OUTCOMES: [&str; 12] = [
    "ack",
    "retry",
    "retry_after",
    "drop",
    "dead_letter",
    "undecodable",
    "panicked",
    "timed_out",
    "no_outcome",
    "past_cap",
    "error",
    "unpublishable",
];

/// The metric handles of one registration, made once when it starts.
#[derive(Clone)]
pub struct HandlerMetrics {
    deliveries: Arc<[Counter; OUTCOMES.len()]>,
    duration: Histogram,
    in_flight: Gauge,
    dead_letters: Counter,
    retry_copies: Counter,
    /// What the handler did, readable (the `metrics` facade's handles are write-only): kept
    /// for a registration whose broker reports it (the NATS micro service's stats).
    totals: Option<Arc<HandlerTotals>>,
}

impl std::fmt::Debug for HandlerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandlerMetrics").finish_non_exhaustive()
    }
}

impl HandlerMetrics {
    /// The handles of registration `handler` in the recorder installed now.
    pub fn new(handler: &str) -> Self {
        let label = || handler.to_owned();
        Self {
            deliveries: Arc::new(OUTCOMES.map(|outcome| {
                metrics::counter!(names::DELIVERIES, "handler" => label(), "outcome" => outcome)
            })),
            duration: metrics::histogram!(names::HANDLER_DURATION, "handler" => label()),
            in_flight: metrics::gauge!(names::IN_FLIGHT, "handler" => label()),
            dead_letters: metrics::counter!(names::DEAD_LETTERS, "handler" => label()),
            retry_copies: metrics::counter!(names::RETRY_COPIES, "handler" => label()),
            totals: None,
        }
    }

    /// Also adds every delivery [`finished`](Self::finished) to `totals`.
    pub fn with_totals(mut self, totals: Arc<HandlerTotals>) -> Self {
        self.totals = Some(totals);
        self
    }

    /// A delivery reached the handler.
    #[inline]
    pub fn started(&self) {
        self.in_flight.increment(1.0);
    }

    /// The handler is done with a delivery after `took`.
    #[inline]
    pub fn finished(&self, handled: &Handled, took: Duration) {
        self.in_flight.decrement(1.0);
        self.duration.record(took.as_secs_f64());
        let label = outcome_label(handled);
        if let Some(i) = OUTCOMES.iter().position(|o| *o == label) {
            self.deliveries[i].increment(1);
        }
        if let Some(totals) = &self.totals {
            totals.add(handled, took);
        }
    }

    /// A delivery went to the dead-letter subject.
    pub fn dead_lettered(&self) {
        self.dead_letters.increment(1);
    }

    /// A Core retry copy was sent or scheduled.
    pub fn retry_copied(&self) {
        self.retry_copies.increment(1);
    }
}

/// What a registration's handler did since it started, as [`HandlerMetrics::finished`] saw
/// it: deliveries, those that failed (anything but an `ack`) with the last one, and the time
/// the handler took in total.
#[derive(Debug, Default)]
pub struct HandlerTotals {
    handled: AtomicU64,
    failed: AtomicU64,
    nanos: AtomicU64,
    last_failure: std::sync::Mutex<Option<Handled>>,
}

/// A reading of [`HandlerTotals`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Totals {
    /// Deliveries handled.
    pub handled: u64,
    /// Deliveries whose handling was not an `ack`.
    pub failed: u64,
    /// The time the handler took, in total.
    pub took: Duration,
    /// The last handling that was not an `ack`.
    pub last_failure: Option<Handled>,
}

impl HandlerTotals {
    /// Adds one delivery, handled as `handled` in `took`.
    pub fn add(&self, handled: &Handled, took: Duration) {
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_add(nanos, Ordering::Relaxed);
        if !matches!(handled, Handled::Outcome(HandlerOutcome::Ack)) {
            *self
                .last_failure
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(handled.clone());
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
        // Counted last: a reading that counts the delivery sees its failure and time too.
        self.handled.fetch_add(1, Ordering::Release);
    }

    /// The totals now.
    pub fn read(&self) -> Totals {
        let handled = self.handled.load(Ordering::Acquire);
        Totals {
            handled,
            failed: self.failed.load(Ordering::Relaxed),
            took: Duration::from_nanos(self.nanos.load(Ordering::Relaxed)),
            last_failure: self
                .last_failure
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone(),
        }
    }
}

/// The literal name `published` counts under is [`names::PUBLISHED`]: a compile-time check.
const _: () = {
    let (listed, written) = (
        names::PUBLISHED.as_bytes(),
        "ruststream_published_total".as_bytes(),
    );
    assert!(listed.len() == written.len());
    let mut i = 0;
    while i < listed.len() {
        assert!(listed[i] == written[i]);
        i += 1;
    }
};

/// A message was published; `subject_kind` as [`names::PUBLISHED`] lists.
pub fn published(subject_kind: &'static str) {
    // The name and the label values written out as literals make the key a `static`, hashed
    // at compile time: a label taken from a variable would build the key (a `Vec` of labels)
    // on every publish, and a name from a constant would hash the key on every publish.
    // The literal is checked against the list at compile time, below.
    let counter = match subject_kind {
        "stored" => metrics::counter!("ruststream_published_total", "subject_kind" => "stored"),
        "core" => metrics::counter!("ruststream_published_total", "subject_kind" => "core"),
        other => metrics::counter!(names::PUBLISHED, "subject_kind" => other),
    };
    counter.increment(1);
}

/// The client dropped `count` Core messages of `handler` (slow consumer).
pub fn slow_consumer_dropped(handler: &str, count: u64) {
    metrics::counter!(names::SLOW_CONSUMER_DROPPED, "handler" => handler.to_owned())
        .increment(count);
}

/// What `/readyz` answers: shared by the brokers (connection), the app (started, draining)
/// and the server. Put one into the [`Env`](crate::Env) the app starts in
/// (`Env::new().with(health.clone())`); the generated `main` does with `--metrics-addr`.
#[derive(Clone, Debug, Default)]
pub struct Health {
    inner: Arc<HealthInner>,
}

#[derive(Debug, Default)]
struct HealthInner {
    started: AtomicBool,
    draining: AtomicBool,
    /// Brokers disconnected now.
    disconnected: AtomicUsize,
    /// The parts not working now (a registration not consuming, a broker's background task
    /// that ended), with why.
    down: std::sync::Mutex<std::collections::BTreeMap<String, &'static str>>,
}

impl Health {
    /// Not ready: nothing started yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every registration of every broker consumes.
    pub fn set_started(&self) {
        self.inner.started.store(true, Ordering::SeqCst);
        self.publish();
    }

    /// The app drains: no new messages.
    pub fn set_draining(&self) {
        self.inner.draining.store(true, Ordering::SeqCst);
        self.publish();
    }

    /// `broker` lost its connection (`connected == false`) or made it again.
    pub fn set_connected(&self, broker: &str, connected: bool) {
        if connected {
            let _ = self
                .inner
                .disconnected
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        } else {
            self.inner.disconnected.fetch_add(1, Ordering::SeqCst);
        }
        metrics::gauge!(names::CONNECTED, "broker" => broker.to_owned()).set(if connected {
            1.0
        } else {
            0.0
        });
        self.publish();
    }

    /// `part` (a registration, a broker's background task) stopped working, for `why`:
    /// `/readyz` answers 503 with `why` until [`set_up`](Self::set_up) for the same part.
    pub fn set_down(&self, part: &str, why: &'static str) {
        self.down().insert(part.to_owned(), why);
        self.publish();
    }

    /// `part` works again (a registration consumes again).
    pub fn set_up(&self, part: &str) {
        if self.down().remove(part).is_some() {
            self.publish();
        }
    }

    fn down(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<String, &'static str>> {
        self.inner
            .down
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `Ok(())` when ready; otherwise why not.
    pub fn readiness(&self) -> Result<(), &'static str> {
        if self.inner.draining.load(Ordering::SeqCst) {
            Err("draining")
        } else if !self.inner.started.load(Ordering::SeqCst) {
            Err("starting: not every registration consumes yet")
        } else if self.inner.disconnected.load(Ordering::SeqCst) > 0 {
            Err("disconnected from the broker")
        } else if let Some(why) = self.down().values().next() {
            Err(why)
        } else {
            Ok(())
        }
    }

    /// Whether `/readyz` answers 200.
    pub fn is_ready(&self) -> bool {
        self.readiness().is_ok()
    }

    fn publish(&self) {
        metrics::gauge!(names::READY).set(if self.is_ready() { 1.0 } else { 0.0 });
    }
}

/// Put into the [`Env`](crate::Env) by the generated `main` when the operator sets the drain
/// timeout (`run --drain-timeout SECONDS`, `RUSTSTREAM_DRAIN_TIMEOUT`): it overrides the app's
/// `.drain_timeout(..)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainTimeout(pub Duration);

/// Renders the Prometheus text of the installed recorder.
pub type Render = Arc<dyn Fn() -> String + Send + Sync>;

/// Installs the Prometheus recorder as the process's `metrics` recorder (once: later calls
/// return the first one's renderer) and returns what renders its text.
///
/// # Errors
///
/// Another recorder (not this one) is installed already.
#[cfg(feature = "prometheus")]
pub fn install_prometheus() -> Result<Render, crate::Error> {
    use std::sync::OnceLock;

    use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
    static HANDLE: OnceLock<Result<PrometheusHandle, String>> = OnceLock::new();
    let handle = HANDLE.get_or_init(|| {
        PrometheusBuilder::new()
            .set_buckets_for_metric(
                Matcher::Full(names::HANDLER_DURATION.to_owned()),
                DURATION_BUCKETS,
            )
            .and_then(PrometheusBuilder::install_recorder)
            .map_err(|e| e.to_string())
    });
    match handle {
        Ok(handle) => {
            let handle = handle.clone();
            Ok(Arc::new(move || {
                handle.run_upkeep();
                handle.render()
            }))
        }
        Err(err) => Err(crate::Error::new(
            crate::ErrorKind::Config,
            format!(
                "cannot install the Prometheus metrics recorder ({err}); another `metrics` recorder is installed: serve that one, or drop `--metrics-addr`"
            ),
        )),
    }
}
