//! A single handler called with its concrete type: through a boxed future per delivery when
//! the call must borrow (middleware, concurrent tasks), or, for a broker that handles one
//! delivery at a time, through an [`InlineHandler`] made once per registration: the delivery
//! is moved into the handler's future, which lives in place for the whole run, and handed back
//! with what the handler said. No allocation and no type-erased call per delivery besides the
//! one that starts it and the ones that poll it.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use futures::future::BoxFuture;

use crate::codec::Format;
use crate::delivery::Delivery;
use crate::handled::Handled;
use crate::middleware::SingleHandler;
use crate::publish::Publish;

/// A registration's single handler with its payload and output types: one call on one delivery.
pub(super) trait SingleCall<S>: Send + Sync + 'static {
    /// Runs the handler on `call.delivery` (decoded, panics caught).
    fn call<'a>(&'a self, call: Call<'a, S>) -> impl Future<Output = Handled> + Send + 'a;
}

/// What a single handler's call is made with.
pub(super) struct Call<'a, S> {
    pub(super) delivery: &'a Delivery,
    pub(super) state: &'a Arc<S>,
    pub(super) publisher: &'a dyn Publish,
    pub(super) name: &'a str,
    pub(super) codec: Format,
}

/// A [`SingleCall`] with its type erased, once per registration: what binding it to the app
/// state makes of it.
pub(super) trait BindSingle<S>: Send + Sync + 'static {
    /// The call bound to `state`, as the middleware chain and [`Endpoint::dispatch`] call it
    /// (a boxed future per delivery).
    ///
    /// [`Endpoint::dispatch`]: super::Endpoint::dispatch
    fn bind(self: Arc<Self>, state: Arc<S>, codec: Format) -> Arc<dyn SingleHandler>;

    /// The call bound to `state` and `publisher`, one delivery at a time, within `timeout`.
    fn inline(self: Arc<Self>, bound: Bound<S>) -> InlineHandler;
}

/// What an inline call is bound to.
pub(super) struct Bound<S> {
    pub(super) state: Arc<S>,
    pub(super) codec: Format,
    pub(super) name: Arc<str>,
    pub(super) timeout: Option<Duration>,
    pub(super) publisher: Arc<dyn Publish>,
}

impl<S: Send + Sync + 'static, C: SingleCall<S>> BindSingle<S> for C {
    fn bind(self: Arc<Self>, state: Arc<S>, codec: Format) -> Arc<dyn SingleHandler> {
        Arc::new(BoundCall {
            call: self,
            state,
            codec,
        })
    }

    fn inline(self: Arc<Self>, bound: Bound<S>) -> InlineHandler {
        let both = Arc::new((self, bound));
        InlineHandler::new(move |delivery: Delivery| {
            let both = Arc::clone(&both);
            async move {
                let (call, bound) = &*both;
                let args = Call {
                    delivery: &delivery,
                    state: &bound.state,
                    publisher: &*bound.publisher,
                    name: &bound.name,
                    codec: bound.codec,
                };
                // Awaited as it is without a timeout: `limited`'s future would hold the call's
                // and be moved with it. The same timeout as `limited` (below, for
                // `Endpoint::dispatch`): change both together.
                let handled = match bound.timeout {
                    None => call.call(args).await,
                    Some(limit) => tokio::time::timeout(limit, call.call(args))
                        .await
                        .unwrap_or(Handled::TimedOut(limit)),
                };
                (delivery, handled)
            }
        })
    }
}

/// A call bound to the app state: the state lent to each call, not cloned into it.
struct BoundCall<C, S> {
    call: Arc<C>,
    state: Arc<S>,
    codec: Format,
}

impl<S: Send + Sync + 'static, C: SingleCall<S>> SingleHandler for BoundCall<C, S> {
    fn call<'a>(
        &'a self,
        delivery: &'a Delivery,
        publisher: &'a dyn Publish,
        registration: &'a str,
    ) -> BoxFuture<'a, Handled> {
        Box::pin(self.call.call(Call {
            delivery,
            state: &self.state,
            publisher,
            name: registration,
            codec: self.codec,
        }))
    }
}

/// Runs `handling` within `timeout`; `Err(limit)` when it ran past it (and was cancelled).
///
/// `BindSingle::inline` (above) writes the same timeout out in its call, on purpose: this
/// future, holding the handler's, would be moved with it for every delivery. Change both
/// together.
pub(super) async fn limited<T>(
    timeout: Option<Duration>,
    handling: impl Future<Output = T>,
) -> Result<T, Duration> {
    match timeout {
        Some(limit) => tokio::time::timeout(limit, handling)
            .await
            .map_err(|_| limit),
        None => Ok(handling.await),
    }
}

/// A registration's single handler, bound for a broker that hands it one delivery at a time
/// ([`Endpoint::inline_handler`](super::Endpoint::inline_handler)): its future is made in
/// place for each delivery, which it owns while it runs and hands back with what the handler
/// said.
pub struct InlineHandler {
    call: Box<dyn InlineCall>,
}

impl fmt::Debug for InlineHandler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InlineHandler").finish_non_exhaustive()
    }
}

impl InlineHandler {
    fn new<F, Fut>(make: F) -> Self
    where
        F: Fn(Delivery) -> Fut + Send + 'static,
        Fut: Future<Output = (Delivery, Handled)> + Send + 'static,
    {
        Self {
            call: Box::new(Slot {
                make,
                running: Box::pin(None),
                kept: None,
            }),
        }
    }

    /// Starts the handler on `delivery` (within the registration's `handler_timeout`),
    /// replacing a call that did not finish; [`poll_done`](Self::poll_done) runs it.
    pub(super) fn start(&mut self, delivery: Delivery) {
        self.call.start(delivery);
    }

    /// Keeps `delivery` with `handled`, as if the handler had run on it and said so (a
    /// delivery it must not run on).
    pub(super) fn keep(&mut self, delivery: Delivery, handled: Handled) {
        self.call.keep(delivery, handled);
    }

    /// Runs the call started last: the delivery back, with what the handler said. Pending when
    /// none was started.
    pub(super) fn poll_done(&mut self, cx: &mut Context<'_>) -> Poll<(Delivery, Handled)> {
        self.call.poll_done(cx)
    }
}

/// The handler's future for the delivery it runs on, if any: allocated once.
trait InlineCall: Send {
    /// Makes the handler's future for `delivery` (replacing one that did not finish).
    fn start(&mut self, delivery: Delivery);

    fn keep(&mut self, delivery: Delivery, handled: Handled);

    /// Polls the handler's future (or hands back what was kept); pending when there is none.
    fn poll_done(&mut self, cx: &mut Context<'_>) -> Poll<(Delivery, Handled)>;
}

struct Slot<F, Fut> {
    make: F,
    running: Pin<Box<Option<Fut>>>,
    kept: Option<(Delivery, Handled)>,
}

impl<F, Fut> InlineCall for Slot<F, Fut>
where
    F: Fn(Delivery) -> Fut + Send,
    Fut: Future<Output = (Delivery, Handled)> + Send,
{
    fn start(&mut self, delivery: Delivery) {
        self.kept = None;
        self.running.set(Some((self.make)(delivery)));
    }

    fn keep(&mut self, delivery: Delivery, handled: Handled) {
        self.running.set(None);
        self.kept = Some((delivery, handled));
    }

    fn poll_done(&mut self, cx: &mut Context<'_>) -> Poll<(Delivery, Handled)> {
        if let Some(kept) = self.kept.take() {
            return Poll::Ready(kept);
        }
        let Some(running) = self.running.as_mut().as_pin_mut() else {
            return Poll::Pending;
        };
        let done = ready!(running.poll(cx));
        // Dropped now (what the handler held), not at the next delivery.
        self.running.set(None);
        Poll::Ready(done)
    }
}
