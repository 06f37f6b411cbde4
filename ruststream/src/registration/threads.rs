//! `.threads(n)`: a registration whose handler calls run on a pool of its own, n OS threads
//! named after the registration, each running a current-thread tokio runtime. A handler that
//! computes for a while then holds one of these threads, not a worker of the app's runtime:
//! the app's other registrations, its sources and its settlements go on meanwhile.
//!
//! Only the call runs there (decoding, the layers, the handler and what it publishes through
//! its context); the timeout, the progress signals and the settlement stay on the app's
//! runtime, which waits for the call's result.

use std::future::Future;
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{mpsc, oneshot};

use crate::error::{Error, ErrorKind};
use crate::handled::Handled;

type Job = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A registration's threads: each takes calls from its own queue.
pub(super) struct Pool {
    workers: Vec<Worker>,
}

struct Worker {
    jobs: mpsc::UnboundedSender<Job>,
    /// Calls sent to this thread and not finished: a call goes to the least busy thread.
    busy: Arc<AtomicUsize>,
}

impl Pool {
    /// Starts `threads` threads named `<registration>-<i>`. They end once the pool is dropped
    /// (the endpoint's last clone, after the broker's drain), cancelling what still runs.
    pub(super) fn start(registration: &str, threads: NonZeroUsize) -> Result<Self, Error> {
        let mut workers = Vec::with_capacity(threads.get());
        for i in 0..threads.get() {
            let (jobs, queue) = mpsc::unbounded_channel::<Job>();
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|err| spawn_failed(registration, &err))?;
            std::thread::Builder::new()
                .name(format!("{registration}-{i}"))
                .spawn(move || runtime.block_on(serve(queue)))
                .map_err(|err| spawn_failed(registration, &err))?;
            workers.push(Worker {
                jobs,
                busy: Arc::default(),
            });
        }
        Ok(Self { workers })
    }

    /// Runs `call` on the least busy thread and waits for it on the caller's runtime. On a
    /// current-thread runtime (where a test's clock may be paused) the wait holds a blocking
    /// task, which keeps tokio from advancing a paused clock while the call runs elsewhere, as
    /// it would not advance while the call ran in place. A dropped wait cancels the call.
    pub(super) async fn run<F>(&self, call: F) -> Handled
    where
        F: Future<Output = Handled> + Send + 'static,
    {
        // The least busy thread, claimed atomically: two calls starting at once on the app's
        // workers would otherwise both see the same idle thread, and one would wait behind the
        // other's computation while another thread sat idle.
        let worker = loop {
            let Some((worker, seen)) = self
                .workers
                .iter()
                .map(|w| (w, w.busy.load(Ordering::Acquire)))
                .min_by_key(|(_, busy)| *busy)
            else {
                return stopped();
            };
            if worker
                .busy
                .compare_exchange(seen, seen + 1, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                break worker;
            }
        };
        let (done, result) = oneshot::channel();
        let (call, cancel) = futures::future::abortable(call);
        let busy = Arc::clone(&worker.busy);
        let job: Job = Box::pin(async move {
            // Released however the job ends, a panic included.
            let _busy = Busy(busy);
            if let Ok(handled) = call.await {
                let _ = done.send(handled);
            }
        });
        if worker.jobs.send(job).is_err() {
            worker.busy.fetch_sub(1, Ordering::Release);
            return stopped();
        }
        let _cancel_on_drop = CancelOnDrop(cancel);
        let current_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread);
        let handled = if current_thread {
            tokio::task::spawn_blocking(move || result.blocking_recv())
                .await
                .ok()
                .and_then(Result::ok)
        } else {
            result.await.ok()
        };
        handled.unwrap_or_else(stopped)
    }
}

/// An error when `policy`'s threads cannot do what they promise.
pub(super) fn check(
    registration: &str,
    policy: &crate::registration::Policy,
    batch: bool,
) -> Result<(), Error> {
    let Some(threads) = policy.threads else {
        return Ok(());
    };
    let refuse = |why: String| {
        Err(Error::new(
            ErrorKind::Config,
            format!("registration `{registration}` runs on {threads} threads, and {why}"),
        ))
    };
    if batch {
        return refuse(
            "threads run single handlers only; take one message per call, or compute on a thread of your own inside the batch".to_owned(),
        );
    }
    if policy.concurrency < threads {
        return refuse(format!(
            "handles {} message(s) at once, so some threads would stay idle; raise it with `.concurrency(nonzero!({threads}))`",
            policy.concurrency
        ));
    }
    Ok(())
}

/// Runs each call sent to one thread as a task of its runtime, until the pool is dropped.
async fn serve(mut queue: mpsc::UnboundedReceiver<Job>) {
    while let Some(job) = queue.recv().await {
        tokio::spawn(job);
    }
}

struct CancelOnDrop(futures::future::AbortHandle);

/// A call counted on its thread, until dropped.
struct Busy(Arc<AtomicUsize>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Release);
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn stopped() -> Handled {
    Handled::NoOutcome("the registration's threads stopped before the handler finished".into())
}

fn spawn_failed(registration: &str, err: &std::io::Error) -> Error {
    Error::new(
        ErrorKind::Config,
        format!("registration `{registration}`: starting its handler threads failed: {err}"),
    )
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroUsize;

    use super::Pool;
    use crate::handled::Handled;
    use crate::outcome::HandlerOutcome;

    fn thread_name() -> Handled {
        let name = std::thread::current().name().unwrap_or("").to_owned();
        Handled::NoOutcome(name)
    }

    #[tokio::test(start_paused = true)]
    async fn calls_run_on_the_registrations_threads_under_a_paused_clock() {
        let pool = Pool::start("crunch", NonZeroUsize::new(2).expect("2")).expect("threads");
        let ran = pool.run(async { thread_name() }).await;
        let Handled::NoOutcome(name) = ran else {
            panic!("unexpected {ran:?}");
        };
        assert!(name == "crunch-0" || name == "crunch-1", "ran on {name}");
        // The paused clock stood still while the call ran elsewhere.
        let before = tokio::time::Instant::now();
        let slept = pool
            .run(async {
                std::thread::sleep(std::time::Duration::from_millis(20));
                Handled::Outcome(HandlerOutcome::ack())
            })
            .await;
        assert_eq!(slept, Handled::Outcome(HandlerOutcome::ack()));
        assert_eq!(tokio::time::Instant::now(), before);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_whose_wait_is_dropped_is_cancelled() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::time::Duration;

        let pool = Pool::start("gone", NonZeroUsize::MIN).expect("threads");
        let finished = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&finished);
        let waited = tokio::time::timeout(
            Duration::from_millis(10),
            pool.run(async move {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                flag.store(true, Ordering::SeqCst);
                thread_name()
            }),
        )
        .await;
        assert!(waited.is_err(), "the call cannot have finished");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while pool.workers[0].busy.load(Ordering::Relaxed) != 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the call was not cancelled"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(!finished.load(Ordering::SeqCst));
        let ran = pool.run(async { thread_name() }).await;
        assert_eq!(ran, Handled::NoOutcome("gone-0".to_owned()));
    }

    /// Calls that start together take different idle threads: each waits until both run, so
    /// two on one thread (whose runtime the first would hold) would never meet.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn calls_started_together_take_different_threads() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::time::{Duration, Instant};

        for round in 0..50 {
            let pool =
                Arc::new(Pool::start("pair", NonZeroUsize::new(2).expect("2")).expect("threads"));
            let running = Arc::new(AtomicUsize::new(0));
            let calls = (0..2).map(|_| {
                let (pool, running) = (Arc::clone(&pool), Arc::clone(&running));
                tokio::spawn(async move {
                    pool.run(async move {
                        running.fetch_add(1, Ordering::SeqCst);
                        let deadline = Instant::now() + Duration::from_secs(10);
                        while running.load(Ordering::SeqCst) < 2 && Instant::now() < deadline {
                            std::hint::spin_loop();
                        }
                        thread_name()
                    })
                    .await
                })
            });
            let mut names = Vec::new();
            for call in calls.collect::<Vec<_>>() {
                match call.await.expect("the call's task") {
                    Handled::NoOutcome(name) => names.push(name),
                    other => panic!("unexpected {other:?}"),
                }
            }
            names.sort();
            assert_eq!(
                names,
                ["pair-0", "pair-1"],
                "round {round}: both calls on one thread"
            );
        }
    }
}
