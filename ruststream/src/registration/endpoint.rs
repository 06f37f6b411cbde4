//! [`Endpoint`]: a registration bound to the app state, as a broker runs it. A broker hands it
//! deliveries and gets back what the handler said ([`Handled`]) and the settlement
//! [`Decision`] to execute.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use super::builder::{HandlerKind, Registration};
use super::descriptor::Descriptor;
use super::info::RegistrationInfo;
use super::inline::{Bound, InlineHandler, limited};
use super::policy::Policy;
use super::threads::Pool;
use crate::codec::Format;
use crate::delivery::Delivery;
use crate::handled::Handled;
use crate::observer::{Handling, Observer};
use crate::outcome::HandlerOutcome;
use crate::panic::{guard_async, guard_user_code};
use crate::publish::Publish;
use crate::settle::{self, Decision, Facts};

impl<S: Send + Sync + 'static> Registration<S> {
    pub(crate) fn bind(
        self,
        state: Arc<S>,
        observer: Option<Arc<dyn Observer>>,
    ) -> Result<Endpoint, crate::Error> {
        let info = self.info();
        let pool = match self.policy.threads {
            Some(threads) => Some(Arc::new(Pool::start(&self.name, threads)?)),
            None => None,
        };
        let codec = self.policy.codec.unwrap_or_default();
        let layers = self.layers.all();
        let name: Arc<str> = Arc::from(self.name);
        let mut inline: Option<Arc<BindInline>> = None;
        let handler = match self.handler {
            HandlerKind::Single(call) => {
                if layers.is_empty() && pool.is_none() {
                    // Without layers or threads a broker may call the handler with its type
                    // known throughout: see `inline_handler`.
                    let (call, state, name) =
                        (Arc::clone(&call), Arc::clone(&state), Arc::clone(&name));
                    let timeout = self.policy.handler_timeout;
                    inline = Some(Arc::new(move |publisher| {
                        Arc::clone(&call).inline(Bound {
                            state: Arc::clone(&state),
                            codec,
                            name: Arc::clone(&name),
                            timeout,
                            publisher,
                        })
                    }));
                }
                BoundHandler::Single(crate::middleware::wrap_single(
                    call.bind(state, codec),
                    &layers,
                ))
            }
            HandlerKind::Batch(call) => {
                let f: Arc<BoundBatch> =
                    Arc::new(move |d, p, n| call(d, Arc::clone(&state), p, n, codec));
                BoundHandler::Batch(crate::middleware::wrap_batch(f, &layers))
            }
        };
        Ok(Endpoint {
            name,
            inline,
            descriptor: self.descriptor,
            info: Arc::new(info),
            handler,
            observer,
            idempotency_key: self.idempotency_key,
            codec,
            pool,
        })
    }
}

/// Makes a registration's [`InlineHandler`] for a broker's publisher.
type BindInline = dyn Fn(Arc<dyn Publish>) -> InlineHandler + Send + Sync;
type BoundBatch = dyn for<'a> Fn(&'a [&'a Delivery], &'a dyn Publish, &'a str) -> BoxFuture<'a, Vec<Handled>>
    + Send
    + Sync;

#[derive(Clone)]
enum BoundHandler {
    Single(Arc<crate::middleware::Single>),
    Batch(Arc<BoundBatch>),
}

/// A registration bound to the app state, as a broker runs it: hand it deliveries, get back
/// what the handler said and the settlement decision to execute.
#[derive(Clone)]
pub struct Endpoint {
    name: Arc<str>,
    descriptor: Arc<dyn Descriptor>,
    /// Shared: an endpoint is cloned for every delivery it handles.
    info: Arc<RegistrationInfo>,
    handler: BoundHandler,
    /// How to call the handler with its type known; `None` behind middleware and for batches.
    inline: Option<Arc<BindInline>>,
    observer: Option<Arc<dyn Observer>>,
    idempotency_key: Option<Arc<crate::idempotency::KeyFn>>,
    codec: Format,
    /// The threads of `.threads(n)`, which the handler's calls run on.
    pool: Option<Arc<Pool>>,
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// The registration's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The registration's name, shared (what a log context keeps without copying it).
    pub fn name_arc(&self) -> &Arc<str> {
        &self.name
    }

    /// The descriptor, for its broker to recognise.
    pub fn descriptor(&self) -> &dyn Descriptor {
        &*self.descriptor
    }

    /// The registration's facts.
    pub fn info(&self) -> &RegistrationInfo {
        &self.info
    }

    /// The mount site's policy.
    pub fn policy(&self) -> &Policy {
        &self.info.policy
    }

    /// Whether the handler takes batches.
    pub fn is_batch(&self) -> bool {
        matches!(self.handler, BoundHandler::Batch(_))
    }

    /// The idempotency key of `delivery`: `None` when the registration is not idempotent,
    /// `Some(Err(why))` when the delivery has none (its handler then runs unguarded).
    pub fn idempotency_key(&self, delivery: &Delivery) -> Option<Result<String, String>> {
        self.idempotency_key
            .as_ref()
            .map(|key| key(delivery, self.codec))
    }

    /// The facts the settlement decision needs about `delivery`.
    pub fn facts(&self, delivery: &Delivery) -> Facts {
        Facts {
            model: self.info.descriptor.model,
            attempt: delivery.attempt(),
            max_attempts: self.info.policy.max_attempts,
            dead_letter: self.info.policy.dead_letter.is_some(),
            copy_target: self.info.copy_target().is_some(),
        }
    }

    /// What must happen to `delivery` after its handler said `handled`: the pure decision.
    pub fn decide(&self, delivery: &Delivery, handled: &Handled) -> Decision {
        let facts = self.facts(delivery);
        match handled {
            Handled::Outcome(outcome) => settle::decide(outcome, &facts),
            Handled::Panicked(_) => self.info.policy.on_panic.decide(&facts),
            Handled::Failed(_) => self.info.policy.on_error.decide(&facts),
            Handled::TimedOut(_) => settle::decide(&HandlerOutcome::Retry, &facts),
            Handled::Undecodable(_) => self.info.policy.undecodable.decide(&facts),
            Handled::Unpublishable(_) => settle::decide_unpublishable(&facts),
            Handled::NoOutcome(_) => Decision {
                dead_letter: false,
                copy: None,
                settle: settle::Settle::Nothing,
            },
            Handled::PastCap => settle::decide_arrival(&facts).unwrap_or(Decision {
                dead_letter: false,
                copy: None,
                settle: settle::Settle::Nothing,
            }),
        }
    }

    /// Runs `handling` within the registration's `handler_timeout`; `Err(limit)` when it ran
    /// past it (and was cancelled).
    async fn limited<T>(&self, handling: impl Future<Output = T>) -> Result<T, Duration> {
        limited(self.info.policy.handler_timeout, handling).await
    }

    /// The handler, for a broker that runs one delivery of this registration at a time and
    /// can hand it over (moved) for the call: made once, it calls the handler without a boxed
    /// future per delivery ([`start_inline`](Self::start_inline) and
    /// [`finish_inline`](Self::finish_inline)). `None` for a batch handler and behind
    /// middleware (use [`dispatch`](Self::dispatch)).
    pub fn inline_handler(&self, publisher: Arc<dyn Publish>) -> Option<InlineHandler> {
        self.inline.as_ref().map(|bind| bind(publisher))
    }

    /// [`dispatch`](Self::dispatch) through `handler` (this endpoint's
    /// [`inline_handler`](Self::inline_handler)), first half: `delivery` moved into the
    /// handler's call, made here and run by [`finish_inline`](Self::finish_inline) (a delivery
    /// past the cap is kept, not run, as `dispatch` does).
    ///
    /// A broker's, not an application's. The contract: each `start_inline` is followed by one
    /// [`finish_inline`](Self::finish_inline) on the same handler, awaited to the end, before
    /// the next `start_inline`. A second start before the finish drops the first delivery
    /// unhandled; a finish without a start never resolves. (Not a token the finish consumes: a
    /// handler moved through it costs the Core handler task about 130 instructions a message
    /// by callgrind.)
    ///
    /// This pair replaced `dispatch_inline`, `InlineHandler::delivery` and
    /// `InlineHandler::take`, which are gone from the public API.
    #[doc(hidden)]
    pub fn start_inline(&self, handler: &mut InlineHandler, delivery: Delivery) {
        match self.past_cap(&delivery) {
            Some(past_cap) => handler.keep(delivery, past_cap),
            None => handler.start(delivery),
        }
    }

    /// Runs the call [`start_inline`](Self::start_inline) made: the delivery back, with what
    /// the handler said and the decision, decided and observed as
    /// [`dispatch`](Self::dispatch) does. Never resolves when no call was started (see
    /// `start_inline`'s contract).
    #[doc(hidden)]
    pub async fn finish_inline(
        &self,
        handler: &mut InlineHandler,
    ) -> (Delivery, (Handled, Decision)) {
        let (delivery, handled) = std::future::poll_fn(|cx| handler.poll_done(cx)).await;
        let concluded = self.conclude(&delivery, handled);
        (delivery, concluded)
    }

    /// [`Handled::PastCap`] when `delivery` arrived past the cap: its handler must not run.
    fn past_cap(&self, delivery: &Delivery) -> Option<Handled> {
        settle::decide_arrival(&self.facts(delivery)).map(|_| Handled::PastCap)
    }

    /// Runs the handler on one delivery (panics caught) and decides its settlement.
    ///
    /// # Panics
    ///
    /// Never; a batch endpoint handed one delivery runs it as a batch of one.
    pub async fn dispatch(
        &self,
        delivery: &Delivery,
        publisher: &dyn Publish,
    ) -> (Handled, Decision) {
        let handled = match &self.handler {
            _ if let Some(past_cap) = self.past_cap(delivery) => past_cap,
            // The middleware around the handler is guarded as the handler is.
            BoundHandler::Single(call) => {
                let called = match self.on_threads(call, delivery, publisher) {
                    Some(pooled) => self.limited(pooled).await,
                    None => {
                        let call = guard_async(call.call(delivery, publisher, &self.name));
                        self.limited(call).await.map(|r| r.unwrap_or_else(|h| h))
                    }
                };
                called.unwrap_or_else(Handled::TimedOut)
            }
            BoundHandler::Batch(call) => {
                let one = [delivery];
                match self
                    .limited(guard_async(call(&one, publisher, &self.name)))
                    .await
                {
                    Ok(Ok(mut handled)) => handled
                        .pop()
                        .unwrap_or_else(|| Handled::NoOutcome("empty batch".into())),
                    Ok(Err(panicked)) => panicked,
                    Err(limit) => Handled::TimedOut(limit),
                }
            }
        };
        self.conclude(delivery, handled)
    }

    /// The call of a registration with threads, made to run there: it owns a copy of
    /// `delivery` and a handle on `publisher`, guarded as a call in place is. `None` without
    /// threads, or when the broker's publisher cannot be shared (the call then runs in place).
    fn on_threads(
        &self,
        call: &Arc<crate::middleware::Single>,
        delivery: &Delivery,
        publisher: &dyn Publish,
    ) -> Option<BoxFuture<'static, Handled>> {
        let pool = Arc::clone(self.pool.as_ref()?);
        let publisher = publisher.to_shared()?;
        let (call, name) = (Arc::clone(call), Arc::clone(&self.name));
        let delivery = delivery.duplicate();
        Some(Box::pin(async move {
            let call = async move {
                let called = guard_async(call.call(&delivery, &*publisher, &name)).await;
                called.unwrap_or_else(|panicked| panicked)
            };
            pool.run(call).await
        }))
    }

    /// Runs a batch handler on `deliveries` and decides each one's settlement.
    pub async fn dispatch_batch(
        &self,
        deliveries: &[&Delivery],
        publisher: &dyn Publish,
    ) -> Vec<(Handled, Decision)> {
        // Deliveries past the cap do not reach the handler.
        let past: Vec<Option<Handled>> = deliveries.iter().map(|d| self.past_cap(d)).collect();
        let run: Vec<&Delivery> = deliveries
            .iter()
            .zip(&past)
            .filter(|(_, past)| past.is_none())
            .map(|(d, _)| *d)
            .collect();
        let mut ran = match &self.handler {
            _ if run.is_empty() => Vec::new(),
            BoundHandler::Batch(call) => {
                match self
                    .limited(guard_async(call(&run, publisher, &self.name)))
                    .await
                {
                    Ok(Ok(handled)) => handled,
                    Ok(Err(panicked)) => vec![panicked; run.len()],
                    Err(limit) => vec![Handled::TimedOut(limit); run.len()],
                }
            }
            BoundHandler::Single(call) => {
                let mut out = Vec::with_capacity(run.len());
                for d in &run {
                    out.push(
                        match self
                            .limited(guard_async(call.call(d, publisher, &self.name)))
                            .await
                        {
                            Ok(Ok(handled) | Err(handled)) => handled,
                            Err(limit) => Handled::TimedOut(limit),
                        },
                    );
                }
                out
            }
        }
        .into_iter();
        let handled: Vec<Handled> = past
            .into_iter()
            .map(|past| {
                past.unwrap_or_else(|| {
                    ran.next()
                        .unwrap_or_else(|| Handled::NoOutcome("not handled".into()))
                })
            })
            .collect();
        deliveries
            .iter()
            .zip(handled)
            .map(|(d, h)| self.conclude(d, h))
            .collect()
    }

    /// What `delivery` comes to after its handler, or other user code the runtime ran for it
    /// (a lane key, an idempotency key, caught by the guard of `panic.rs`), said
    /// `handled`: the decision, the observer told. An observer that panics makes it a handler
    /// panic, decided as such (the observer is not told again).
    pub fn conclude(&self, delivery: &Delivery, handled: Handled) -> (Handled, Decision) {
        let decision = self.decide(delivery, &handled);
        let Some(observer) = &self.observer else {
            return (handled, decision);
        };
        let told = guard_user_code("the observer", || {
            observer.handled(&Handling {
                registration: &self.name,
                delivery,
                handled: &handled,
                decision: &decision,
            });
        });
        match told {
            Ok(()) => (handled, decision),
            Err(panicked) => {
                let decision = self.decide(delivery, &panicked);
                (panicked, decision)
            }
        }
    }
}
