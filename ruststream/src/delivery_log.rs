//! The delivery a log line was written for, without a span: what the generated `main`'s log
//! lines say about the delivery being handled (a "mapped diagnostic context", as the logging
//! libraries of other languages call it).
//!
//! A span per delivery, formatted by `tracing_subscriber`'s `fmt` layer, costs its fields'
//! formatting when it opens (a string the layer keeps whether or not a line is written inside
//! it), the outcome's formatting after the handler, and the registry's bookkeeping on every
//! poll: more than the rest of a Core delivery. The generated `main`'s log subscriber
//! ([`log_subscriber`](crate::app::cli::log_subscriber)) therefore leaves the delivery span
//! out of its log lines and asks the broker for a [`DeliveryLog`] instead: the delivery's
//! identifying values, kept as they are (a shared subject, a shared name, two integers) while
//! its handler runs, and written only into the lines written meanwhile. Any other subscriber
//! (an OpenTelemetry layer, a `fmt` layer of the app's own) still gets the span.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The delivery being handled, as log lines name it (see the module).
#[derive(Debug, Clone)]
pub struct DeliveryLog {
    /// The subject it arrived on.
    pub subject: Arc<str>,
    /// The registration handling it.
    pub registration: Arc<str>,
    /// JetStream: the stream sequence.
    pub stream_sequence: Option<u64>,
    /// JetStream: how many times the server delivered it, this time included.
    pub delivered: Option<u64>,
}

tokio::task_local! {
    static CURRENT: DeliveryLog;
}

/// Whether a subscriber writes [`DeliveryLog`]s (set by the generated `main`'s).
static WANTED: AtomicBool = AtomicBool::new(false);

impl DeliveryLog {
    /// Whether the installed log subscriber writes the delivery into its lines: a broker makes a
    /// `DeliveryLog` only then.
    pub fn wanted() -> bool {
        WANTED.load(Ordering::Relaxed)
    }

    /// The subscriber being installed writes them.
    pub(crate) fn want() {
        WANTED.store(true, Ordering::Relaxed);
    }

    /// Runs `future` (a handler's call) with `self` as the delivery its lines are written for.
    pub async fn scope<F: Future>(self, future: F) -> F::Output {
        CURRENT.scope(self, future).await
    }

    /// Calls `f` with the delivery being handled on this task, if any.
    pub(crate) fn with_current<R>(f: impl FnOnce(&Self) -> R) -> Option<R> {
        CURRENT.try_with(f).ok()
    }
}

/// A name written as it is when it is plain (printable ASCII, no quote, no backslash: every
/// subject and registration name in practice), otherwise quoted and escaped as `Debug` writes
/// it, so that no subject a publisher picks can forge a log line or a terminal escape.
pub struct Plain<'a>(pub &'a str);

impl fmt::Display for Plain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self
            .0
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
        {
            f.write_str(self.0)
        } else {
            write!(f, "{:?}", self.0)
        }
    }
}

impl fmt::Display for DeliveryLog {
    /// `ruststream.delivery{messaging.destination.name=… [messaging.nats.stream_sequence=…
    /// messaging.nats.delivered=…] ruststream.registration=…}`: as the `fmt` layer writes the
    /// delivery span.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ruststream.delivery{{messaging.destination.name={}",
            Plain(&self.subject)
        )?;
        if let Some(sequence) = self.stream_sequence {
            write!(f, " messaging.nats.stream_sequence={sequence}")?;
        }
        if let Some(delivered) = self.delivered {
            write!(f, " messaging.nats.delivered={delivered}")?;
        }
        write!(
            f,
            " ruststream.registration={}}}",
            Plain(&self.registration)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_are_written_as_they_are_and_the_others_escaped() {
        assert_eq!(Plain("orders.created").to_string(), "orders.created");
        assert_eq!(Plain("orders.>").to_string(), "orders.>");
        assert_eq!(Plain("a b").to_string(), "\"a b\"");
        assert_eq!(Plain("evil\u{1b}[31m").to_string(), "\"evil\\u{1b}[31m\"");
        assert_eq!(Plain("quo\"te").to_string(), "\"quo\\\"te\"");
    }

    #[tokio::test]
    async fn the_delivery_is_current_inside_its_scope_only() {
        let log = DeliveryLog {
            subject: "orders.created".into(),
            registration: "orders".into(),
            stream_sequence: Some(7),
            delivered: Some(2),
        };
        let inside = log
            .scope(async { DeliveryLog::with_current(ToString::to_string) })
            .await;
        assert_eq!(
            inside.as_deref(),
            Some(
                "ruststream.delivery{messaging.destination.name=orders.created messaging.nats.stream_sequence=7 messaging.nats.delivered=2 ruststream.registration=orders}"
            )
        );
        assert!(DeliveryLog::with_current(|_| ()).is_none());
    }
}
