//! [`Dispatcher`]: a registration's handler as a broker runs it. Made once per handler slot
//! with the handler's types erased inside; the broker moves each delivery in and takes it back
//! with what the handler said and the settlement [`Decision`]. The handler's future is made in
//! place for each delivery (or batch), in a slot allocated once: nothing is boxed per delivery
//! besides what middleware boxes.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

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

/// How a dispatcher calls its handler: either way, the call's future is made in place for
/// each unit, in a slot allocated once.
pub(super) enum Calls {
    /// A single handler, one delivery at a time.
    One(Box<dyn OneCall>),
    /// A batch handler, one batch at a time.
    Batch(Box<dyn BatchCall>),
}

/// A single handler's call: the delivery back, with what the handler said.
pub(super) trait OneCall: InPlace<Delivery, (Delivery, Handled)> {}
impl<T: InPlace<Delivery, (Delivery, Handled)>> OneCall for T {}

/// A batch handler's call: the deliveries back, with what the handler said of each.
pub(super) trait BatchCall: InPlace<Vec<Delivery>, (Vec<Delivery>, Vec<Handled>)> {}
impl<T: InPlace<Vec<Delivery>, (Vec<Delivery>, Vec<Handled>)>> BatchCall for T {}

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
    ///
    /// Not cancel-safe: a call dropped before it resolves leaves the handler's future (and the
    /// delivery) in the slot until the next call replaces it. Drop the dispatcher after such a
    /// cancel, as the NATS broker does.
    pub async fn one(&mut self, delivery: Delivery) -> (Delivery, (Handled, Decision)) {
        let (delivery, handled) = match self.endpoint.past_cap(&delivery) {
            Some(past_cap) => (delivery, past_cap),
            None => match &mut self.calls {
                Calls::One(call) => {
                    call.start(delivery);
                    std::future::poll_fn(|cx| call.poll_done(cx)).await
                }
                Calls::Batch(call) => {
                    call.start(vec![delivery]);
                    let (mut back, mut handled) =
                        std::future::poll_fn(|cx| call.poll_done(cx)).await;
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
                call.start(run);
                let (back, handled) = std::future::poll_fn(|cx| call.poll_done(cx)).await;
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

/// A handler's call on one unit at a time, its future kept in place.
pub(super) trait InPlace<In, Out>: Send {
    /// Makes the handler's future for `unit` (replacing one that did not finish).
    fn start(&mut self, unit: In);

    /// Polls the handler's future: the unit back, with what the handler said. Pending when
    /// none was started.
    fn poll_done(&mut self, cx: &mut Context<'_>) -> Poll<Out>;
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

impl<In, F, Fut> InPlace<In, Fut::Output> for Slot<F, Fut>
where
    F: Fn(In) -> Fut + Send,
    Fut: Future + Send,
{
    fn start(&mut self, unit: In) {
        self.running.set(Some((self.make)(unit)));
    }

    fn poll_done(&mut self, cx: &mut Context<'_>) -> Poll<Fut::Output> {
        let Some(running) = self.running.as_mut().as_pin_mut() else {
            return Poll::Pending;
        };
        let done = ready!(running.poll(cx));
        // Dropped now (what the handler held), not at the next delivery.
        self.running.set(None);
        Poll::Ready(done)
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::num::NonZeroU32;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use bytes::Bytes;
    use futures::future::BoxFuture;

    use super::Dispatcher;
    use crate::context::Context;
    use crate::delivery::{Delivery, OutboundMessage};
    use crate::error::PublishError;
    use crate::handled::Handled;
    use crate::handler::Handle;
    use crate::outcome::HandlerOutcome;
    use crate::publish::Publish;
    use crate::registration::{Descriptor, DescriptorInfo, Registration};
    use crate::settle::{AckKind, DeliveryModel, Settle};

    /// Counts its calls; retries a payload of `retry`, acknowledges the rest.
    struct Counting(Arc<AtomicU32>);

    impl Handle<Bytes> for Counting {
        async fn handle(
            &self,
            input: &Bytes,
            _outs: &(),
            _ctx: &mut Context<'_>,
        ) -> Result<(), HandlerOutcome> {
            self.0.fetch_add(1, Ordering::Relaxed);
            match &input[..] {
                b"retry" => Err(HandlerOutcome::retry()),
                _ => Ok(()),
            }
        }
    }

    /// A manual handler that panics before it returns its future.
    struct Eager;

    impl Handle<Bytes> for Eager {
        #[allow(clippy::manual_async_fn)]
        fn handle(
            &self,
            _input: &Bytes,
            _outs: &(),
            _ctx: &mut Context<'_>,
        ) -> impl Future<Output = Result<(), HandlerOutcome>> + Send {
            panic!("no future");
            #[allow(unreachable_code)]
            async {
                Ok(())
            }
        }
    }

    struct Nowhere;

    /// A stream consumer: the model where a delivery can arrive past the cap.
    #[derive(Debug)]
    struct Stream;

    impl Descriptor for Stream {
        fn info(&self) -> DescriptorInfo {
            DescriptorInfo::new(DeliveryModel::JetStream, "orders")
        }
    }

    impl Publish for Nowhere {
        fn publish(&self, _message: OutboundMessage) -> BoxFuture<'_, Result<(), PublishError>> {
            Box::pin(async { Ok(()) })
        }
    }

    /// A dispatcher of a JetStream registration capped at two attempts, and its handler's
    /// calls.
    fn dispatcher() -> (Dispatcher, Arc<AtomicU32>) {
        let calls = Arc::new(AtomicU32::new(0));
        let mut registration: Registration<()> =
            Registration::raw("counting", Stream, Counting(Arc::clone(&calls)));
        registration.max_attempts(NonZeroU32::new(2).expect("2"));
        let endpoint = registration.bind(Arc::new(()), None).expect("binds");
        (endpoint.dispatcher(Arc::new(Nowhere)), calls)
    }

    fn delivery(payload: &'static str, attempt: u32) -> Delivery {
        Delivery::new("orders", Bytes::from_static(payload.as_bytes()))
            .with_attempt(NonZeroU32::new(attempt).expect("an attempt"))
            .with_max_attempts(NonZeroU32::new(2))
            .with_delivered(Some(u64::from(attempt)))
    }

    #[tokio::test]
    async fn each_delivery_comes_back_with_what_its_handler_said_through_one_slot() {
        let (mut dispatcher, calls) = dispatcher();
        for (payload, outcome) in [
            ("a", HandlerOutcome::ack()),
            ("retry", HandlerOutcome::retry()),
            ("b", HandlerOutcome::ack()),
        ] {
            let (back, (handled, decision)) = dispatcher.one(delivery(payload, 1)).await;
            assert_eq!(back.payload(), payload.as_bytes(), "the same delivery back");
            assert_eq!(handled, Handled::Outcome(outcome));
            assert!(!decision.dead_letter);
        }
        assert_eq!(calls.load(Ordering::Relaxed), 3);
    }

    #[tokio::test]
    async fn a_delivery_past_the_cap_does_not_reach_the_handler() {
        let (mut dispatcher, calls) = dispatcher();
        let (_, (handled, decision)) = dispatcher.one(delivery("a", 3)).await;
        assert_eq!(handled, Handled::PastCap);
        assert_eq!(decision.settle, Settle::Send(AckKind::Term));
        assert_eq!(calls.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn a_unit_keeps_its_order_around_a_delivery_past_the_cap() {
        let (mut dispatcher, calls) = dispatcher();
        let unit = vec![delivery("a", 1), delivery("b", 3), delivery("retry", 2)];
        let (back, decided) = dispatcher.batch(unit).await;
        let payloads: Vec<&[u8]> = back.iter().map(|d| &d.payload()[..]).collect();
        assert_eq!(payloads, [&b"a"[..], b"b", b"retry"]);
        let handled: Vec<&Handled> = decided.iter().map(|(h, _)| h).collect();
        assert_eq!(
            handled,
            [
                &Handled::Outcome(HandlerOutcome::ack()),
                &Handled::PastCap,
                &Handled::Outcome(HandlerOutcome::retry()),
            ]
        );
        assert_eq!(decided[0].1.settle, Settle::Send(AckKind::Ack));
        assert_eq!(
            calls.load(Ordering::Relaxed),
            2,
            "the one past the cap did not run"
        );
    }

    #[tokio::test]
    async fn a_panic_before_the_handlers_future_is_a_handler_panic() {
        let endpoint = Registration::<()>::raw("eager", Stream, Eager)
            .bind(Arc::new(()), None)
            .expect("binds");
        let mut dispatcher = endpoint.dispatcher(Arc::new(Nowhere));
        let (_, (handled, decision)) = dispatcher.one(delivery("a", 1)).await;
        assert!(matches!(handled, Handled::Panicked(_)), "{handled:?}");
        assert_eq!(
            decision.settle,
            Settle::Send(AckKind::Nak),
            "retried, as on_panic says"
        );
    }
}
