//! Extractors: the parameters of a handler after its payload.
//!
//! Each one reads the delivery or the app state; they run in the order written and a failing
//! one ends the delivery with the outcome its [`Rejection`] carries.

use std::fmt;

use crate::context::Context;
use crate::outcome::HandlerOutcome;

/// An extractor refused a delivery: the handler does not run, and the delivery is settled with
/// [`Rejection::outcome`].
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    outcome: HandlerOutcome,
    reason: String,
}

impl Rejection {
    /// A rejection that settles the delivery with `outcome`.
    pub fn new(outcome: HandlerOutcome, reason: impl Into<String>) -> Self {
        Self {
            outcome,
            reason: reason.into(),
        }
    }

    /// How the delivery is settled.
    pub fn outcome(&self) -> &HandlerOutcome {
        &self.outcome
    }

    /// Why the extractor refused.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// The outcome, dropping the reason.
    pub fn into_outcome(self) -> HandlerOutcome {
        self.outcome
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

/// A handler parameter built from the delivery and the app state `S`.
///
/// Implement it for your own extractors:
///
/// ```
/// use ruststream::{Context, FromContext, HandlerOutcome, Rejection};
///
/// /// The tenant a message belongs to, from its `tenant` header.
/// struct Tenant(String);
///
/// impl<S> FromContext<S> for Tenant {
///     fn from_context(ctx: &Context<'_>, _state: &S) -> Result<Self, Rejection> {
///         ctx.headers()
///             .get("tenant")
///             .map(|t| Tenant(t.to_owned()))
///             .ok_or_else(|| Rejection::new(HandlerOutcome::drop(), "no tenant header"))
///     }
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an extractor",
    label = "after the payload, a handler takes extractors: `Ctx<K>` (a per-delivery value), `State<T>` (part of the app state) or `&mut Context<'_>`; implement `FromContext` to write your own"
)]
pub trait FromContext<S>: Sized {
    /// Builds the parameter, or refuses the delivery.
    fn from_context(ctx: &Context<'_>, state: &S) -> Result<Self, Rejection>;
}

/// A per-delivery value that `Ctx<K>` reads by key.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a context key",
    label = "`Ctx<{Self}>` needs a key",
    note = "the keys are `Delivered`, `Attempt`, `Subject`, and a broker's own; implement `Key` to add one"
)]
pub trait Key: 'static {
    /// What the key gives.
    type Value: Send;
    /// Reads the value from the delivery.
    fn get(ctx: &Context<'_>) -> Result<Self::Value, Rejection>;
}

impl Context<'_> {
    /// The value of a context key, as `Ctx<K>` gives it.
    pub fn get<K: Key>(&self) -> Result<K::Value, Rejection> {
        K::get(self)
    }
}

/// A per-delivery value by key: `Ctx(delivered): Ctx<Delivered>`.
pub struct Ctx<K: Key>(pub K::Value);

impl<K: Key> fmt::Debug for Ctx<K>
where
    K::Value: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Ctx").field(&self.0).finish()
    }
}

// Not recommended: a parameter that is not an extractor is told what extractors are (in
// `FromContext`'s note), not shown this impl.
#[diagnostic::do_not_recommend]
impl<K: Key, S> FromContext<S> for Ctx<K> {
    fn from_context(ctx: &Context<'_>, _state: &S) -> Result<Self, Rejection> {
        K::get(ctx).map(Ctx)
    }
}

/// The server's delivery count: `Option<u64>`, `Some(1)` on a first JetStream delivery, `None`
/// on Core.
#[derive(Debug, Clone, Copy)]
pub enum Delivered {}

#[diagnostic::do_not_recommend]
impl Key for Delivered {
    type Value = Option<u64>;
    fn get(ctx: &Context<'_>) -> Result<Self::Value, Rejection> {
        Ok(ctx.delivered())
    }
}

/// The attempt number the cap counts, `u32`: JetStream's delivered, or on Core the copy's
/// retry-count header plus one.
#[derive(Debug, Clone, Copy)]
pub enum Attempt {}

#[diagnostic::do_not_recommend]
impl Key for Attempt {
    type Value = u32;
    fn get(ctx: &Context<'_>) -> Result<Self::Value, Rejection> {
        Ok(ctx.attempt().get())
    }
}

/// Whether this is the last attempt the registration's cap allows, `bool`: the attempt reached
/// `max_attempts`, so a retry now goes to the dead-letter subject (or ends) instead of bringing
/// the message back. `false` without a cap.
#[derive(Debug, Clone, Copy)]
pub enum LastAttempt {}

#[diagnostic::do_not_recommend]
impl Key for LastAttempt {
    type Value = bool;
    fn get(ctx: &Context<'_>) -> Result<Self::Value, Rejection> {
        Ok(ctx.is_last_attempt())
    }
}

/// The subject the message actually arrived on, `String` (for a wildcard, the concrete one).
#[derive(Debug, Clone, Copy)]
pub enum Subject {}

#[diagnostic::do_not_recommend]
impl Key for Subject {
    type Value = String;
    fn get(ctx: &Context<'_>) -> Result<Self::Value, Rejection> {
        Ok(ctx.subject().to_owned())
    }
}

/// The headers as they arrived, `Headers`.
#[derive(Debug, Clone, Copy)]
pub enum MessageHeaders {}

#[diagnostic::do_not_recommend]
impl Key for MessageHeaders {
    type Value = crate::Headers;
    fn get(ctx: &Context<'_>) -> Result<Self::Value, Rejection> {
        Ok(ctx.headers().clone())
    }
}

/// A part of the app state, taken through [`FromRef`]: `State(bank): State<Arc<Bank>>`.
#[derive(Debug, Clone, Copy, Default)]
pub struct State<T>(pub T);

// Not recommended: a parameter that is not an extractor is told what extractors are (in
// `FromContext`'s label), not shown this impl.
#[diagnostic::do_not_recommend]
impl<T: FromRef<S>, S> FromContext<S> for State<T> {
    fn from_context(_ctx: &Context<'_>, state: &S) -> Result<Self, Rejection> {
        Ok(State(T::from_ref(state)))
    }
}

/// Takes a part of the state `T`. `#[derive(FromRef)]` on the state struct implements it for
/// every field.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not part of the app state `{T}`",
    label = "`State<{Self}>` takes a field of this type from the state `.on_startup(..)` builds (`()` without one): add the field, with `#[derive(Clone, FromRef)]` on the state"
)]
pub trait FromRef<T> {
    /// The part, cloned out of the state.
    fn from_ref(input: &T) -> Self;
}

impl<T: Clone> FromRef<T> for T {
    fn from_ref(input: &T) -> Self {
        input.clone()
    }
}
