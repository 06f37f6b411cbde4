//! [`Endpoint`]: a registration bound to the app state, as a broker runs it: its facts, the
//! settlement [`Decision`] for what its handler said ([`Handled`]), and the [`Dispatcher`]s
//! that call the handler.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use super::builder::{HandlerKind, Registration};
use super::descriptor::Descriptor;
use super::dispatch::{Calls, Dispatcher, Slot};
use super::info::RegistrationInfo;
use super::policy::Policy;
use super::threads::Pool;
use super::typed::{Bound, limited};
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
        let timeout = self.policy.handler_timeout;
        let (calls, batch): (Arc<MakeCalls>, bool) = match self.handler {
            HandlerKind::Single(call) => {
                let bound = Arc::new(Bound {
                    state,
                    codec,
                    name: Arc::clone(&name),
                    timeout,
                    layers,
                    pool,
                });
                let make = move |publisher| Calls::One(Arc::clone(&call).slot(&bound, publisher));
                (Arc::new(make), false)
            }
            HandlerKind::Batch(call) => {
                let f: Arc<BoundBatch> =
                    Arc::new(move |d, p, n| call(d, Arc::clone(&state), p, n, codec));
                let chain = crate::middleware::wrap_batch(f, &layers);
                let name = Arc::clone(&name);
                let make = move |publisher| batch_calls(&chain, &name, timeout, publisher);
                (Arc::new(make), true)
            }
        };
        Ok(Endpoint {
            name,
            calls,
            batch,
            descriptor: self.descriptor,
            info: Arc::new(info),
            observer,
            idempotency_key: self.idempotency_key,
            codec,
        })
    }
}

/// Makes a dispatcher's calls for a broker's publisher.
type MakeCalls = dyn Fn(Arc<dyn Publish>) -> Calls + Send + Sync;
type BoundBatch = dyn for<'a> Fn(&'a [&'a Delivery], &'a dyn Publish, &'a str) -> BoxFuture<'a, Vec<Handled>>
    + Send
    + Sync;

/// A batch handler's calls (behind its layers), guarded and within `timeout`, for `publisher`.
fn batch_calls(
    chain: &Arc<BoundBatch>,
    name: &Arc<str>,
    timeout: Option<Duration>,
    publisher: Arc<dyn Publish>,
) -> Calls {
    let all = Arc::new((Arc::clone(chain), Arc::clone(name), publisher));
    Calls::Batch(Box::new(Slot::new(move |deliveries: Vec<Delivery>| {
        let all = Arc::clone(&all);
        async move {
            let (chain, name, publisher) = &*all;
            let handled = {
                let refs: Vec<&Delivery> = deliveries.iter().collect();
                let call = guard_async(chain(&refs, &**publisher, name));
                match limited(timeout, call).await {
                    Ok(Ok(handled)) => handled,
                    Ok(Err(panicked)) => vec![panicked; refs.len()],
                    Err(limit) => vec![Handled::TimedOut(limit); refs.len()],
                }
            };
            (deliveries, handled)
        }
    })))
}

/// A registration bound to the app state, as a broker runs it: its facts, the settlement
/// decision, and the [`Dispatcher`]s that run its handler.
#[derive(Clone)]
pub struct Endpoint {
    name: Arc<str>,
    descriptor: Arc<dyn Descriptor>,
    /// Shared: a broker keeps clones of it in each handler slot.
    info: Arc<RegistrationInfo>,
    calls: Arc<MakeCalls>,
    batch: bool,
    observer: Option<Arc<dyn Observer>>,
    idempotency_key: Option<Arc<crate::idempotency::KeyFn>>,
    codec: Format,
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
        self.batch
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

    /// A dispatcher for one handler slot of a broker that publishes through `publisher`.
    pub fn dispatcher(&self, publisher: Arc<dyn Publish>) -> Dispatcher {
        Dispatcher::new(self.clone(), (self.calls)(publisher))
    }

    /// [`Handled::PastCap`] when `delivery` arrived past the cap: its handler must not run.
    pub(super) fn past_cap(&self, delivery: &Delivery) -> Option<Handled> {
        settle::decide_arrival(&self.facts(delivery)).map(|_| Handled::PastCap)
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
