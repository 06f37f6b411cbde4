//! A started NATS broker and its drain: stop taking messages, let the handlers in flight finish
//! (up to the drain timeout), send their settlements, flush, close.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use ruststream::{Error, ErrorKind, RunningBroker};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::copies::Copies;
use crate::supervise::Supervisor;
use crate::transport::Transport;

/// How long the final flush may take.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);
/// Extra time a source gets past the deadline to report back.
const REPORT_GRACE: Duration = Duration::from_secs(1);

/// The running broker: one source task per registration over one transport.
pub(crate) struct RunningNatsBroker {
    pub(crate) transport: Arc<dyn Transport>,
    pub(crate) copies: Arc<Copies>,
    pub(crate) stop: watch::Sender<Option<Instant>>,
    /// Each source's task: how many handlers it abandoned at the drain deadline (`None`: it
    /// panicked).
    pub(crate) sources: Vec<JoinHandle<Option<usize>>>,
    /// The event reporter and the stream watcher.
    pub(crate) background: Vec<JoinHandle<Option<()>>>,
    /// Knows which tasks ended before the stop.
    pub(crate) supervisor: Supervisor,
    pub(crate) drain_timeout: Duration,
}

impl RunningBroker for RunningNatsBroker {
    fn stop(self: Box<Self>) -> BoxFuture<'static, Result<(), Error>> {
        Box::pin(async move {
            let Self {
                transport,
                copies,
                stop,
                sources,
                background,
                supervisor,
                drain_timeout,
            } = *self;
            let deadline = Instant::now() + drain_timeout;
            tracing::info!(
                ?drain_timeout,
                "draining NATS: no new messages, waiting for handlers in flight"
            );
            stop.send_replace(Some(deadline));

            let mut abandoned = 0;
            for source in sources {
                let abort = source.abort_handle();
                match tokio::time::timeout_at(deadline + REPORT_GRACE, source).await {
                    Ok(Ok(n)) => abandoned += n.unwrap_or(0),
                    Ok(Err(err)) => tracing::error!(%err, "a source task failed"),
                    Err(_) => {
                        abort.abort();
                        tracing::error!("a source did not stop in time");
                    }
                }
            }

            for task in background {
                let abort = task.abort_handle();
                if tokio::time::timeout_at(deadline + REPORT_GRACE, task)
                    .await
                    .is_err()
                {
                    abort.abort();
                }
            }

            let dropped = copies.shutdown().await;
            if dropped > 0 {
                tracing::warn!(
                    dropped,
                    "{dropped} pending retry copies were dropped: a Core copy waits in the process, and the app stopped before its timer fired"
                );
            }

            let flushed = tokio::time::timeout(FLUSH_TIMEOUT, transport.flush()).await;
            drop(transport);
            let flush_error = match flushed {
                Ok(Ok(())) => None,
                Ok(Err(err)) => Some(ruststream::BoxError::from(err)),
                Err(_) => Some(format!("no answer within {FLUSH_TIMEOUT:?}").into()),
            };
            if let Some(err) = flush_error {
                return Err(Error::new(
                    ErrorKind::Shutdown,
                    "the final flush to NATS failed; settlements sent during the drain may not have reached the server",
                )
                .with_source(err));
            }
            let ended = supervisor.ended_early();
            if !ended.is_empty() {
                return Err(Error::new(
                    ErrorKind::Shutdown,
                    format!(
                        "{} before the stop; their messages were not handled meanwhile",
                        ended.join("; ")
                    ),
                ));
            }
            if abandoned > 0 {
                return Err(Error::new(
                    ErrorKind::Shutdown,
                    format!(
                        "{abandoned} handlers still ran at the drain timeout ({drain_timeout:?}) and were abandoned; their deliveries are not settled"
                    ),
                ));
            }
            tracing::info!("NATS drained");
            Ok(())
        })
    }
}
