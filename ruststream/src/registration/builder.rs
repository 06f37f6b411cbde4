//! [`Registration`]: one mounted handler with its descriptor and policy, and the chain the mount
//! site calls on it (`.max_attempts(..)`, `.dead_letter(..)`, `.retry_to(..)`, ..).

use std::fmt;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::de::DeserializeOwned;

use super::descriptor::Descriptor;
use super::info::RegistrationInfo;
use super::policy::{OnFailure, Policy};
use super::schemas::{Schemas, declared_schema};
use crate::codec::Format;
use crate::delivery::Delivery;
use crate::error::{Error, ErrorKind};
use crate::handled::Handled;
use crate::middleware::Middleware;
use crate::publish::Publish;

/// A batch handler, erased over its payload and outputs: called with the deliveries, the state,
/// the publisher, the registration's name and its payload format.
pub(super) type BatchFn<S> = dyn for<'a> Fn(
        &'a [&'a Delivery],
        Arc<S>,
        &'a dyn Publish,
        &'a str,
        Format,
    ) -> BoxFuture<'a, Vec<Handled>>
    + Send
    + Sync;

/// A registration's handler: of single messages, or of batches.
pub(super) enum HandlerKind<S> {
    Single(Arc<dyn super::typed::BindSingle<S>>),
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
    pub(super) name: String,
    pub(super) descriptor: Arc<dyn Descriptor>,
    pub(super) handler: HandlerKind<S>,
    pub(super) policy: Policy,
    pub(super) publishes: Vec<&'static str>,
    pub(super) layers: LayerStack,
    pub(super) schemas: Schemas,
    pub(super) unroutable: Option<String>,
    pub(super) idempotency_key: Option<Arc<crate::idempotency::KeyFn>>,
    pub(super) answers_requests: bool,
    pub(super) group: Option<String>,
}

/// A registration's middleware by scope, each outermost first.
#[derive(Clone, Default)]
pub(super) struct LayerStack {
    app: Vec<Arc<dyn Middleware>>,
    broker: Vec<Arc<dyn Middleware>>,
    router: Vec<Arc<dyn Middleware>>,
    own: Vec<Arc<dyn Middleware>>,
}

impl LayerStack {
    /// Every layer, outermost first: the app's, the broker's, the registration's.
    pub(super) fn all(&self) -> Vec<Arc<dyn Middleware>> {
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

    /// Runs the handler's calls on `threads` OS threads of this registration's own (named
    /// `<registration>-<i>`, each with a current-thread tokio runtime), so that a handler that
    /// computes for long does not hold a worker of the app's runtime: the other registrations,
    /// and this one's settlements, go on meanwhile. Decoding, the layers, the handler and what
    /// it publishes run there; the timeout and the settlement stay on the app's runtime. The
    /// concurrency must be at least `threads` (checked at startup). Single handlers only.
    /// Shown in `describe`. See `docs/consumers.md`.
    pub fn threads(&mut self, threads: NonZeroUsize) -> &mut Self {
        self.policy.threads = Some(threads);
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
            Some(routed) => {
                self.descriptor = routed;
                self.group = Some(match self.group.take() {
                    Some(inner) => format!("{prefix}.{inner}"),
                    None => prefix.to_owned(),
                });
            }
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
    pub(crate) fn check_routed(&self) -> Result<(), Error> {
        if let Some(reason) = &self.unroutable {
            return Err(Error::new(ErrorKind::Config, reason.clone()));
        }
        self.check_idempotency()?;
        self.check_lanes()?;
        let batch = matches!(self.handler, HandlerKind::Batch(_));
        super::threads::check(&self.name, &self.policy, batch)
    }

    /// An error when the registration's ordering lanes cannot keep their promise.
    fn check_lanes(&self) -> Result<(), Error> {
        let Some(lanes) = &self.policy.lanes else {
            return Ok(());
        };
        let refuse = |why: &str| {
            Err(Error::new(
                ErrorKind::Config,
                format!("registration `{}` is {lanes}, and {why}", self.name),
            ))
        };
        if matches!(self.handler, HandlerKind::Batch(_)) {
            return refuse(
                "a batch handler takes its messages together, not one after the other; take one message per call",
            );
        }
        if self.policy.concurrency.get() == 1 {
            return refuse(
                "its concurrency is 1: every message is handled in order already; raise it with `.concurrency(nonzero!(16))`, or drop the key",
            );
        }
        if self.descriptor.info().model != crate::settle::DeliveryModel::JetStream {
            return refuse(
                "ordering lanes run on JetStream only: a Core message waiting in a lane, or retried in it, exists only in this process (a stop or a crash loses it), and a Core retry is a copy that comes back behind later messages; read the subject through a stream (`JetStreamSubject`)",
            );
        }
        Ok(())
    }

    fn check_idempotency(&self) -> Result<(), Error> {
        let config = |reason: String| Err(Error::new(ErrorKind::Config, reason));
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

    /// Handles the messages of one key in order, and different keys in parallel: `key` makes
    /// the key of a message from its payload (decoded as `T` with the registration's codec).
    /// A message waits while an earlier message of its key is being handled, and a `retry()`
    /// or `retry_after(..)` runs again in its place (its attempt counting against the cap)
    /// before the next message of its key. JetStream single handlers with a concurrency above
    /// 1 only (checked at startup). Shown in `describe`. See `docs/consumers.md`.
    pub fn by_key<T, K>(&mut self, key: impl Fn(&T) -> K + Send + Sync + 'static) -> &mut Self
    where
        T: DeserializeOwned + Send + 'static,
        K: fmt::Display,
    {
        let key = crate::idempotency::lane_by_payload(key);
        self.policy.lanes = Some(super::LaneKey::new("payload".to_owned(), key));
        self
    }

    /// Like [`by_key`](Self::by_key), the key being the value of header `name`.
    pub fn by_key_header(&mut self, name: impl Into<String>) -> &mut Self {
        let name = name.into();
        let source = format!("header {name}");
        let key = crate::idempotency::lane_by_header(name);
        self.policy.lanes = Some(super::LaneKey::new(source, key));
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
            answers_requests: self.answers_requests,
            group: self.group.clone(),
        }
    }

    /// Marks the handler as answering requests (`#[subscriber(.., reply)]`): what the broker's
    /// startup checks look for in a stream that would answer them first.
    #[doc(hidden)]
    pub fn __answers_requests(mut self) -> Self {
        self.answers_requests = true;
        self
    }
}

impl<S> Registration<S> {
    /// Declares the JSON Schema of the payload, from `T` (`asyncapi`), in place of the one
    /// traced from the payload type's `Deserialize` impl.
    pub fn payload_schema<T: schemars::JsonSchema>(&mut self) -> &mut Self {
        self.schemas.payload = Some(declared_schema::<T>);
        self
    }

    /// Declares the JSON Schema of what the handler publishes and answers with, from `T`
    /// (`asyncapi`).
    pub fn reply_schema<T: schemars::JsonSchema>(&mut self) -> &mut Self {
        self.schemas.reply = Some(declared_schema::<T>);
        self.schemas.reply_type = Some(std::any::type_name::<T>());
        self
    }
}
