//! A `metrics` recorder for unit tests: it keeps what one counter counted or what one histogram
//! recorded, and hands every other metric a no-op handle. Installed for a closure with
//! `metrics::with_local_recorder`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// The metric a [`Capture`] keeps.
enum Kept {
    /// A counter by name, and one label it must carry when given.
    Counter(&'static str, Option<(&'static str, &'static str)>),
    /// A histogram by name.
    Histogram(&'static str),
}

/// Keeps one metric (see the module).
pub(crate) struct Capture {
    kept: Kept,
    counted: Arc<AtomicU64>,
    recorded: Arc<Mutex<Vec<f64>>>,
}

impl Capture {
    /// Keeps what counter `name` counts, only where it carries `label` when one is given.
    pub(crate) fn counter(name: &'static str, label: Option<(&'static str, &'static str)>) -> Self {
        Self::keeping(Kept::Counter(name, label))
    }

    /// Keeps what histogram `name` records.
    pub(crate) fn histogram(name: &'static str) -> Self {
        Self::keeping(Kept::Histogram(name))
    }

    fn keeping(kept: Kept) -> Self {
        Self {
            kept,
            counted: Arc::default(),
            recorded: Arc::default(),
        }
    }

    /// What the counter counted.
    pub(crate) fn counted(&self) -> u64 {
        self.counted.load(Ordering::Relaxed)
    }

    /// What the histogram recorded, in order.
    pub(crate) fn recorded(&self) -> Vec<f64> {
        self.recorded
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

struct Count(Arc<AtomicU64>);

impl metrics::CounterFn for Count {
    fn increment(&self, value: u64) {
        self.0.fetch_add(value, Ordering::Relaxed);
    }

    fn absolute(&self, value: u64) {
        self.0.store(value, Ordering::Relaxed);
    }
}

struct Values(Arc<Mutex<Vec<f64>>>);

impl metrics::HistogramFn for Values {
    fn record(&self, value: f64) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(value);
    }
}

impl metrics::Recorder for Capture {
    fn describe_counter(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }

    fn describe_gauge(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }

    fn describe_histogram(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }

    fn register_counter(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        let Kept::Counter(name, label) = self.kept else {
            return metrics::Counter::noop();
        };
        let labelled = label.is_none_or(|(k, v)| {
            key.labels()
                .any(|label| label.key() == k && label.value() == v)
        });
        if key.name() == name && labelled {
            metrics::Counter::from_arc(Arc::new(Count(Arc::clone(&self.counted))))
        } else {
            metrics::Counter::noop()
        }
    }

    fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::noop()
    }

    fn register_histogram(
        &self,
        key: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        match self.kept {
            Kept::Histogram(name) if key.name() == name => {
                metrics::Histogram::from_arc(Arc::new(Values(Arc::clone(&self.recorded))))
            }
            _ => metrics::Histogram::noop(),
        }
    }
}
