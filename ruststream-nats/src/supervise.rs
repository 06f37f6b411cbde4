//! The broker's tasks, watched: each registration's source and the background tasks (the
//! connection's event reporter, the stream-advisory watcher). A task that ends before the stop,
//! or panics, is logged as an error naming it, turns `/readyz` false and makes the broker's
//! `stop()` fail: nothing a registration stops doing goes unnoticed.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use ruststream::__private::guard_async;
use ruststream::registration::Handled;
use ruststream::telemetry::Health;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// `None` while running; the drain deadline once the broker is stopping (the sources' signal).
type StopSignal = watch::Receiver<Option<Instant>>;

/// What `/readyz` says while a registration does not consume.
const NOT_CONSUMING: &str = "a registration is not consuming: its subscription ended and is being opened again (see the log)";
/// What `/readyz` says once a registration's task ended.
const REGISTRATION_ENDED: &str =
    "a registration is not consuming: its task ended (see the error log)";
/// What `/readyz` says once a background task ended.
const TASK_ENDED: &str = "a background task of the broker ended (see the error log)";

/// Spawns and watches the broker's tasks.
#[derive(Clone)]
pub(crate) struct Supervisor {
    health: Option<Health>,
    stop: StopSignal,
    /// Why each task that ended before the stop ended.
    ended: Arc<Mutex<Vec<String>>>,
}

/// What a watched task is: its end means a different thing.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    /// A registration's source: the registration handles nothing more.
    Registration,
    /// A background task of the broker.
    Background,
}

impl Supervisor {
    pub(crate) fn new(health: Option<Health>, stop: StopSignal) -> Self {
        Self {
            health,
            stop,
            ended: Arc::default(),
        }
    }

    /// Spawns `task`, named `name`. Its panic, or its end before the broker stops, is
    /// reported ([`ended`](Self::ended)); the handle resolves with its output, `None` when it
    /// panicked.
    pub(crate) fn spawn<T: Send + 'static>(
        &self,
        kind: Kind,
        name: &str,
        task: impl Future<Output = T> + Send + 'static,
    ) -> JoinHandle<Option<T>> {
        let watch = self.clone();
        let name = name.to_owned();
        tokio::spawn(async move {
            match guard_async(task).await {
                Ok(out) => {
                    // A broker dropped without its stop (the signal's sender gone) stops too.
                    let stopping =
                        watch.stop.has_changed().is_err() || watch.stop.borrow().is_some();
                    if !stopping {
                        watch.ended(kind, &name, "it returned before the stop".to_owned());
                    }
                    Some(out)
                }
                Err(Handled::Panicked(panic)) => {
                    watch.ended(kind, &name, format!("it panicked: {panic}"));
                    None
                }
                Err(other) => {
                    watch.ended(kind, &name, format!("{other:?}"));
                    None
                }
            }
        })
    }

    /// The task `name` ended (`why`): an error, readiness false, `stop()` fails.
    fn ended(&self, kind: Kind, name: &str, why: String) {
        match kind {
            Kind::Registration => tracing::error!(
                registration = name,
                why,
                "the registration's task ended: it handles nothing more until the app restarts"
            ),
            Kind::Background => tracing::error!(
                task = name,
                why,
                "a background task of the NATS broker ended"
            ),
        }
        if let Some(health) = &self.health {
            let said = match kind {
                Kind::Registration => REGISTRATION_ENDED,
                Kind::Background => TASK_ENDED,
            };
            health.set_down(name, said);
        }
        let what = match kind {
            Kind::Registration => format!("the task of registration `{name}` ended: {why}"),
            Kind::Background => format!("the broker's task `{name}` ended: {why}"),
        };
        self.ended
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(what);
    }

    /// Why each task that ended before the stop ended.
    pub(crate) fn ended_early(&self) -> Vec<String> {
        self.ended
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Tells readiness whether registration `name` consumes (its subscription open).
    pub(crate) fn consuming(&self, name: &str, consuming: bool) {
        if let Some(health) = &self.health {
            if consuming {
                health.set_up(name);
            } else {
                health.set_down(name, NOT_CONSUMING);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_task_that_ends_before_the_stop_is_reported_and_not_ready() {
        let health = Health::new();
        health.set_started();
        let (stop, signal) = watch::channel(None);
        let supervisor = Supervisor::new(Some(health.clone()), signal);
        let returned = supervisor.spawn(Kind::Background, "watcher", async {});
        assert_eq!(returned.await.ok(), Some(Some(())));
        assert_eq!(health.readiness(), Err(TASK_ENDED));
        let panicked = supervisor.spawn(Kind::Registration, "charge", async {
            panic!("boom");
        });
        assert_eq!(panicked.await.ok(), Some(None));
        let ended = supervisor.ended_early();
        assert_eq!(ended.len(), 2, "{ended:?}");
        assert!(
            ended[1].contains("`charge`") && ended[1].contains("boom"),
            "{ended:?}"
        );

        // Nor when the broker was dropped without its stop.
        let (dropped, signal) = watch::channel(None);
        let unstopped = Supervisor::new(None, signal);
        drop(dropped);
        let returned = unstopped.spawn(Kind::Registration, "dropped", async {});
        assert_eq!(returned.await.ok(), Some(Some(())));
        assert!(unstopped.ended_early().is_empty());

        // After the stop a task that returns is not reported.
        stop.send_replace(Some(Instant::now() + Duration::from_secs(1)));
        let stopped = supervisor.spawn(Kind::Registration, "late", async { 7 });
        assert_eq!(stopped.await.ok(), Some(Some(7)));
        assert_eq!(supervisor.ended_early().len(), 2);
    }

    #[test]
    fn a_registration_not_consuming_is_not_ready_until_it_consumes_again() {
        let health = Health::new();
        health.set_started();
        let (_stop, signal) = watch::channel(None);
        let supervisor = Supervisor::new(Some(health.clone()), signal);
        supervisor.consuming("charge", false);
        assert_eq!(health.readiness(), Err(NOT_CONSUMING));
        supervisor.consuming("charge", true);
        assert_eq!(health.readiness(), Ok(()));
    }
}
