//! A started app ([`RunningApp`]): its drain on stop, and the signals that ask for one.

use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;

use super::info::AppInfo;
use crate::broker::RunningBroker;
use crate::error::Error;
use crate::publish::Publish;

/// Resolves on SIGINT or SIGTERM (or when signals cannot be watched, never).
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(err) = tokio::signal::ctrl_c().await {
            tracing::error!(%err, "cannot watch for ctrl-c");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(err) => {
                tracing::error!(%err, "cannot watch for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::info!("SIGINT: draining"),
        () = term => tracing::info!("SIGTERM: draining"),
    }
}

/// A started app; [`RunningApp::stop`] drains it.
pub struct RunningApp {
    pub(super) info: AppInfo,
    pub(super) brokers: Vec<Box<dyn RunningBroker>>,
    pub(super) on_shutdown: Box<dyn FnOnce() -> BoxFuture<'static, Result<(), Error>> + Send>,
    /// Told of the drain (`/readyz`), when the app started with one.
    pub(super) health: Option<crate::telemetry::Health>,
}

impl fmt::Debug for RunningApp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunningApp")
            .field("info", &self.info)
            .field("brokers", &self.brokers.len())
            .finish_non_exhaustive()
    }
}

impl RunningApp {
    /// What publishes on the app's brokers from outside a handler: the first broker's
    /// publisher, if it offers one. A broker crate wraps it in its own API
    /// (`ruststream_nats::NatsClient::of(&running)`).
    pub fn publisher(&self) -> Option<Arc<dyn Publish>> {
        self.brokers.iter().find_map(|b| b.publisher())
    }

    /// Drains every broker (stop pulling, finish handlers in flight, settle, flush), then runs
    /// the shutdown hooks.
    pub async fn stop(mut self) -> Result<(), Error> {
        let mut first_error = None;
        if let Some(health) = &self.health {
            health.set_draining();
        }
        let brokers = std::mem::take(&mut self.brokers);
        let on_shutdown = std::mem::replace(
            &mut self.on_shutdown,
            Box::new(|| Box::pin(std::future::ready(Ok(())))),
        );
        for broker in brokers {
            if let Err(err) = broker.stop().await {
                tracing::error!(%err, "a broker did not stop cleanly");
                first_error.get_or_insert(err);
            }
        }
        if let Err(err) = on_shutdown().await {
            tracing::error!(%err, "a shutdown hook failed");
            first_error.get_or_insert(err);
        }
        tracing::info!(app = self.info.name(), "stopped");
        first_error.map_or(Ok(()), Err)
    }
}

/// Dropped without [`stop`](RunningApp::stop) (a `select!` that cancelled `run_until`, a
/// panic): the brokers are dropped, and with them their sources, which stop at once without a
/// drain. Handlers in flight are abandoned, messages pulled and not handled are not released:
/// JetStream delivers them again after `ack_wait`, Core ones are lost. A warning says so.
impl Drop for RunningApp {
    fn drop(&mut self) {
        if !self.brokers.is_empty() {
            tracing::warn!(
                app = self.info.name(),
                "the running app was dropped without stop(): its brokers stop at once without draining (handlers in flight are abandoned; JetStream delivers their messages again after ack_wait); call `RunningApp::stop` to drain"
            );
        }
    }
}
