//! Middleware: shared behaviour around handlers, at app, broker and registration scope.
//!
//! A [`Middleware`] gets each delivery before the handler, and what the handler made of it
//! after: it can read the delivery, time the handler, change the outcome, answer without
//! running the handler (short-circuit), and publish. The order, outermost first, is the app's
//! layers, the broker's, then the registration's, each in the order they were added; the
//! handler is innermost. A registration with no layers runs its handler directly: no layers
//! cost nothing. See `docs/middleware.md`.

mod builtin;

use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;

use crate::delivery::Delivery;
use crate::handled::Handled;
use crate::publish::Publish;

pub use builtin::{Backoff, ConcurrencyLimit, RateLimit};

/// Behaviour around a handler. Implement [`handle`](Self::handle); batch handlers go through
/// [`handle_batch`](Self::handle_batch), which runs the rest of the chain unchanged unless
/// overridden.
///
/// ```
/// use std::time::Instant;
///
/// use futures::future::BoxFuture;
/// use ruststream::Delivery;
/// use ruststream::middleware::{Middleware, Next};
/// use ruststream::registration::Handled;
///
/// /// Logs how long each handler took, and what it said.
/// struct Timing;
///
/// impl Middleware for Timing {
///     fn handle<'a>(&'a self, delivery: &'a Delivery, next: Next<'a>) -> BoxFuture<'a, Handled> {
///         Box::pin(async move {
///             let started = Instant::now();
///             let registration = next.registration();
///             let handled = next.run().await;
///             tracing::info!(
///                 registration,
///                 subject = delivery.subject(),
///                 took = ?started.elapsed(),
///                 ?handled,
///                 "handled"
///             );
///             handled
///         })
///     }
/// }
/// ```
pub trait Middleware: Send + Sync + 'static {
    /// Runs around one delivery: call `next.run()` to go on to the next layer and the handler
    /// (at most once), or return a [`Handled`] of your own without it.
    fn handle<'a>(&'a self, delivery: &'a Delivery, next: Next<'a>) -> BoxFuture<'a, Handled>;

    /// Runs around one batch (of a batch handler); by default goes straight on.
    fn handle_batch<'a>(
        &'a self,
        deliveries: &'a [&'a Delivery],
        next: NextBatch<'a>,
    ) -> BoxFuture<'a, Vec<Handled>> {
        let _ = deliveries;
        next.run()
    }

    /// The name `describe` shows.
    fn name(&self) -> String {
        let full = std::any::type_name::<Self>();
        let base = full.split('<').next().unwrap_or(full);
        base.rsplit("::").next().unwrap_or(base).to_owned()
    }
}

/// The layers of a registration, outermost first.
pub(crate) type Layers = Arc<[Arc<dyn Middleware>]>;

/// A handler as the chain calls it: a registration's handler bound to the app state, or that
/// handler behind its layers. A trait rather than a `dyn Fn` so that the layered one can lend
/// its layers to the call for as long as the call runs, without cloning them into a boxed
/// future of its own.
pub(crate) trait SingleHandler: Send + Sync {
    /// Runs the handler (and the layers around it) on `delivery`.
    fn call<'a>(
        &'a self,
        delivery: &'a Delivery,
        publisher: &'a dyn Publish,
        registration: &'a str,
    ) -> BoxFuture<'a, Handled>;
}

impl<F> SingleHandler for F
where
    F: for<'a> Fn(&'a Delivery, &'a dyn Publish, &'a str) -> BoxFuture<'a, Handled> + Send + Sync,
{
    fn call<'a>(
        &'a self,
        delivery: &'a Delivery,
        publisher: &'a dyn Publish,
        registration: &'a str,
    ) -> BoxFuture<'a, Handled> {
        self(delivery, publisher, registration)
    }
}

/// `f` as a [`SingleHandler`]: gives a closure the signature the trait asks for.
#[cfg(test)]
pub(crate) fn single<F>(f: F) -> F
where
    F: for<'a> Fn(&'a Delivery, &'a dyn Publish, &'a str) -> BoxFuture<'a, Handled> + Send + Sync,
{
    f
}

pub(crate) type Single = dyn SingleHandler;
pub(crate) type Batch = dyn for<'a> Fn(&'a [&'a Delivery], &'a dyn Publish, &'a str) -> BoxFuture<'a, Vec<Handled>>
    + Send
    + Sync;

/// The rest of the chain for one delivery: the inner layers, then the handler.
pub struct Next<'a> {
    rest: &'a [Arc<dyn Middleware>],
    handler: &'a Single,
    delivery: &'a Delivery,
    publisher: &'a dyn Publish,
    registration: &'a str,
}

impl<'a> Next<'a> {
    /// Runs the inner layers and the handler; what they made of the delivery.
    pub fn run(self) -> BoxFuture<'a, Handled> {
        match self.rest.split_first() {
            Some((layer, rest)) => {
                let delivery = self.delivery;
                layer.handle(delivery, Next { rest, ..self })
            }
            None => self
                .handler
                .call(self.delivery, self.publisher, self.registration),
        }
    }

    /// The broker's publisher: what a middleware publishes goes out like the handler's outputs.
    pub fn publisher(&self) -> &'a dyn Publish {
        self.publisher
    }

    /// The name of the registration the delivery is for.
    pub fn registration(&self) -> &'a str {
        self.registration
    }
}

impl fmt::Debug for Next<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Next")
            .field("registration", &self.registration)
            .field("layers", &self.rest.len())
            .finish_non_exhaustive()
    }
}

/// The rest of the chain for one batch.
pub struct NextBatch<'a> {
    rest: &'a [Arc<dyn Middleware>],
    handler: &'a Batch,
    deliveries: &'a [&'a Delivery],
    publisher: &'a dyn Publish,
    registration: &'a str,
}

impl<'a> NextBatch<'a> {
    /// Runs the inner layers and the batch handler; one [`Handled`] per delivery.
    pub fn run(self) -> BoxFuture<'a, Vec<Handled>> {
        match self.rest.split_first() {
            Some((layer, rest)) => {
                let deliveries = self.deliveries;
                layer.handle_batch(deliveries, NextBatch { rest, ..self })
            }
            None => (self.handler)(self.deliveries, self.publisher, self.registration),
        }
    }

    /// The broker's publisher.
    pub fn publisher(&self) -> &'a dyn Publish {
        self.publisher
    }

    /// The name of the registration the batch is for.
    pub fn registration(&self) -> &'a str {
        self.registration
    }
}

impl fmt::Debug for NextBatch<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NextBatch")
            .field("registration", &self.registration)
            .field("layers", &self.rest.len())
            .finish_non_exhaustive()
    }
}

/// `handler` behind `layers`; `handler` itself when there are none.
pub(crate) fn wrap_single(handler: Arc<Single>, layers: &[Arc<dyn Middleware>]) -> Arc<Single> {
    if layers.is_empty() {
        return handler;
    }
    Arc::new(Layered {
        layers: layers.iter().cloned().collect(),
        handler,
    })
}

/// A handler behind its layers.
struct Layered {
    layers: Layers,
    handler: Arc<Single>,
}

impl SingleHandler for Layered {
    fn call<'a>(
        &'a self,
        delivery: &'a Delivery,
        publisher: &'a dyn Publish,
        registration: &'a str,
    ) -> BoxFuture<'a, Handled> {
        // The outermost layer's own future is the call's: nothing boxed besides what the
        // layers and the handler box themselves.
        Next {
            rest: &self.layers,
            handler: &*self.handler,
            delivery,
            publisher,
            registration,
        }
        .run()
    }
}

/// The same for a batch handler.
pub(crate) fn wrap_batch(handler: Arc<Batch>, layers: &[Arc<dyn Middleware>]) -> Arc<Batch> {
    if layers.is_empty() {
        return handler;
    }
    let layers: Layers = layers.iter().cloned().collect();
    Arc::new(move |deliveries, publisher, registration| {
        let layers = Arc::clone(&layers);
        let handler = Arc::clone(&handler);
        Box::pin(async move {
            NextBatch {
                rest: &layers,
                handler: &*handler,
                deliveries,
                publisher,
                registration,
            }
            .run()
            .await
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_layers_leave_the_handler_unwrapped() {
        let single: Arc<Single> = Arc::new(single(|_, _, _| {
            Box::pin(async { Handled::Outcome(crate::HandlerOutcome::ack()) })
        }));
        assert!(Arc::ptr_eq(&wrap_single(Arc::clone(&single), &[]), &single));
        let batch: Arc<Batch> = Arc::new(|_, _, _| Box::pin(async { Vec::new() }));
        assert!(Arc::ptr_eq(&wrap_batch(Arc::clone(&batch), &[]), &batch));
        let layer: Arc<dyn Middleware> = Arc::new(crate::middleware::Backoff::exponential(
            std::time::Duration::from_secs(1),
            std::time::Duration::from_secs(2),
        ));
        assert!(!Arc::ptr_eq(
            &wrap_single(Arc::clone(&single), &[layer]),
            &single
        ));
    }
}
