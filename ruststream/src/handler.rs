//! Handlers: the manual [`Handle`] trait that `#[subscriber]` also implements, what a handler
//! publishes ([`Outs`], [`Publisher`]), and batches.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;

use crate::context::Context;
use crate::delivery::Delivery;
use crate::error::PublishError;
use crate::outcome::HandlerOutcome;
use crate::outgoing::Outgoing;

/// A handler for one message of type `In`, written by hand.
///
/// `#[subscriber]` writes this impl for an `async fn`; writing it yourself reaches the same
/// runtime. `Outs` is what the handler publishes (`()` for nothing, [`Publisher<T>`] for an
/// [`Outgoing`] type, or a tuple of them); `S` is the app state it reads through
/// [`Context::state`]. Returning `Ok(())` acknowledges the message.
///
/// ```
/// use ruststream::{Context, Handle, HandlerOutcome};
///
/// struct Shipped {
///     id: u64,
/// }
///
/// struct Notify;
///
/// impl Handle<Shipped> for Notify {
///     async fn handle(
///         &self,
///         order: &Shipped,
///         _outs: &(),
///         _ctx: &mut Context<'_>,
///     ) -> Result<(), HandlerOutcome> {
///         if order.id == 0 {
///             return Err(HandlerOutcome::drop());
///         }
///         Ok(())
///     }
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` does not handle `{In}` with outputs `{Outs}` and state `{S}`",
    label = "not a handler for this registration",
    note = "implement `Handle<{In}, {Outs}, {S}>` for it, or mark an `async fn` with `#[subscriber(..)]`"
)]
pub trait Handle<In: ?Sized, Outs = (), S = ()>: Send + Sync + 'static {
    /// Handles one message; `Ok(())` acknowledges it, `Err(outcome)` settles it with `outcome`.
    fn handle(
        &self,
        input: &In,
        outs: &Outs,
        ctx: &mut Context<'_>,
    ) -> impl Future<Output = Result<(), HandlerOutcome>> + Send;

    /// What the runtime calls: [`handle`](Self::handle), handed the app state as its type, so
    /// an implementation that reads the state (as `#[subscriber]`'s may) need not look it up
    /// in the context by type on every delivery. The default ignores `state` and calls
    /// `handle`; a manual handler has no reason to override it.
    #[doc(hidden)]
    fn handle_with_state(
        &self,
        input: &In,
        outs: &Outs,
        state: &S,
        ctx: &mut Context<'_>,
    ) -> impl Future<Output = Result<(), HandlerOutcome>> + Send {
        let _ = state;
        self.handle(input, outs, ctx)
    }
}

/// What a batch handler says: one outcome for the whole batch, or one per message.
#[derive(Debug, Clone, PartialEq)]
pub enum BatchOutcome {
    /// Every message of the batch is settled with this outcome.
    All(HandlerOutcome),
    /// Message `i` is settled with outcome `i`; the lengths must match.
    Each(Vec<HandlerOutcome>),
}

impl From<HandlerOutcome> for BatchOutcome {
    fn from(value: HandlerOutcome) -> Self {
        Self::All(value)
    }
}

impl From<Vec<HandlerOutcome>> for BatchOutcome {
    fn from(value: Vec<HandlerOutcome>) -> Self {
        Self::Each(value)
    }
}

/// A batch as its handler sees it: the deliveries, in the order of the payloads.
pub struct BatchContext<'a> {
    deliveries: Vec<&'a Delivery>,
    state: &'a (dyn std::any::Any + Send + Sync),
    publisher: &'a dyn crate::Publish,
    registration: &'a str,
    format: crate::codec::Format,
    /// Each message's output count, shared by every context handed out for it: the ids of
    /// stored outputs stay distinct.
    outputs: std::sync::Arc<[std::sync::atomic::AtomicU32]>,
}

impl<'a> BatchContext<'a> {
    /// A batch context over `deliveries`.
    pub fn new(
        deliveries: Vec<&'a Delivery>,
        state: &'a (dyn std::any::Any + Send + Sync),
        publisher: &'a dyn crate::Publish,
        registration: &'a str,
    ) -> Self {
        let outputs = deliveries
            .iter()
            .map(|_| std::sync::atomic::AtomicU32::new(0))
            .collect();
        Self {
            deliveries,
            state,
            publisher,
            registration,
            format: crate::codec::Format::Json,
            outputs,
        }
    }

    /// The same batch context, its messages' contexts publishing in `format`.
    pub fn with_format(mut self, format: crate::codec::Format) -> Self {
        self.format = format;
        self
    }

    /// How many messages the batch holds.
    pub fn len(&self) -> usize {
        self.deliveries.len()
    }

    /// Whether the batch is empty (never, when the runtime calls a handler).
    pub fn is_empty(&self) -> bool {
        self.deliveries.is_empty()
    }

    /// The context of message `index`.
    pub fn context(&self, index: usize) -> Option<Context<'a>> {
        let delivery = self.deliveries.get(index)?;
        Some(
            Context::for_batch(
                delivery,
                self.state,
                self.publisher,
                self.registration,
                std::sync::Arc::clone(&self.outputs),
                index,
            )
            .with_format(self.format),
        )
    }

    /// The app state, when it is of type `S`.
    pub fn state<S: 'static>(&self) -> Option<&'a S> {
        self.state.downcast_ref()
    }
}

impl fmt::Debug for BatchContext<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchContext")
            .field("registration", &self.registration)
            .field("len", &self.deliveries.len())
            .finish_non_exhaustive()
    }
}

/// A handler for batches of `In`: fetched together from a JetStream consumer, or gathered in the
/// client from a Core subscription.
#[diagnostic::on_unimplemented(
    message = "`{Self}` does not handle batches of `{In}`",
    note = "implement `HandleBatch<{In}, {Outs}, {S}>`, or mark an `async fn` taking `&[{In}]` with `#[subscriber(..)]`"
)]
pub trait HandleBatch<In, Outs = (), S = ()>: Send + Sync + 'static {
    /// Handles the batch.
    fn handle_batch(
        &self,
        input: &[In],
        outs: &Outs,
        ctx: &mut BatchContext<'_>,
    ) -> impl Future<Output = BatchOutcome> + Send;

    /// What the runtime calls: [`handle_batch`](Self::handle_batch), handed the app state as
    /// its type (see [`Handle::handle_with_state`]). The default ignores `state`.
    #[doc(hidden)]
    fn handle_batch_with_state(
        &self,
        input: &[In],
        outs: &Outs,
        state: &S,
        ctx: &mut BatchContext<'_>,
    ) -> impl Future<Output = BatchOutcome> + Send {
        let _ = state;
        self.handle_batch(input, outs, ctx)
    }
}

/// An output's Rust type (as `std::any::type_name` spells it) and the function making its JSON
/// Schema, for `asyncapi` ([`Outs::output_types`]).
pub type OutputType = (&'static str, fn() -> Option<serde_json::Value>);

/// What a handler publishes besides settling: built once per registration.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a set of handler outputs",
    note = "use `()` for a handler that publishes nothing, `Publisher<T>` for an `Outgoing` type `T`, or a tuple of them"
)]
pub trait Outs: Default + Send + Sync + 'static {
    /// The subjects these outputs publish to, for `describe`.
    fn subjects() -> Vec<&'static str> {
        Vec::new()
    }

    /// The JSON Schema of what these outputs publish, for `asyncapi`: the first output's
    /// [`Outgoing::schema`] (a [`SchemaFn`](crate::registration::SchemaFn)).
    fn reply_schema() -> Option<fn() -> Option<serde_json::Value>> {
        None
    }

    /// The Rust type of what these outputs publish, for `asyncapi`: the first output's
    /// [`Outgoing::type_name`].
    fn reply_type() -> Option<&'static str> {
        None
    }

    /// Each output's Rust type and JSON Schema, in the order of [`subjects`](Self::subjects),
    /// for `asyncapi`.
    fn output_types() -> Vec<OutputType> {
        Vec::new()
    }

    /// Each output's own format ([`Outgoing::codec`]; `None`: the registration's), in the
    /// order of [`subjects`](Self::subjects), for `asyncapi`.
    fn output_codecs() -> Vec<Option<crate::codec::Format>> {
        Vec::new()
    }
}

impl Outs for () {}

impl<A: Outs, B: Outs> Outs for (A, B) {
    fn subjects() -> Vec<&'static str> {
        let mut s = A::subjects();
        s.extend(B::subjects());
        s
    }

    fn reply_schema() -> Option<fn() -> Option<serde_json::Value>> {
        A::reply_schema().or_else(B::reply_schema)
    }

    fn reply_type() -> Option<&'static str> {
        A::reply_type().or_else(B::reply_type)
    }

    fn output_types() -> Vec<OutputType> {
        let mut t = A::output_types();
        t.extend(B::output_types());
        t
    }

    fn output_codecs() -> Vec<Option<crate::codec::Format>> {
        let mut c = A::output_codecs();
        c.extend(B::output_codecs());
        c
    }
}

impl<A: Outs, B: Outs, C: Outs> Outs for (A, B, C) {
    fn subjects() -> Vec<&'static str> {
        let mut s = A::subjects();
        s.extend(B::subjects());
        s.extend(C::subjects());
        s
    }

    fn reply_schema() -> Option<fn() -> Option<serde_json::Value>> {
        A::reply_schema()
            .or_else(B::reply_schema)
            .or_else(C::reply_schema)
    }

    fn reply_type() -> Option<&'static str> {
        A::reply_type()
            .or_else(B::reply_type)
            .or_else(C::reply_type)
    }

    fn output_types() -> Vec<OutputType> {
        let mut t = A::output_types();
        t.extend(B::output_types());
        t.extend(C::output_types());
        t
    }

    fn output_codecs() -> Vec<Option<crate::codec::Format>> {
        let mut c = A::output_codecs();
        c.extend(B::output_codecs());
        c.extend(C::output_codecs());
        c
    }
}

/// Publishes `T` to its `#[outgoing(name)]` subject: the output of a `reply` handler.
pub struct Publisher<T>(PhantomData<fn(&T)>);

impl<T> Default for Publisher<T> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T> fmt::Debug for Publisher<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Publisher<{}>", std::any::type_name::<T>())
    }
}

impl<T: Outgoing> Publisher<T> {
    /// Publishes `value`; resolves once the broker took it.
    pub async fn publish(&self, ctx: &Context<'_>, value: &T) -> Result<(), PublishError> {
        ctx.publish(value).await
    }
}

impl<T: Outgoing + 'static> Outs for Publisher<T> {
    fn subjects() -> Vec<&'static str> {
        vec![T::SUBJECT]
    }

    fn reply_schema() -> Option<fn() -> Option<serde_json::Value>> {
        Some(T::schema)
    }

    fn reply_type() -> Option<&'static str> {
        Some(T::type_name())
    }

    fn output_types() -> Vec<OutputType> {
        vec![(T::type_name(), T::schema)]
    }

    fn output_codecs() -> Vec<Option<crate::codec::Format>> {
        vec![T::codec()]
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use bytes::Bytes;
    use futures::future::BoxFuture;

    use super::*;
    use crate::delivery::OutboundMessage;
    use crate::publish::Origin;

    /// Records the output index of every publish.
    #[derive(Default)]
    struct Recorded(Mutex<Vec<(String, u32)>>);

    impl crate::Publish for Recorded {
        fn publish(&self, _message: OutboundMessage) -> BoxFuture<'_, Result<(), PublishError>> {
            Box::pin(async { Ok(()) })
        }

        fn publish_output<'a>(
            &'a self,
            message: OutboundMessage,
            origin: Origin<'a>,
        ) -> BoxFuture<'a, Result<(), PublishError>> {
            self.0
                .lock()
                .expect("not poisoned")
                .push((origin.delivery.subject().to_owned(), origin.output));
            let _ = message;
            Box::pin(async { Ok(()) })
        }
    }

    #[tokio::test]
    async fn every_context_of_a_batch_message_counts_its_outputs_once() {
        let a = Delivery::new("a", Bytes::new());
        let b = Delivery::new("b", Bytes::new());
        let publisher = Recorded::default();
        let batch = BatchContext::new(vec![&a, &b], &(), &publisher, "batch");
        for index in [0, 0, 1, 0] {
            let ctx = batch.context(index).expect("a message of the batch");
            ctx.publish_to("out", &index).await.expect("published");
        }
        assert_eq!(
            *publisher.0.lock().expect("not poisoned"),
            [
                ("a".to_owned(), 0),
                ("a".to_owned(), 1),
                ("b".to_owned(), 0),
                ("a".to_owned(), 2)
            ]
        );
    }
}
