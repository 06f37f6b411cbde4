//! After-acknowledgement hooks: code a handler registers with [`Context::after_ack`] that the
//! broker runs once the delivery's `+ACK` reached the server (confirmed by it with
//! `.confirm_acks()`), and never when the delivery was retried, dropped or dead-lettered.
//!
//! The hooks live with the delivery (shared with the copy a call on `.threads(n)` owns), so
//! every way a single handler is called (in place, behind middleware, on threads) hands
//! them to the settlement without carrying them through its return value.
//!
//! [`Context::after_ack`]: crate::Context::after_ack

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use crate::handled::Handled;
use crate::panic::guard_async;

type Hook = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;
type Hooks = Arc<Mutex<Vec<Hook>>>;

/// Where a delivery keeps its hooks: empty (and unallocated) until a handler registers one.
#[derive(Default)]
pub(crate) struct Slot(OnceLock<Hooks>);

impl Slot {
    /// Adds `hook`, after the ones already registered.
    pub(crate) fn push(&self, hook: Hook) {
        self.shared()
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(hook);
    }

    /// The hooks, shared: what a copy of the delivery (for a call on threads) holds, so that
    /// a hook its handler registers is run after the original's settlement.
    pub(crate) fn shared(&self) -> &Hooks {
        self.0.get_or_init(Hooks::default)
    }

    /// A slot sharing this one's hooks.
    pub(crate) fn duplicate(&self) -> Self {
        let slot = OnceLock::new();
        let _ = slot.set(Arc::clone(self.shared()));
        Self(slot)
    }

    /// Takes every hook registered so far.
    #[inline]
    pub(crate) fn take(&self) -> AfterAck {
        let hooks = match self.0.get() {
            Some(hooks) => {
                std::mem::take(&mut *hooks.lock().unwrap_or_else(PoisonError::into_inner))
            }
            None => Vec::new(),
        };
        AfterAck { hooks }
    }
}

impl fmt::Debug for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.get().map_or(0, |h| {
            h.lock().unwrap_or_else(PoisonError::into_inner).len()
        });
        write!(f, "AfterAck({n})")
    }
}

/// The hooks a delivery's handler registered with [`Context::after_ack`], taken by the broker
/// ([`Delivery::take_after_ack`]) when it settles the delivery. Dropping it runs none of them:
/// what a broker does when the delivery was not acknowledged.
///
/// [`Context::after_ack`]: crate::Context::after_ack
/// [`Delivery::take_after_ack`]: crate::Delivery::take_after_ack
#[must_use = "the hooks run only when `run` is awaited"]
pub struct AfterAck {
    hooks: Vec<Hook>,
}

impl AfterAck {
    /// Whether no hook was registered.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.hooks.is_empty()
    }

    /// How many hooks were registered.
    pub fn len(&self) -> usize {
        self.hooks.len()
    }

    /// Runs the hooks one after the other, in the order they were registered. A hook that
    /// panics is logged at error level, naming `registration` and `subject`; the ones after it
    /// still run, and the delivery stays settled as it was. A hook still running after
    /// [`AfterAck::LIMIT`] is stopped with a warning: it holds the registration's concurrency
    /// slot, so one that never finishes would stall the registration.
    pub async fn run(self, registration: &str, subject: &str) {
        for (index, hook) in self.hooks.into_iter().enumerate() {
            match tokio::time::timeout(Self::LIMIT, guard_async(hook)).await {
                Ok(Err(Handled::Panicked(panic))) => tracing::error!(
                    registration = %registration,
                    subject = %subject,
                    hook = index,
                    %panic,
                    "an after-ack hook panicked; the delivery stays acknowledged and the other hooks run"
                ),
                Err(_) => tracing::warn!(
                    registration = %registration,
                    subject = %subject,
                    hook = index,
                    limit = ?Self::LIMIT,
                    "an after-ack hook ran past its time limit and was stopped; the delivery stays acknowledged and the other hooks run"
                ),
                Ok(_) => {}
            }
        }
    }

    /// How long one hook may run.
    pub const LIMIT: std::time::Duration = std::time::Duration::from_secs(30);
}

impl fmt::Debug for AfterAck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AfterAck({})", self.hooks.len())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test]
    async fn hooks_run_in_order_and_a_panicking_one_does_not_stop_the_others() {
        let slot = Slot::default();
        let ran = Arc::new(AtomicUsize::new(0));
        let first = Arc::clone(&ran);
        slot.push(Box::pin(async move {
            assert_eq!(first.fetch_add(1, Ordering::SeqCst), 0);
        }));
        slot.push(Box::pin(async { panic!("a broken hook") }));
        let third = Arc::clone(&ran);
        slot.duplicate().push(Box::pin(async move {
            assert_eq!(third.fetch_add(1, Ordering::SeqCst), 1);
        }));
        let hooks = slot.take();
        assert_eq!(hooks.len(), 3);
        hooks.run("orders", "orders.created").await;
        assert_eq!(ran.load(Ordering::SeqCst), 2);
        assert!(slot.take().is_empty(), "taken once");
    }

    #[tokio::test(start_paused = true)]
    async fn a_hook_that_never_finishes_is_stopped_at_the_limit_and_the_next_one_runs() {
        let slot = Slot::default();
        slot.push(Box::pin(std::future::pending::<()>()));
        let ran = Arc::new(AtomicUsize::new(0));
        let second = Arc::clone(&ran);
        slot.push(Box::pin(async move {
            second.fetch_add(1, Ordering::SeqCst);
        }));
        let started = tokio::time::Instant::now();
        slot.take().run("orders", "orders.created").await;
        assert_eq!(started.elapsed(), AfterAck::LIMIT);
        assert_eq!(ran.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn an_empty_slot_allocates_nothing() {
        let slot = Slot::default();
        assert!(slot.take().is_empty());
        assert!(slot.0.get().is_none());
    }
}
