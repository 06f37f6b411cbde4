//! A single handler's call with its types known ([`SingleCall`]), erased once per registration
//! ([`BindSingle`]): into the per-slot call a [`Dispatcher`](super::Dispatcher) runs, whose
//! future is made in place for each delivery, or into the chain its middleware calls.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use super::dispatch::{OneCall, Slot};
use super::threads::Pool;
use crate::codec::Format;
use crate::delivery::Delivery;
use crate::handled::Handled;
use crate::middleware::{Middleware, Single, SingleHandler};
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

/// What a registration's single handler is bound to, once, when the app starts.
pub(super) struct Bound<S> {
    pub(super) state: Arc<S>,
    pub(super) codec: Format,
    pub(super) name: Arc<str>,
    pub(super) timeout: Option<Duration>,
    pub(super) layers: Vec<Arc<dyn Middleware>>,
    pub(super) pool: Option<Arc<Pool>>,
}

/// A [`SingleCall`] with its types erased, once per registration.
pub(super) trait BindSingle<S>: Send + Sync + 'static {
    /// The call for one handler slot of a broker that publishes through `publisher`.
    fn slot(
        self: Arc<Self>,
        bound: &Arc<Bound<S>>,
        publisher: Arc<dyn Publish>,
    ) -> Box<dyn OneCall>;
}

impl<S: Send + Sync + 'static, C: SingleCall<S>> BindSingle<S> for C {
    fn slot(
        self: Arc<Self>,
        bound: &Arc<Bound<S>>,
        publisher: Arc<dyn Publish>,
    ) -> Box<dyn OneCall> {
        let timeout = bound.timeout;
        if !bound.layers.is_empty() {
            // The layers are chosen at run time: the chain through them is erased.
            let chain = crate::middleware::wrap_single(
                Arc::new(BoundCall {
                    call: self,
                    state: Arc::clone(&bound.state),
                    codec: bound.codec,
                }),
                &bound.layers,
            );
            return layered(
                chain,
                Arc::clone(&bound.name),
                timeout,
                bound.pool.clone(),
                publisher,
            );
        }
        let both = Arc::new((self, Arc::clone(bound), publisher));
        match bound.pool.clone() {
            None => Box::new(Slot::new(move |delivery: Delivery| {
                let both = Arc::clone(&both);
                async move {
                    let (call, bound, publisher) = &*both;
                    let call = call.call(bound.args(&delivery, &**publisher));
                    // Awaited as it is without a timeout: no layer of its own to move.
                    let handled = match timeout {
                        None => call.await,
                        Some(limit) => tokio::time::timeout(limit, call)
                            .await
                            .unwrap_or(Handled::TimedOut(limit)),
                    };
                    (delivery, handled)
                }
            })),
            Some(pool) => Box::new(Slot::new(move |delivery: Delivery| {
                let both = Arc::clone(&both);
                let pool = Arc::clone(&pool);
                async move {
                    // The thread owns a copy; the original stays here for the settlement.
                    let copy = delivery.duplicate();
                    let job = async move {
                        let (call, bound, publisher) = &*both;
                        call.call(bound.args(&copy, &**publisher)).await
                    };
                    let handled = limited(timeout, pool.run(job))
                        .await
                        .unwrap_or_else(Handled::TimedOut);
                    (delivery, handled)
                }
            })),
        }
    }
}

impl<S> Bound<S> {
    fn args<'a>(&'a self, delivery: &'a Delivery, publisher: &'a dyn Publish) -> Call<'a, S> {
        Call {
            delivery,
            state: &self.state,
            publisher,
            name: &self.name,
            codec: self.codec,
        }
    }
}

/// The call of a registration with middleware: the chain through its layers, guarded as a
/// whole (a layer's panic is the handler's), on the registration's threads when it has them.
fn layered(
    chain: Arc<Single>,
    name: Arc<str>,
    timeout: Option<Duration>,
    pool: Option<Arc<Pool>>,
    publisher: Arc<dyn Publish>,
) -> Box<dyn OneCall> {
    let both = Arc::new((chain, name, publisher));
    Box::new(Slot::new(move |delivery: Delivery| {
        let both = Arc::clone(&both);
        let pool = pool.clone();
        async move {
            let handled = match pool {
                None => {
                    let (chain, name, publisher) = &*both;
                    let call = crate::panic::guard_async(chain.call(&delivery, &**publisher, name));
                    limited(timeout, call)
                        .await
                        .map(|ran| ran.unwrap_or_else(|panicked| panicked))
                }
                Some(pool) => {
                    let copy = delivery.duplicate();
                    let job = async move {
                        let (chain, name, publisher) = &*both;
                        let call = chain.call(&copy, &**publisher, name);
                        crate::panic::guard_async(call)
                            .await
                            .unwrap_or_else(|panicked| panicked)
                    };
                    limited(timeout, pool.run(job)).await
                }
            };
            (delivery, handled.unwrap_or_else(Handled::TimedOut))
        }
    }))
}

/// A call bound to the app state, as the middleware chain calls it: the state lent to each
/// call, not cloned into it.
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
