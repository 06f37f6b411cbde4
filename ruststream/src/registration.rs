//! Registrations: a descriptor (where messages come from), a handler, and the mount site's
//! policy (cap, dead letter, retry target, concurrency). Plain data until the app starts.

use std::any::Any;
use std::fmt;
use std::marker::PhantomData;
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use serde::de::DeserializeOwned;

use crate::codec::Format;
use crate::context::Context;
use crate::delivery::Delivery;
use crate::handler::{BatchContext, BatchOutcome, Handle, HandleBatch, Outs};
use crate::middleware::Middleware;
use crate::outcome::HandlerOutcome;
use crate::publish::Publish;
use crate::settle::{self, Decision, DeliveryModel, Facts};

/// Where a registration's messages come from: a subject, a pattern, a stream consumer.
///
/// Each broker crate has its own descriptors; a string literal is a subject on the broker's
/// plainest model (Core NATS for NATS).
pub trait Descriptor: Send + Sync + fmt::Debug + 'static {
    /// What `describe` and startup checks need to know.
    fn info(&self) -> DescriptorInfo;
    /// The descriptor as `Any`, for its broker to recognise it.
    fn as_any(&self) -> &dyn Any;
    /// The same descriptor reading `prefix.` + its subject, for a [`Router`](crate::Router);
    /// `None` when it cannot be prefixed (the app then refuses to start, naming it).
    fn prefixed(&self, prefix: &str) -> Option<Arc<dyn Descriptor>> {
        let _ = prefix;
        None
    }
}

impl Descriptor for &'static str {
    fn info(&self) -> DescriptorInfo {
        DescriptorInfo::new(DeliveryModel::Core, *self).with_copy_target(*self)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn prefixed(&self, prefix: &str) -> Option<Arc<dyn Descriptor>> {
        Some(Arc::new(PrefixedSubject(crate::router::join(prefix, self))))
    }
}

/// A plain subject under a router's prefix (what `"subject"` becomes in a router).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefixedSubject(String);

impl Descriptor for PrefixedSubject {
    fn info(&self) -> DescriptorInfo {
        DescriptorInfo::new(DeliveryModel::Core, &self.0).with_copy_target(&self.0)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn prefixed(&self, prefix: &str) -> Option<Arc<dyn Descriptor>> {
        Some(Arc::new(Self(crate::router::join(prefix, &self.0))))
    }
}

/// A descriptor's facts, broker-neutral.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DescriptorInfo {
    /// The delivery model, which decides settlement.
    pub model: DeliveryModel,
    /// The subject or pattern read.
    pub subject: String,
    /// Whether `subject` is a pattern matching many subjects.
    pub wildcard: bool,
    /// The queue group sharing the subscription, if any.
    pub queue_group: Option<String>,
    /// The stream read from (JetStream).
    pub stream: Option<String>,
    /// The consumer, when durable (JetStream).
    pub consumer: Option<String>,
    /// How long the server waits for a settlement (JetStream).
    pub ack_wait: Option<Duration>,
    /// Where a Core copy goes when the registration names none.
    pub copy_target: Option<String>,
    /// What kind of descriptor this is, as its type is called.
    pub kind: &'static str,
}

impl DescriptorInfo {
    /// Facts of a descriptor reading `subject` under `model`.
    pub fn new(model: DeliveryModel, subject: impl Into<String>) -> Self {
        Self {
            model,
            subject: subject.into(),
            wildcard: false,
            queue_group: None,
            stream: None,
            consumer: None,
            ack_wait: None,
            copy_target: None,
            kind: "subject",
        }
    }

    /// Sets where a Core copy goes by default.
    pub fn with_copy_target(mut self, target: impl Into<String>) -> Self {
        self.copy_target = Some(target.into());
        self
    }
}

/// What a failure becomes: a payload that does not decode, a handler that panicked, a handler
/// that returned an `Err` of its own error type. Declared per registration
/// (`.on_undecodable(..)`, `.on_panic(..)`, `.on_error(..)`) and shown in `describe`.
///
/// A retry counts against the cap like a handler's `retry()`: at the cap the message goes to the
/// dead letter, or ends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OnFailure {
    /// To the dead-letter subject when one is declared, else ended (`+TERM` on JetStream, let
    /// go on Core); never retried.
    #[default]
    DeadLetterOrDrop,
    /// Ended without a dead letter (`+TERM` on JetStream, let go on Core): as `drop()`.
    Drop,
    /// Brought back at once: as `retry()`.
    Retry,
    /// Brought back after the delay: as `retry_after(delay)`.
    RetryAfter(Duration),
}

impl OnFailure {
    /// The settlement decision for `facts`: the pure decision of [`settle`].
    pub fn decide(&self, facts: &Facts) -> Decision {
        match self {
            Self::DeadLetterOrDrop => settle::decide_undecodable(facts),
            Self::Drop => settle::decide(&HandlerOutcome::Drop, facts),
            Self::Retry => settle::decide(&HandlerOutcome::Retry, facts),
            Self::RetryAfter(delay) => settle::decide(&HandlerOutcome::RetryAfter(*delay), facts),
        }
    }
}

impl fmt::Display for OnFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DeadLetterOrDrop => f.write_str("dead letter or drop"),
            Self::Drop => f.write_str("drop"),
            Self::Retry => f.write_str("retry"),
            Self::RetryAfter(delay) => write!(f, "retry after {delay:?}"),
        }
    }
}

/// What a payload that does not decode becomes (an [`OnFailure`]).
pub type UndecodablePolicy = OnFailure;

/// The mount site's policy for a registration.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Policy {
    /// The cap on attempts; the first delivery counts as one.
    pub max_attempts: Option<NonZeroU32>,
    /// Where a spent or undecodable message goes, as it arrived.
    pub dead_letter: Option<String>,
    /// Where a Core retry copy is published (required for a pattern).
    pub retry_to: Option<String>,
    /// How many deliveries are handled at once.
    pub concurrency: NonZeroUsize,
    /// What an undecodable payload becomes.
    pub undecodable: UndecodablePolicy,
    /// How long the handler may run on one delivery (or batch) before it is cancelled and the
    /// delivery treated as `retry()`; `None`: as long as it takes.
    pub handler_timeout: Option<Duration>,
    /// How long, at most, the broker tells the server the delivery is still being worked on
    /// while the handler runs (JetStream: `+WPI` every `ack_wait / 2`); `None`: never.
    pub progress_until: Option<Duration>,
    /// Whether each settlement waits for the server to confirm it (JetStream), and is sent
    /// again until it does.
    pub confirm_acks: bool,
    /// The payload format: `None` until the registration, its broker or the app chose one
    /// (JSON).
    pub codec: Option<Format>,
    /// What a panicking handler's delivery becomes (`retry()` by default).
    pub on_panic: OnFailure,
    /// What a handler's `Err` of its own error type becomes (`retry()` by default).
    pub on_error: OnFailure,
    /// Whether a message whose key was already handled is acknowledged without running the
    /// handler, and where the keys are kept; `None`: every message runs it.
    pub idempotency: Option<crate::idempotency::Idempotency>,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            max_attempts: None,
            dead_letter: None,
            retry_to: None,
            concurrency: NonZeroUsize::MIN,
            undecodable: UndecodablePolicy::default(),
            handler_timeout: None,
            progress_until: None,
            confirm_acks: false,
            codec: None,
            on_panic: OnFailure::Retry,
            on_error: OnFailure::Retry,
            idempotency: None,
        }
    }
}

/// A registration's facts, for `describe` and startup checks.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RegistrationInfo {
    /// The registration's name (the handler function's name by default).
    pub name: String,
    /// The descriptor's facts.
    pub descriptor: DescriptorInfo,
    /// The mount site's policy.
    pub policy: Policy,
    /// Whether the handler takes batches.
    pub batch: bool,
    /// The subjects the handler publishes to.
    pub publishes: Vec<&'static str>,
    /// The middleware around the handler, outermost first (the app's, the broker's, its own).
    pub middleware: Vec<String>,
    /// The payload's type and, when declared, its JSON Schema and its reply's (`asyncapi`).
    pub schemas: crate::asyncapi::Schemas,
}

impl RegistrationInfo {
    /// The subjects the handler publishes to, each with the pattern of the subjects it stands
    /// for: a template (`orders.{tenant}.placed`) as `orders.*.placed`, a subject as itself
    /// (what to ask when a stream stores it).
    pub fn output_patterns(&self) -> Vec<(&'static str, String)> {
        self.publishes
            .iter()
            .map(|subject| {
                let pattern = subject
                    .split('.')
                    .map(|t| if t.starts_with('{') { "*" } else { t })
                    .collect::<Vec<_>>()
                    .join(".");
                (*subject, pattern)
            })
            .collect()
    }

    /// Where a Core copy of this registration goes: `retry_to`, else the descriptor's own.
    pub fn copy_target(&self) -> Option<&str> {
        self.policy
            .retry_to
            .as_deref()
            .or(self.descriptor.copy_target.as_deref())
    }
}

/// The parts of a registration's policy `describe` shows under its table, when they differ
/// from the defaults: the payload format, the failure policy, middleware.
#[doc(hidden)]
pub fn policy_notes(r: &RegistrationInfo) -> Vec<String> {
    let mut notes = Vec::new();
    if let Some(codec) = r.policy.codec {
        notes.push(format!(
            "codec {}",
            crate::codec::Codec::content_type(&codec)
        ));
    }
    if !r.middleware.is_empty() {
        notes.push(format!("middleware: {}", r.middleware.join(" > ")));
    }
    let defaults = Policy::default();
    let p = &r.policy;
    if (p.undecodable, p.on_panic, p.on_error)
        != (defaults.undecodable, defaults.on_panic, defaults.on_error)
    {
        notes.push(format!(
            "undecodable: {}, panic: {}, error: {}",
            p.undecodable, p.on_panic, p.on_error
        ));
    }
    if let Some(idempotency) = &p.idempotency {
        notes.push(idempotency.to_string());
    }
    notes
}

/// What came of handing one delivery to its handler.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Handled {
    /// The handler (or an extractor) returned this outcome.
    Outcome(HandlerOutcome),
    /// The payload did not decode; the handler did not run.
    Undecodable(String),
    /// The handler panicked; settled as the registration's `on_panic` says (`retry()` under
    /// the cap by default).
    Panicked(String),
    /// The handler ran past the registration's `handler_timeout` and was cancelled; treated as
    /// `retry()` under the cap.
    TimedOut(Duration),
    /// The handler returned an `Err` of its own error type (the message is the error and its
    /// sources); settled as the registration's `on_error` says (`retry()` by default).
    Failed(String),
    /// Nothing settles the delivery (a batch whose outcomes did not match its length).
    NoOutcome(String),
    /// The delivery arrived past the cap (an earlier one hung past `ack_wait`, crashed the
    /// process, or its dead letter failed); the handler did not run, and
    /// [`settle::decide_arrival`] says what happens to it.
    PastCap,
}

impl Handled {
    /// The outcome the settlement decision starts from, if any.
    pub fn outcome(&self) -> Option<&HandlerOutcome> {
        match self {
            Self::Outcome(o) => Some(o),
            _ => None,
        }
    }
}

type SingleFn<S> = dyn for<'a> Fn(&'a Delivery, Arc<S>, &'a dyn Publish, &'a str, Format) -> BoxFuture<'a, Handled>
    + Send
    + Sync;
type BatchFn<S> = dyn for<'a> Fn(
        &'a [&'a Delivery],
        Arc<S>,
        &'a dyn Publish,
        &'a str,
        Format,
    ) -> BoxFuture<'a, Vec<Handled>>
    + Send
    + Sync;

enum HandlerKind<S> {
    Single(Arc<SingleFn<S>>),
    Batch(Arc<BatchFn<S>>),
}

/// One mounted handler with its descriptor and policy, as `b.include(..)` returns it.
///
/// ```
/// use ruststream::{AppInfo, HandlerOutcome, RustStream, nonzero, subscriber};
/// # struct Nowhere;
/// # impl ruststream::Broker for Nowhere {
/// #     fn kind(&self) -> &'static str { "none" }
/// #     fn address(&self) -> String { String::new() }
/// #     fn validate(&self, _: &[ruststream::registration::RegistrationInfo]) -> Result<(), ruststream::Error> { Ok(()) }
/// #     fn start(self: Box<Self>, _: Vec<ruststream::Endpoint>, _: ruststream::Env)
/// #         -> futures::future::BoxFuture<'static, Result<Box<dyn ruststream::RunningBroker>, ruststream::Error>> {
/// #         Box::pin(async { Err(ruststream::Error::new(ruststream::ErrorKind::Config, "nowhere")) })
/// #     }
/// # }
///
/// #[derive(serde::Deserialize)]
/// struct Captured {
///     payment: u64,
/// }
///
/// #[subscriber("payments.captured")]
/// async fn refresh(captured: &Captured) -> HandlerOutcome {
///     HandlerOutcome::ack()
/// }
///
/// let app = RustStream::new(AppInfo::new("dashboard", "0.1.0")).with_broker(Nowhere, |b| {
///     b.include(refresh).max_attempts(nonzero!(3)).dead_letter("payments.dead");
/// });
/// # let _ = app;
/// ```
pub struct Registration<S> {
    name: String,
    descriptor: Arc<dyn Descriptor>,
    handler: HandlerKind<S>,
    policy: Policy,
    publishes: Vec<&'static str>,
    layers: LayerStack,
    pub(crate) schemas: crate::asyncapi::Schemas,
    unroutable: Option<String>,
    idempotency_key: Option<Arc<crate::idempotency::KeyFn>>,
}

/// A registration's middleware by scope, each outermost first.
#[derive(Clone, Default)]
struct LayerStack {
    app: Vec<Arc<dyn Middleware>>,
    broker: Vec<Arc<dyn Middleware>>,
    router: Vec<Arc<dyn Middleware>>,
    own: Vec<Arc<dyn Middleware>>,
}

impl LayerStack {
    /// Every layer, outermost first: the app's, the broker's, the registration's.
    fn all(&self) -> Vec<Arc<dyn Middleware>> {
        self.app
            .iter()
            .chain(&self.broker)
            .chain(&self.router)
            .chain(&self.own)
            .cloned()
            .collect()
    }
}

impl<S> fmt::Debug for Registration<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registration")
            .field("name", &self.name)
            .field("descriptor", &self.descriptor)
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl<S: Send + Sync + 'static> Registration<S> {
    /// A registration of handler `H` for messages `In`, publishing `O`.
    pub fn single<D, H, In, O>(name: impl Into<String>, descriptor: D, handler: H) -> Self
    where
        D: Descriptor,
        H: Handle<In, O, S>,
        In: DeserializeOwned + Send + Sync + 'static,
        O: Outs,
    {
        let handler = Arc::new(handler);
        let outs = Arc::new(O::default());
        let call: Arc<SingleFn<S>> = Arc::new(move |delivery, state, publisher, name, codec| {
            let handler = Arc::clone(&handler);
            let outs = Arc::clone(&outs);
            Box::pin(async move {
                let input: In = match decode(codec, delivery) {
                    Ok(input) => input,
                    Err(undecodable) => return undecodable,
                };
                let state: &(dyn Any + Send + Sync) = &*state;
                let mut ctx = Context::new(delivery, state, publisher, name).with_format(codec);
                let run = handler.handle(&input, &outs, &mut ctx);
                let ran = std::panic::AssertUnwindSafe(run).catch_unwind().await;
                single_result(ran, &ctx)
            })
        });
        Self {
            name: name.into(),
            descriptor: Arc::new(descriptor),
            handler: HandlerKind::Single(call),
            policy: Policy::default(),
            publishes: O::subjects(),
            layers: LayerStack::default(),
            unroutable: None,
            idempotency_key: None,
            schemas: crate::asyncapi::Schemas::of::<In>(),
        }
    }

    /// A registration of batch handler `H` for messages `In`, publishing `O`.
    pub fn batch<D, H, In, O>(name: impl Into<String>, descriptor: D, handler: H) -> Self
    where
        D: Descriptor,
        H: HandleBatch<In, O, S>,
        In: DeserializeOwned + Send + Sync + 'static,
        O: Outs,
    {
        let handler = Arc::new(handler);
        let outs = Arc::new(O::default());
        let call: Arc<BatchFn<S>> = Arc::new(move |deliveries, state, publisher, name, codec| {
            let handler = Arc::clone(&handler);
            let outs = Arc::clone(&outs);
            Box::pin(async move {
                let mut results: Vec<Option<Handled>> = vec![None; deliveries.len()];
                let mut inputs = Vec::with_capacity(deliveries.len());
                let mut decoded = Vec::with_capacity(deliveries.len());
                for (i, delivery) in deliveries.iter().enumerate() {
                    match decode::<In>(codec, delivery) {
                        Ok(v) => {
                            inputs.push(v);
                            decoded.push(i);
                        }
                        Err(undecodable) => results[i] = Some(undecodable),
                    }
                }
                if !inputs.is_empty() {
                    let state: &(dyn Any + Send + Sync) = &*state;
                    let batch: Vec<&Delivery> = decoded.iter().map(|&i| deliveries[i]).collect();
                    let mut ctx =
                        BatchContext::new(batch, state, publisher, name).with_format(codec);
                    let run = handler.handle_batch(&inputs, &outs, &mut ctx);
                    let per = match std::panic::AssertUnwindSafe(run).catch_unwind().await {
                        Ok(outcome) => batch_results(outcome, decoded.len()),
                        Err(panic) => {
                            vec![Handled::Panicked(panic_message(panic.as_ref())); decoded.len()]
                        }
                    };
                    for (slot, handled) in decoded.into_iter().zip(per) {
                        results[slot] = Some(handled);
                    }
                }
                results
                    .into_iter()
                    .map(|r| r.unwrap_or_else(|| Handled::NoOutcome("not handled".into())))
                    .collect()
            })
        });
        Self {
            name: name.into(),
            descriptor: Arc::new(descriptor),
            handler: HandlerKind::Batch(call),
            policy: Policy::default(),
            publishes: O::subjects(),
            layers: LayerStack::default(),
            unroutable: None,
            idempotency_key: None,
            schemas: crate::asyncapi::Schemas::of::<In>(),
        }
    }
}

impl<S: Send + Sync + 'static> Registration<S> {
    /// A registration of handler `H` for payloads taken as they arrived, as [`Bytes`]: no
    /// decoding, no `content-type` check (a `#[subscriber]` taking `&Bytes`).
    pub fn raw<D, H, O>(name: impl Into<String>, descriptor: D, handler: H) -> Self
    where
        D: Descriptor,
        H: Handle<bytes::Bytes, O, S>,
        O: Outs,
    {
        Self::raw_with(name, descriptor, handler, |d| d.payload())
    }

    /// The same for a handler taking the payload as `&[u8]`.
    pub fn raw_slice<D, H, O>(name: impl Into<String>, descriptor: D, handler: H) -> Self
    where
        D: Descriptor,
        H: Handle<[u8], O, S>,
        O: Outs,
    {
        Self::raw_with(name, descriptor, handler, |d| &d.payload()[..])
    }

    fn raw_with<D, H, O, In>(
        name: impl Into<String>,
        descriptor: D,
        handler: H,
        payload: for<'a> fn(&'a Delivery) -> &'a In,
    ) -> Self
    where
        D: Descriptor,
        H: Handle<In, O, S>,
        In: ?Sized + Sync + 'static,
        O: Outs,
    {
        let handler = Arc::new(handler);
        let outs = Arc::new(O::default());
        let call: Arc<SingleFn<S>> = Arc::new(move |delivery, state, publisher, name, codec| {
            let handler = Arc::clone(&handler);
            let outs = Arc::clone(&outs);
            Box::pin(async move {
                let state: &(dyn Any + Send + Sync) = &*state;
                let mut ctx = Context::new(delivery, state, publisher, name).with_format(codec);
                let run = handler.handle(payload(delivery), &outs, &mut ctx);
                let ran = std::panic::AssertUnwindSafe(run).catch_unwind().await;
                single_result(ran, &ctx)
            })
        });
        Self {
            name: name.into(),
            descriptor: Arc::new(descriptor),
            handler: HandlerKind::Single(call),
            policy: Policy::default(),
            publishes: O::subjects(),
            layers: LayerStack::default(),
            schemas: crate::asyncapi::Schemas::of::<In>(),
            unroutable: None,
            idempotency_key: None,
        }
    }
}

/// What a single handler's run says: its outcome, its panic, or its own error (recorded on the
/// context by the generated code or `Context::failure`).
fn single_result(
    ran: std::thread::Result<Result<(), HandlerOutcome>>,
    ctx: &Context<'_>,
) -> Handled {
    match ran {
        Ok(Ok(())) => match ctx.unconfirmed() {
            // An output a stream did not confirm: the input must come back.
            Some(reason) => {
                if let Some(suppressed) = crate::unconfirmed::log_now() {
                    tracing::error!(
                        registration = ctx.registration(),
                        subject = ctx.subject(),
                        %reason,
                        suppressed,
                        "an output stored by a stream was not confirmed; the delivery is not acknowledged and is treated as retry() (at most one such line a second; `suppressed` counts the others)"
                    );
                }
                Handled::Outcome(HandlerOutcome::retry())
            }
            None => Handled::Outcome(HandlerOutcome::Ack),
        },
        Ok(Err(outcome)) => match ctx.failed() {
            Some(error) => Handled::Failed(error.to_owned()),
            None => Handled::Outcome(outcome),
        },
        Err(panic) => Handled::Panicked(panic_message(panic.as_ref())),
    }
}

fn batch_results(outcome: BatchOutcome, len: usize) -> Vec<Handled> {
    match outcome {
        BatchOutcome::All(o) => vec![Handled::Outcome(o); len],
        BatchOutcome::Each(each) if each.len() == len => {
            each.into_iter().map(Handled::Outcome).collect()
        }
        BatchOutcome::Each(each) => {
            let reason = format!(
                "the batch handler returned {} outcomes for {len} messages; nothing is settled and the server delivers the batch again after ack_wait",
                each.len()
            );
            vec![Handled::NoOutcome(reason); len]
        }
    }
}

/// Decodes `delivery`'s payload; a payload that does not decode, or whose decoding panics (a
/// custom `Deserialize`), is [`Handled::Undecodable`]: never retried, it would fail the same way.
fn decode<In: DeserializeOwned>(codec: Format, delivery: &Delivery) -> Result<In, Handled> {
    let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        crate::codec::decode_delivery(codec, delivery)
    }));
    match decoded {
        Ok(Ok(input)) => Ok(input),
        Ok(Err(err)) => Err(Handled::Undecodable(err.to_string())),
        Err(panic) => Err(Handled::Undecodable(format!(
            "decoding the payload panicked: {}",
            panic_message(panic.as_ref())
        ))),
    }
}

fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".to_owned()
    }
}

mod cap {
    use std::num::NonZeroU32;

    /// What `max_attempts` takes: a `NonZeroU32` (a trait only so that another type is told how
    /// to build one).
    #[diagnostic::on_unimplemented(
        message = "`max_attempts` takes a `NonZeroU32`, not `{Self}`: a cap of zero attempts would never run the handler",
        label = "not a `NonZeroU32`",
        note = "write `.max_attempts(nonzero!(3))`, checked at compile time, or `NonZeroU32::new(n)` for a count known only at run time (`None` for zero)"
    )]
    pub trait AttemptCap {
        /// The cap.
        fn into_cap(self) -> NonZeroU32;
    }

    impl AttemptCap for NonZeroU32 {
        fn into_cap(self) -> NonZeroU32 {
            self
        }
    }
}

impl<S> Registration<S> {
    /// Caps the attempts; the first delivery counts as one. At the cap a retry goes to the
    /// dead-letter subject, or ends (`+TERM` on JetStream, let go on Core).
    pub fn max_attempts(&mut self, attempts: impl cap::AttemptCap) -> &mut Self {
        self.policy.max_attempts = Some(attempts.into_cap());
        self
    }

    /// Where a message goes, as it arrived, when its attempts are spent or it does not decode.
    pub fn dead_letter(&mut self, subject: impl Into<String>) -> &mut Self {
        self.policy.dead_letter = Some(subject.into());
        self
    }

    /// Where a Core retry copy is published; required on a pattern (`CoreWildcard`).
    pub fn retry_to(&mut self, subject: impl Into<String>) -> &mut Self {
        self.policy.retry_to = Some(subject.into());
        self
    }

    /// How many deliveries of this registration are handled at once (1 by default).
    pub fn concurrency(&mut self, handlers: NonZeroUsize) -> &mut Self {
        self.policy.concurrency = handlers;
        self
    }

    /// Cancels the handler when it runs longer than `limit` on one delivery (or one batch), and
    /// treats the delivery as `retry()` (under the cap, like a panic): a hung handler does not
    /// hold its slot, nor its message, forever. Shown in `describe`.
    ///
    /// Cancelling drops the handler's future at its next `.await`: work it started elsewhere
    /// (a spawned task, a request already sent) is not undone, so the handler must be safe to
    /// run again, as every handler of an at-least-once delivery must.
    pub fn handler_timeout(&mut self, limit: Duration) -> &mut Self {
        self.policy.handler_timeout = Some(limit);
        self
    }

    /// While the handler runs, tells the server the delivery is still being worked on, for at
    /// most `deadline` after the handler started: on JetStream a `+WPI` every `ack_wait / 2`,
    /// which restarts the server's `ack_wait` timer, so a handler slower than `ack_wait` is not
    /// delivered again to another instance while it still runs. Past the deadline the server's
    /// timer runs again (pair it with [`handler_timeout`](Self::handler_timeout)). Core NATS has
    /// no such signal: it does nothing there. Shown in `describe`.
    pub fn progress_until(&mut self, deadline: Duration) -> &mut Self {
        self.policy.progress_until = Some(deadline);
        self
    }

    /// Confirmed settlements: each `+ACK`, `-NAK` or `+TERM` is sent as a request the server
    /// answers once it has acted on it (JetStream's "AckAck"), and is sent again, a few times,
    /// until it does. A settlement written just before the connection broke is otherwise lost
    /// without a word, and its message delivered again after `ack_wait`; with this, the runtime
    /// knows, tries again after the reconnection, and logs a warning when the server never
    /// confirmed. It costs a round trip per settlement. Core NATS settles nothing: it does
    /// nothing there. Shown in `describe`.
    pub fn confirm_acks(&mut self) -> &mut Self {
        self.policy.confirm_acks = true;
        self
    }

    /// The payload format: what the input is decoded from (its `content-type`, when it says
    /// one, must name this format, or the payload is undecodable) and what outputs are encoded
    /// in. Overrides the broker's and the app's; JSON when none chose. See `docs/codecs.md`.
    pub fn codec(&mut self, format: Format) -> &mut Self {
        self.policy.codec = Some(format);
        self
    }

    /// Adds a middleware around this registration's handler, inside the app's and the
    /// broker's and inside the ones added before it. See `docs/middleware.md`.
    pub fn layer(&mut self, middleware: impl Middleware) -> &mut Self {
        self.layers.own.push(Arc::new(middleware));
        self
    }

    /// Sets the broker's layers (outside the registration's own).
    pub(crate) fn broker_layers(&mut self, layers: &[Arc<dyn Middleware>]) {
        self.layers.broker = layers.to_vec();
    }

    /// Puts a router's prefix before the subject and its layers outside those of routers it
    /// included; a descriptor that cannot be prefixed is kept, and the app refuses to start.
    pub(crate) fn route(&mut self, prefix: &str, layers: &[Arc<dyn Middleware>]) {
        match self.descriptor.prefixed(prefix) {
            Some(routed) => self.descriptor = routed,
            None => {
                self.unroutable = Some(format!(
                    "registration `{}` is in a router with prefix `{prefix}`, and its descriptor `{:?}` cannot be prefixed; mount it on the broker instead",
                    self.name, self.descriptor
                ));
            }
        }
        let mut outer = layers.to_vec();
        outer.append(&mut self.layers.router);
        self.layers.router = outer;
    }

    /// An error when a router could not prefix this registration, or its idempotency cannot
    /// run.
    pub(crate) fn check_routed(&self) -> Result<(), crate::Error> {
        if let Some(reason) = &self.unroutable {
            return Err(crate::Error::new(crate::ErrorKind::Config, reason.clone()));
        }
        self.check_idempotency()
    }

    fn check_idempotency(&self) -> Result<(), crate::Error> {
        let config = |reason: String| Err(crate::Error::new(crate::ErrorKind::Config, reason));
        let Some(idempotency) = &self.policy.idempotency else {
            return Ok(());
        };
        if self.idempotency_key.is_none() {
            return config(format!(
                "registration `{}` sets an idempotency window, bucket or claim without a key; add `.idempotent_by(|message: &T| message.id)` or `.idempotent_by_header(\"name\")`",
                self.name
            ));
        }
        if matches!(self.handler, HandlerKind::Batch(_)) {
            return config(format!(
                "registration `{}` is a batch handler, and idempotency runs on single handlers only; take one message per call, or deduplicate inside the batch",
                self.name
            ));
        }
        if let Some(limit) = self.policy.handler_timeout
            && limit >= idempotency.claim
        {
            return config(format!(
                "registration `{}` has an idempotency claim of {:?}, not longer than its handler_timeout of {limit:?}: a duplicate could run while the handler still runs; raise `.idempotency_claim(..)` above the timeout",
                self.name, idempotency.claim
            ));
        }
        if idempotency.window.is_zero() || idempotency.claim.is_zero() {
            return config(format!(
                "registration `{}` has a zero idempotency window or claim; give both a duration above zero",
                self.name
            ));
        }
        Ok(())
    }

    /// Handles each message once per key: a message whose key (what `key` makes of its
    /// payload, decoded as `T` with the registration's codec) was already handled within the
    /// window is acknowledged without running the handler. The broker keeps the keys in a
    /// store (on NATS, a JetStream key-value bucket), claims a key before the handler runs and
    /// records it once the handler's `ack()` is settled. Single handlers only. Shown in
    /// `describe`. See `docs/idempotency.md` for what it guarantees.
    pub fn idempotent_by<T, K>(
        &mut self,
        key: impl Fn(&T) -> K + Send + Sync + 'static,
    ) -> &mut Self
    where
        T: DeserializeOwned + 'static,
        K: fmt::Display,
    {
        self.idempotency_key = Some(crate::idempotency::by_payload(key));
        self.idempotency_config().key = "payload".to_owned();
        self
    }

    /// Like [`idempotent_by`](Self::idempotent_by), the key being the value of header `name`
    /// (`Nats-Msg-Id`, an idempotency key the publisher sets).
    pub fn idempotent_by_header(&mut self, name: impl Into<String>) -> &mut Self {
        let name = name.into();
        self.idempotency_config().key = format!("header {name}");
        self.idempotency_key = Some(crate::idempotency::by_header(name));
        self
    }

    /// How long a handled key is remembered (a day by default): a message of the same key
    /// later than that runs the handler again.
    pub fn idempotency_window(&mut self, window: Duration) -> &mut Self {
        self.idempotency_config().window = window;
        self
    }

    /// The store's name (the key-value bucket's on NATS); `idempotency-<registration>` by
    /// default. Registrations may share one.
    pub fn idempotency_bucket(&mut self, bucket: impl Into<String>) -> &mut Self {
        self.idempotency_config().bucket = bucket.into();
        self
    }

    /// How long the claim on a key holds while the handler runs (30 s by default): a
    /// duplicate arriving meanwhile waits for it. It must be longer than the handler may run
    /// (pair it with [`handler_timeout`](Self::handler_timeout)); when the process dies between
    /// the claim and the record, the key can be handled again once the claim expired.
    pub fn idempotency_claim(&mut self, claim: Duration) -> &mut Self {
        self.idempotency_config().claim = claim;
        self
    }

    fn idempotency_config(&mut self) -> &mut crate::idempotency::Idempotency {
        self.policy
            .idempotency
            .get_or_insert_with(|| crate::idempotency::Idempotency::new(String::new()))
    }

    /// Adds one of the app's layers (outside the broker's, after the app's added before).
    pub(crate) fn app_layer(&mut self, layer: Arc<dyn Middleware>) {
        self.layers.app.push(layer);
    }

    /// Sets the format when the registration chose none (the broker's, then the app's).
    pub(crate) fn inherit_codec(&mut self, format: Option<Format>) {
        if self.policy.codec.is_none() {
            self.policy.codec = format;
        }
    }

    /// What a payload that does not decode (or names another `content-type`) becomes; the
    /// dead letter, or the end, by default. See `docs/handlers.md`.
    pub fn on_undecodable(&mut self, failure: OnFailure) -> &mut Self {
        self.policy.undecodable = failure;
        self
    }

    /// What the delivery of a handler that panicked becomes; `retry()` by default.
    pub fn on_panic(&mut self, failure: OnFailure) -> &mut Self {
        self.policy.on_panic = failure;
        self
    }

    /// What a handler's `Err` of its own error type (`Result<_, E>` with
    /// `E: std::error::Error`) becomes; `retry()` by default. An `Err(HandlerOutcome)` is
    /// settled as it says.
    pub fn on_error(&mut self, failure: OnFailure) -> &mut Self {
        self.policy.on_error = failure;
        self
    }

    /// Renames the registration (in logs, `describe` and test assertions).
    pub fn name(&mut self, name: impl Into<String>) -> &mut Self {
        self.name = name.into();
        self
    }

    /// The registration's facts.
    pub fn info(&self) -> RegistrationInfo {
        let mut policy = self.policy.clone();
        if let Some(idempotency) = &mut policy.idempotency
            && idempotency.bucket.is_empty()
        {
            idempotency.bucket = crate::idempotency::default_bucket(&self.name);
        }
        RegistrationInfo {
            name: self.name.clone(),
            descriptor: self.descriptor.info(),
            policy,
            batch: matches!(self.handler, HandlerKind::Batch(_)),
            publishes: self.publishes.clone(),
            middleware: self.layers.all().iter().map(|m| m.name()).collect(),
            schemas: self.schemas.clone(),
        }
    }
}

impl<S: Send + Sync + 'static> Registration<S> {
    pub(crate) fn bind(
        self,
        state: Arc<S>,
        observer: Option<Arc<dyn crate::app::Observer>>,
    ) -> Endpoint {
        let info = self.info();
        let codec = self.policy.codec.unwrap_or_default();
        let layers = self.layers.all();
        let handler = match self.handler {
            HandlerKind::Single(call) => {
                let state = Arc::clone(&state);
                let f: Arc<BoundSingle> =
                    Arc::new(move |d, p, n| call(d, Arc::clone(&state), p, n, codec));
                BoundHandler::Single(crate::middleware::wrap_single(f, &layers))
            }
            HandlerKind::Batch(call) => {
                let f: Arc<BoundBatch> =
                    Arc::new(move |d, p, n| call(d, Arc::clone(&state), p, n, codec));
                BoundHandler::Batch(crate::middleware::wrap_batch(f, &layers))
            }
        };
        Endpoint {
            name: Arc::from(self.name),
            descriptor: self.descriptor,
            info: Arc::new(info),
            handler,
            observer,
            idempotency_key: self.idempotency_key,
            codec,
        }
    }
}

type BoundSingle =
    dyn for<'a> Fn(&'a Delivery, &'a dyn Publish, &'a str) -> BoxFuture<'a, Handled> + Send + Sync;
type BoundBatch = dyn for<'a> Fn(&'a [&'a Delivery], &'a dyn Publish, &'a str) -> BoxFuture<'a, Vec<Handled>>
    + Send
    + Sync;

#[derive(Clone)]
enum BoundHandler {
    Single(Arc<BoundSingle>),
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
    observer: Option<Arc<dyn crate::app::Observer>>,
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
        match self.info.policy.handler_timeout {
            Some(limit) => tokio::time::timeout(limit, handling)
                .await
                .map_err(|_| limit),
            None => Ok(handling.await),
        }
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
            BoundHandler::Single(call) => {
                match self.limited(call(delivery, publisher, &self.name)).await {
                    Ok(handled) => handled,
                    Err(limit) => Handled::TimedOut(limit),
                }
            }
            BoundHandler::Batch(call) => {
                let one = [delivery];
                match self.limited(call(&one, publisher, &self.name)).await {
                    Ok(mut handled) => handled
                        .pop()
                        .unwrap_or_else(|| Handled::NoOutcome("empty batch".into())),
                    Err(limit) => Handled::TimedOut(limit),
                }
            }
        };
        let decision = self.decide(delivery, &handled);
        self.observe(delivery, &handled, &decision);
        (handled, decision)
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
                match self.limited(call(&run, publisher, &self.name)).await {
                    Ok(handled) => handled,
                    Err(limit) => vec![Handled::TimedOut(limit); run.len()],
                }
            }
            BoundHandler::Single(call) => {
                let mut out = Vec::with_capacity(run.len());
                for d in &run {
                    out.push(match self.limited(call(d, publisher, &self.name)).await {
                        Ok(handled) => handled,
                        Err(limit) => Handled::TimedOut(limit),
                    });
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
            .map(|(d, h)| {
                let decision = self.decide(d, &h);
                self.observe(d, &h, &decision);
                (h, decision)
            })
            .collect()
    }

    fn observe(&self, delivery: &Delivery, handled: &Handled, decision: &Decision) {
        if let Some(observer) = &self.observer {
            observer.handled(&crate::app::Handling {
                registration: &self.name,
                delivery,
                handled,
                decision,
            });
        }
    }
}

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

/// Something `b.include(..)` mounts: a `#[subscriber]` function, or a descriptor with a
/// handler. `Marker` only tells the impls apart.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be mounted in an app whose state is `{S}`",
    label = "not a subscriber of this app",
    note = "mount an `async fn` marked `#[subscriber(..)]`, or a descriptor with a handler: `CoreSubject::new(\"subject\").handler(MyHandler)`",
    note = "a manual handler implements `Handle<Payload, Outs, {S}>` for this app's state `{S}`, or for any state: `impl<S: Send + Sync + 'static> Handle<Payload, (), S> for MyHandler`"
)]
pub trait Mount<S, Marker>: Sized {
    /// The registration.
    fn mount(self) -> Registration<S>;
}

/// Marks a single-message manual handler mount.
#[doc(hidden)]
pub struct SingleMarker<In, O>(PhantomData<fn(In, O)>);
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
