//! [`Dispatcher`]: a registration's handler as a broker runs it. Made once per handler slot
//! with the handler's types erased inside; the broker moves each delivery in and takes it back
//! with what the handler said and the settlement [`Decision`]. A single handler's future is
//! made in place for each delivery, in a slot allocated once: nothing is boxed per delivery
//! besides what middleware boxes.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use futures::future::BoxFuture;

use super::endpoint::Endpoint;
use crate::delivery::Delivery;
use crate::handled::Handled;
use crate::settle::Decision;

/// A registration's handler, bound to the app state and a broker's publisher, for one handler
/// slot: one delivery (or one batch) at a time. A broker with `n` slots makes `n` of them
/// ([`Endpoint::dispatcher`]).
pub struct Dispatcher {
    endpoint: Endpoint,
    calls: Calls,
}

/// How a dispatcher calls its handler.
pub(super) enum Calls {
    /// A single handler: its future made in place for each delivery.
    One(Box<dyn OneCall>),
    /// A batch handler: one boxed future per batch.
    Batch(Arc<BatchCall>),
}

/// A batch handler's call on the deliveries it owns: handed back with one [`Handled`] each.
pub(super) type BatchCall =
    dyn Fn(Vec<Delivery>) -> BoxFuture<'static, (Vec<Delivery>, Vec<Handled>)> + Send + Sync;

impl fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dispatcher")
            .field("registration", &self.endpoint.name())
            .finish_non_exhaustive()
    }
}

impl Dispatcher {
    pub(super) fn new(endpoint: Endpoint, calls: Calls) -> Self {
        Self { endpoint, calls }
    }

    /// The registration this dispatcher runs.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Runs the handler on `delivery` (its panics caught, within the registration's
    /// `handler_timeout`; not at all past the cap) and decides its settlement; the observer is
    /// told. The delivery comes back for the settlement.
    pub async fn one(&mut self, delivery: Delivery) -> (Delivery, (Handled, Decision)) {
        let (delivery, handled) = match self.endpoint.past_cap(&delivery) {
            Some(past_cap) => (delivery, past_cap),
            None => match &mut self.calls {
                Calls::One(call) => {
                    call.start(delivery);
                    std::future::poll_fn(|cx| call.poll_done(cx)).await
                }
                Calls::Batch(call) => {
                    let (mut back, mut handled) = call(vec![delivery]).await;
                    let delivery = back.pop().expect("a batch call hands its deliveries back");
                    let handled = handled
                        .pop()
                        .unwrap_or_else(|| Handled::NoOutcome("empty batch".into()));
                    (delivery, handled)
                }
            },
        };
        let concluded = self.endpoint.conclude(&delivery, handled);
        (delivery, concluded)
    }

    /// Runs the handler on `deliveries` (a batch handler once, a single handler on each in
    /// turn) and decides each one's settlement: the deliveries back, in order, with what each
    /// came to. Deliveries past the cap do not reach the handler.
    pub async fn batch(
        &mut self,
        deliveries: Vec<Delivery>,
    ) -> (Vec<Delivery>, Vec<(Handled, Decision)>) {
        let mut slots: Vec<Option<(Delivery, Handled)>> = Vec::with_capacity(deliveries.len());
        let mut run = Vec::with_capacity(deliveries.len());
        for delivery in deliveries {
            match self.endpoint.past_cap(&delivery) {
                Some(past_cap) => slots.push(Some((delivery, past_cap))),
                None => {
                    slots.push(None);
                    run.push(delivery);
                }
            }
        }
        let mut ran = match &mut self.calls {
            _ if run.is_empty() => Vec::new(),
            Calls::Batch(call) => {
                let (back, handled) = call(run).await;
                let mut handled = handled.into_iter();
                back.into_iter()
                    .map(|d| {
                        let h = handled
                            .next()
                            .unwrap_or_else(|| Handled::NoOutcome("not handled".into()));
                        (d, h)
                    })
                    .collect()
            }
            Calls::One(call) => {
                let mut out = Vec::with_capacity(run.len());
                for delivery in run {
                    call.start(delivery);
                    out.push(std::future::poll_fn(|cx| call.poll_done(cx)).await);
                }
                out
            }
        }
        .into_iter();
        slots
            .into_iter()
            .filter_map(|slot| slot.or_else(|| ran.next()))
            .map(|(delivery, handled)| {
                let concluded = self.endpoint.conclude(&delivery, handled);
                (delivery, concluded)
            })
            .unzip()
    }
}

/// A single handler's call, one delivery at a time, its future kept in place.
pub(super) trait OneCall: Send {
    /// Makes the handler's future for `delivery` (replacing one that did not finish).
    fn start(&mut self, delivery: Delivery);

    /// Polls the handler's future: the delivery back, with what the handler said. Pending when
    /// none was started.
    fn poll_done(&mut self, cx: &mut Context<'_>) -> Poll<(Delivery, Handled)>;
}

/// The future of the call running, if any, allocated once.
pub(super) struct Slot<F, Fut> {
    make: F,
    running: Pin<Box<Option<Fut>>>,
}

impl<F, Fut> Slot<F, Fut> {
    pub(super) fn new(make: F) -> Self {
        Self {
            make,
            running: Box::pin(None),
        }
    }
}

impl<F, Fut> OneCall for Slot<F, Fut>
where
    F: Fn(Delivery) -> Fut + Send,
    Fut: Future<Output = (Delivery, Handled)> + Send,
{
    fn start(&mut self, delivery: Delivery) {
        self.running.set(Some((self.make)(delivery)));
    }

    fn poll_done(&mut self, cx: &mut Context<'_>) -> Poll<(Delivery, Handled)> {
        let Some(running) = self.running.as_mut().as_pin_mut() else {
            return Poll::Pending;
        };
        let done = ready!(running.poll(cx));
        // Dropped now (what the handler held), not at the next delivery.
        self.running.set(None);
        Poll::Ready(done)
    }
}
