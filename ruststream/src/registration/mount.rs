//! What `b.include(..)` mounts ([`Mount`]): a `#[subscriber]` function, or a descriptor paired
//! with a manual handler ([`WithHandler`]).

use std::fmt;
use std::marker::PhantomData;

use serde::de::DeserializeOwned;

use super::builder::Registration;
use super::descriptor::Descriptor;
use crate::handler::{Handle, HandleBatch, Outs};

/// A descriptor with a handler, ready to mount: `CoreSubject::new("orders.shipped").handler(Notify)`.
pub struct WithHandler<D, H> {
    descriptor: D,
    handler: H,
}

impl<D, H> WithHandler<D, H> {
    /// Pairs `descriptor` with `handler`.
    pub fn new(descriptor: D, handler: H) -> Self {
        Self {
            descriptor,
            handler,
        }
    }
}

impl<D: fmt::Debug, H> fmt::Debug for WithHandler<D, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WithHandler")
            .field("descriptor", &self.descriptor)
            .field("handler", &std::any::type_name::<H>())
            .finish()
    }
}

/// A descriptor with a handler whose input is built from the whole delivery
/// ([`FromDelivery`](crate::input::FromDelivery)), ready to mount: what such a descriptor's
/// `.handler(..)` returns (`KvChanges::new("config").handler(Watcher)`). A type of its own,
/// not a [`WithHandler`]: the handler's input type then picks the one way to mount it.
pub struct WithDeliveryHandler<D, H>(WithHandler<D, H>);

impl<D, H> WithDeliveryHandler<D, H> {
    /// Pairs `descriptor` with `handler`.
    pub fn new(descriptor: D, handler: H) -> Self {
        Self(WithHandler::new(descriptor, handler))
    }
}

impl<D: fmt::Debug, H> fmt::Debug for WithDeliveryHandler<D, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Something `b.include(..)` mounts: a `#[subscriber]` function, or a descriptor with a
/// handler. `Marker` only tells the impls apart.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be mounted in an app whose state is `{S}`",
    label = "its argument is not a subscriber of this app",
    note = "mount an `async fn` marked `#[subscriber(..)]`, or a descriptor with a handler: `CoreSubject::new(\"subject\").handler(MyHandler)`",
    note = "a manual handler implements `Handle<Payload, Outs, {S}>` for this app's state `{S}`, or for any state: `impl<S: Send + Sync + 'static> Handle<Payload, (), S> for MyHandler`"
)]
pub trait Mount<S, Marker>: Sized {
    /// The registration.
    fn mount(self) -> Registration<S>;
}

/// What `#[subscriber]` implements for the value named after the function: its registration
/// in an app whose state is `S`. Every such value is a [`Mount`] through the one impl below.
///
/// The extractors' bounds sit on the generated impl of this trait, not on a `Mount` impl: when
/// one fails at `b.include(..)`, the compiler then has no `Mount` impl of the handler to show
/// as "implemented for" it, and the error stays the extractor's (see `tests/ui`).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a `#[subscriber]` handler",
    label = "its argument is not a subscriber of this app",
    note = "mount an `async fn` marked `#[subscriber(..)]`, or a descriptor with a handler: `CoreSubject::new(\"subject\").handler(MyHandler)`"
)]
pub trait SubscriberFn<S>: Sized {
    /// What the function named after the handler takes: [`SubscriberName`].
    type Name: From<SubscriberName>;

    /// The argument to call that function with.
    fn name() -> Self::Name {
        Self::Name::from(SubscriberName(()))
    }

    /// The registration.
    fn mount(self) -> Registration<S>;
}

/// The argument of the function `#[subscriber]` leaves in the value namespace under the
/// handler's name: `b.include(capture)` passes that function, and only this crate can call it.
///
/// A function, not a `static` or a unit struct, because a binding may shadow a function: a
/// parameter or `let` named like a handler elsewhere in the module stays a plain variable.
#[derive(Debug)]
pub struct SubscriberName(());

/// Marks the mount of a function: `Arg` is what it takes, [`SubscriberName`] for the function
/// `#[subscriber]` leaves under the handler's name.
///
/// Generic over the argument, rather than a bound `FnOnce(SubscriberName)`: a plain `async fn`
/// passed to `include` then fails on its value not being a subscriber, with the note below, not
/// as a function whose arguments do not match.
#[doc(hidden)]
pub struct FnMarker<Arg>(PhantomData<fn(Arg)>);

impl<S, F, Arg, H> Mount<S, FnMarker<Arg>> for F
where
    F: FnOnce(Arg) -> H,
    H: SubscriberFn<S, Name = Arg>,
{
    fn mount(self) -> Registration<S> {
        SubscriberFn::mount(self(H::name()))
    }
}

/// `T: Is<U>` holds for `U = T` only: `b.include(x)` takes `x: M` and requires `H: Mount` of
/// `H`, the same type under another name. A `Mount` bound that fails is then not tied to the
/// argument, and the compiler's error points at `include` without its two-line "required by a
/// bound introduced by this call" label (see `tests/ui`).
pub trait Is<T> {
    /// `self`, as `T`.
    fn itself(self) -> T;
}

impl<T> Is<T> for T {
    fn itself(self) -> T {
        self
    }
}

/// Marks a single-message manual handler mount.
#[doc(hidden)]
pub struct SingleMarker<In, O>(PhantomData<fn(In, O)>);
/// Marks a manual handler mount whose input is built from the whole delivery
/// ([`FromDelivery`](crate::input::FromDelivery)).
#[doc(hidden)]
pub struct DeliveryMarker<In, O>(PhantomData<fn(In, O)>);
/// Marks a batch manual handler mount.
#[doc(hidden)]
pub struct BatchMarker<In, O>(PhantomData<fn(In, O)>);

// Not recommended: a failed mount shows `Mount`'s note, not these impls' bounds.
#[diagnostic::do_not_recommend]
impl<S, D, H, In, O> Mount<S, SingleMarker<In, O>> for WithHandler<D, H>
where
    S: Send + Sync + 'static,
    D: Descriptor,
    H: Handle<In, O, S>,
    In: DeserializeOwned + Send + Sync + 'static,
    O: Outs,
{
    fn mount(self) -> Registration<S> {
        Registration::single(type_name_tail::<H>(), self.descriptor, self.handler)
    }
}

#[diagnostic::do_not_recommend]
impl<S, D, H, In, O> Mount<S, BatchMarker<In, O>> for WithHandler<D, H>
where
    S: Send + Sync + 'static,
    D: Descriptor,
    H: HandleBatch<In, O, S>,
    In: DeserializeOwned + Send + Sync + 'static,
    O: Outs,
{
    fn mount(self) -> Registration<S> {
        Registration::batch(type_name_tail::<H>(), self.descriptor, self.handler)
    }
}

#[diagnostic::do_not_recommend]
impl<S, D, H, In, O> Mount<S, DeliveryMarker<In, O>> for WithDeliveryHandler<D, H>
where
    S: Send + Sync + 'static,
    D: Descriptor,
    H: Handle<In, O, S>,
    In: crate::input::FromDelivery,
    O: Outs,
{
    fn mount(self) -> Registration<S> {
        let WithHandler {
            descriptor,
            handler,
        } = self.0;
        Registration::from_delivery(type_name_tail::<H>(), descriptor, handler)
    }
}

fn type_name_tail<T>() -> String {
    let full = std::any::type_name::<T>();
    let base = full.split('<').next().unwrap_or(full);
    base.rsplit("::").next().unwrap_or(base).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_handler_names_are_their_type_names() {
        struct Notify;
        assert_eq!(type_name_tail::<Notify>(), "Notify");
        assert_eq!(type_name_tail::<Vec<u8>>(), "Vec");
    }
}
