// The idle homes are kept as `dyn Any` and downcast on reuse because the future they hold is
// an `async fn`'s, whose type stable Rust cannot name in `NatsTransport`'s `homes` field.

//! Homes for stored publishes' futures, kept for the next publish.
//!
//! A stored publish waits for the stream's acknowledgement through async-nats's
//! `send_request`, whose future is larger than glibc's small sizes: boxed anew for every
//! confirmed output, each `malloc` of it would go through the large bins and first consolidate
//! the small chunks freed since the last one (`docs/benchmarks.md`, "Confirmed reply").
//! So each publish's future is made in a home kept from an earlier one, and dropped there in
//! place when it is done, or given up on (which lets go of what it waited on at once); the
//! empty home goes back for the next. At most [`KEPT`] homes wait, so a burst of concurrent
//! publishes leaves no more behind than a busy service reuses. All of it safe code: a home is
//! a pinned `Option` of the future, set to `Some` to start and to `None` when done.

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, PoisonError};
use std::task::{Context, Poll, ready};

/// The most homes kept (about 80 KiB of stored publishes' futures).
const KEPT: usize = 64;

/// One future's place: empty while kept, the future while it runs. Pinned where it was
/// allocated, so a future is made, polled and dropped in place, and the place outlives it.
type Home<F> = Pin<Box<Option<F>>>;

/// Empty homes of futures, waiting to be reused; each a `Home<F>` of the `F` it was made for
/// (one kind of future a `Homes`, in practice).
#[derive(Default)]
pub(super) struct Homes {
    idle: Mutex<Vec<Box<dyn Any + Send>>>,
}

impl Homes {
    /// The future `make` makes, made in a kept home when one waits, else in a new one.
    pub(super) fn run<F>(&self, make: impl FnOnce() -> F) -> InHome<'_, F>
    where
        F: Future + Send + 'static,
    {
        let kept = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let mut home = match kept.map(<Box<dyn Any + Send>>::downcast::<Home<F>>) {
            Some(Ok(home)) => home,
            // A home of another kind of future (none in practice): not this one's.
            Some(Err(_)) | None => Box::new(Box::pin(None)),
        };
        home.set(Some(make()));
        InHome {
            home: Some(home),
            homes: self,
            finished: false,
        }
    }

    /// Keeps an empty home, unless [`KEPT`] already wait.
    fn keep(&self, home: Box<dyn Any + Send>) {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < KEPT {
            idle.push(home);
        }
    }
}

/// A future running in a home of [`Homes`], which goes back empty when this is dropped.
pub(super) struct InHome<'a, F: Send + 'static> {
    home: Option<Box<Home<F>>>,
    homes: &'a Homes,
    finished: bool,
}

impl<F: Future + Send + 'static> Future for InHome<'_, F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        assert!(!this.finished, "a stored publish polled after it finished");
        let future = this
            .home
            .as_mut()
            .and_then(|home| Pin::as_mut(&mut **home).as_pin_mut())
            .expect("a running future is in its home");
        let output = ready!(future.poll(cx));
        this.finished = true;
        Poll::Ready(output)
    }
}

impl<F: Send + 'static> Drop for InHome<'_, F> {
    fn drop(&mut self) {
        if let Some(mut home) = self.home.take() {
            // Dropped in place, finished or not (a publish given up on lets go of what it
            // waited on here): the home goes back empty.
            home.set(None);
            self.homes.keep(home);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn value(n: u32) -> u32 {
        tokio::task::yield_now().await;
        n
    }

    fn idle(homes: &Homes) -> usize {
        homes.idle.lock().expect("not poisoned").len()
    }

    /// Where a running future's home is.
    fn address<F: Send>(running: &InHome<'_, F>) -> *const () {
        let home = running.home.as_ref().expect("running");
        std::ptr::from_ref(&**home).cast::<()>()
    }

    #[tokio::test]
    async fn a_home_is_reused_by_the_next_future() {
        let homes = Homes::default();
        let mut first = homes.run(|| value(1));
        let first_at = address(&first);
        assert_eq!((&mut first).await, 1);
        assert_eq!(
            idle(&homes),
            0,
            "kept only once the finished future is dropped"
        );
        drop(first);
        assert_eq!(idle(&homes), 1);

        let second = homes.run(|| value(2));
        assert_eq!(idle(&homes), 0, "the kept home was taken");
        assert_eq!(address(&second), first_at, "made in the same place");
        assert_eq!(second.await, 2);
        assert_eq!(idle(&homes), 1);
    }

    #[tokio::test]
    async fn a_future_given_up_on_is_dropped_at_once_and_its_home_kept() {
        let homes = Homes::default();
        let held = std::sync::Arc::new(());
        let holding = std::sync::Arc::clone(&held);
        let mut running = homes.run(move || async move {
            let _holding = holding;
            std::future::pending::<()>().await;
        });
        let waker = futures::task::noop_waker();
        let polled = Pin::new(&mut running).poll(&mut Context::from_waker(&waker));
        assert!(polled.is_pending());
        drop(running);
        assert_eq!(
            std::sync::Arc::strong_count(&held),
            1,
            "what the future held is let go of when it is given up on"
        );
        assert_eq!(idle(&homes), 1);
    }

    #[tokio::test]
    async fn a_home_of_another_future_is_not_used() {
        let homes = Homes::default();
        drop(homes.run(|| value(1)));
        assert_eq!(homes.run(|| async { "other" }).await, "other");
        assert_eq!(
            idle(&homes),
            1,
            "the other future's home is kept in its stead"
        );
    }

    #[tokio::test]
    async fn at_most_kept_homes_wait() {
        let homes = Homes::default();
        let extra = 3;
        let running: Vec<_> = (0..KEPT + extra)
            .map(|n| homes.run(move || value(u32::try_from(n).expect("small"))))
            .collect();
        let outputs = futures::future::join_all(running).await;
        assert_eq!(outputs.len(), KEPT + extra);
        assert_eq!(idle(&homes), KEPT);
    }
}
