use std::num::NonZeroUsize;
use std::time::Duration;

use ruststream::registration::DescriptorInfo;
use ruststream::settle::DeliveryModel;
use ruststream::{Descriptor, WithHandler};

use super::options::{ConsumerOptions, DeliverPolicy, consumer_options};
use crate::transport::ConsumerSpec;

/// `ack_wait` unless the descriptor names another.
pub const DEFAULT_ACK_WAIT: Duration = Duration::from_secs(30);

/// How many messages a batch handler gets at once unless the descriptor names another.
pub(crate) const DEFAULT_BATCH: NonZeroUsize = NonZeroUsize::new(64).expect("64 is not zero");

/// How long one pull waits on the server unless the descriptor names another.
pub(crate) const DEFAULT_PULL_EXPIRY: Duration = Duration::from_secs(30);

/// A subject read from a JetStream stream through a pull consumer: at-least-once delivery,
/// settled on the server.
///
/// ```
/// use ruststream::{NonZeroDuration, nonzero};
/// use ruststream_nats::JetStreamSubject;
/// use std::time::Duration;
///
/// let payments = JetStreamSubject::new("payments.authorized", "PAYMENTS")
///     .durable("capture")
///     .ack_wait(Duration::from_secs(60));
/// assert_eq!(payments.stream(), "PAYMENTS");
/// assert_eq!(payments.ack_wait_duration().as_secs(), 60);
/// // A `NonZeroDuration` says the same, checked at compile time.
/// let same = payments.clone().ack_wait(NonZeroDuration::from_secs(nonzero!(60)));
/// assert_eq!(same, payments);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JetStreamSubject {
    subject: String,
    stream: String,
    durable: Option<String>,
    /// Zero only when given so; the broker refuses it at start.
    ack_wait: Duration,
    max_ack_pending: Option<i64>,
    deliver_policy: DeliverPolicy,
    filter_subject: Option<String>,
    batch: NonZeroUsize,
    max_wait: Option<Duration>,
    expires: Duration,
}

impl JetStreamSubject {
    /// Reads `subject` from `stream`, through an ephemeral consumer unless `.durable(..)` names
    /// one.
    pub fn new(subject: impl Into<String>, stream: impl Into<String>) -> Self {
        Self {
            subject: subject.into(),
            stream: stream.into(),
            durable: None,
            ack_wait: DEFAULT_ACK_WAIT,
            max_ack_pending: None,
            deliver_policy: DeliverPolicy::All,
            filter_subject: None,
            batch: DEFAULT_BATCH,
            max_wait: None,
            expires: DEFAULT_PULL_EXPIRY,
        }
    }

    /// A durable consumer named `name`: it keeps its place across restarts and is shared by
    /// every instance of the service.
    pub fn durable(mut self, name: impl Into<String>) -> Self {
        self.durable = Some(name.into());
        self
    }

    /// How long the server waits for a settlement before delivering again (30 s by default).
    /// Set it above the handler's worst time.
    ///
    /// Takes a `Duration`, as every other duration does, or a `NonZeroDuration`. The server
    /// cannot wait zero: an app with a zero `ack_wait` refuses to start (and `check` fails),
    /// naming the registration.
    pub fn ack_wait(mut self, wait: impl wait::AckWait) -> Self {
        self.ack_wait = wait.into_wait();
        self
    }

    /// How many deliveries may wait for a settlement at once.
    pub fn max_ack_pending(mut self, n: i64) -> Self {
        self.max_ack_pending = Some(n);
        self
    }

    /// Where a new consumer starts in the stream.
    pub fn deliver_policy(mut self, policy: DeliverPolicy) -> Self {
        self.deliver_policy = policy;
        self
    }

    /// Narrows the consumer to `subject` (the descriptor's subject by default).
    pub fn filter_subject(mut self, subject: impl Into<String>) -> Self {
        self.filter_subject = Some(subject.into());
        self
    }

    /// How many messages a batch handler gets at once (64 by default).
    ///
    /// How much the client keeps ahead of the handlers adapts to their pace: up to 256 messages
    /// for fast handlers (a batch handler: its batch size, when more), and never more than they
    /// get through in a tenth of `ack_wait`, so a waiting message does not use up its time to be
    /// settled.
    pub fn batch(mut self, size: NonZeroUsize) -> Self {
        self.batch = size;
        self
    }

    /// How long a batch handler's batch may wait to fill (the linger): once its first message
    /// came, the batch is handed over when it holds `batch` messages or `wait` has passed,
    /// whichever comes first, so light traffic still forms batches. Without it (the default) a
    /// batch is what is ready at once. A message waits at most `wait` longer before its handler
    /// starts; a stop hands the batch being formed over at once. See `docs/consumers.md`.
    pub fn max_wait(mut self, wait: Duration) -> Self {
        self.max_wait = Some(wait);
        self
    }

    /// How long one pull waits on the server for messages (30 s by default).
    pub fn pull_expiry(mut self, expires: Duration) -> Self {
        self.expires = expires;
        self
    }

    /// Pairs the descriptor with a manual handler, for `b.include(..)`.
    pub fn handler<H>(self, handler: H) -> WithHandler<Self, H> {
        WithHandler::new(self, handler)
    }

    /// The subject.
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// The stream.
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// The durable consumer's name, if any.
    pub fn durable_name(&self) -> Option<&str> {
        self.durable.as_deref()
    }

    /// The ack wait.
    pub fn ack_wait_duration(&self) -> Duration {
        self.ack_wait
    }

    /// The max ack pending, if set.
    pub fn max_ack_pending_value(&self) -> Option<i64> {
        self.max_ack_pending
    }

    /// The deliver policy.
    pub fn deliver_policy_value(&self) -> DeliverPolicy {
        self.deliver_policy
    }

    /// The filter subject: the one set, else the subject.
    pub fn filter(&self) -> &str {
        self.filter_subject.as_deref().unwrap_or(&self.subject)
    }

    /// How long a batch may wait to fill, when set.
    pub fn max_wait_duration(&self) -> Option<Duration> {
        self.max_wait
    }

    /// The pull batch size.
    pub fn batch_size(&self) -> NonZeroUsize {
        self.batch
    }

    /// The pull expiry.
    pub fn expires(&self) -> Duration {
        self.expires
    }
}

impl Descriptor for JetStreamSubject {
    fn info(&self) -> DescriptorInfo {
        let mut info = DescriptorInfo::new(DeliveryModel::JetStream, &self.subject);
        info.stream = Some(self.stream.clone());
        info.consumer = self.durable.clone();
        info.ack_wait = Some(self.ack_wait);
        info.wildcard = self.subject.contains(['*', '>']);
        info.kind = "JetStreamSubject";
        info.batch = Some(self.batch);
        info.batch_max_wait = self.max_wait;
        info.broker.insert(ConsumerOptions {
            filter_subject: self.filter_subject.clone(),
            max_ack_pending: self.max_ack_pending,
            deliver_policy: self.deliver_policy,
            pull_expiry: Some(self.expires),
        });
        info
    }

    /// The subject and a filter subject set apart, both under the prefix; the stream and the
    /// consumer keep their names.
    fn prefixed(&self, prefix: &str) -> Option<std::sync::Arc<dyn Descriptor>> {
        let mut routed = self.clone();
        routed.subject = format!("{prefix}.{}", self.subject);
        routed.filter_subject = self
            .filter_subject
            .as_ref()
            .map(|filter| format!("{prefix}.{filter}"));
        Some(std::sync::Arc::new(routed))
    }
}

/// The consumer a JetStream registration reads through, from its descriptor's facts: every
/// default of a JetStream descriptor lives in this file.
pub(crate) fn consumer_spec(info: &DescriptorInfo) -> ConsumerSpec {
    let options = consumer_options(info);
    ConsumerSpec {
        stream: info.stream.clone().unwrap_or_default(),
        durable: info.consumer.clone(),
        filter_subject: options
            .filter_subject
            .unwrap_or_else(|| info.subject.clone()),
        ack_wait: info.ack_wait.unwrap_or(DEFAULT_ACK_WAIT),
        max_ack_pending: options.max_ack_pending,
        deliver_policy: options.deliver_policy,
        batch: info.batch.unwrap_or(DEFAULT_BATCH).get(),
        expires: options.pull_expiry.unwrap_or(DEFAULT_PULL_EXPIRY),
    }
}

pub(super) mod wait {
    use std::time::Duration;

    use ruststream::NonZeroDuration;

    /// What `ack_wait` takes: a `Duration` or a `NonZeroDuration` (a trait only so that anything
    /// else is told how to build one).
    #[diagnostic::on_unimplemented(
        message = "`ack_wait` takes a `Duration`, not `{Self}`",
        label = "not a `Duration`",
        note = "write `.ack_wait(Duration::from_secs(60))` (`std::time::Duration`), or `.ack_wait(NonZeroDuration::from_secs(nonzero!(60)))` to have zero refused at compile time"
    )]
    pub trait AckWait {
        /// The wait.
        fn into_wait(self) -> Duration;
    }

    impl AckWait for Duration {
        fn into_wait(self) -> Duration {
            self
        }
    }

    impl AckWait for NonZeroDuration {
        fn into_wait(self) -> Duration {
            self.get()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use ruststream::{App, AppInfo, Context, Env, ErrorKind, Handle, HandlerOutcome, RustStream};

    use super::JetStreamSubject;

    struct Noop;

    impl Handle<serde_json::Value> for Noop {
        async fn handle(
            &self,
            _: &serde_json::Value,
            _: &(),
            _: &mut Context<'_>,
        ) -> Result<(), HandlerOutcome> {
            Ok(())
        }
    }

    /// The filter subject is one of the descriptor's facts: the broker's `validate` checks it
    /// with the others, before any startup hook and before anything connects.
    #[tokio::test]
    async fn an_invalid_filter_subject_is_refused_before_any_startup_hook() {
        let hook_ran = Arc::new(AtomicBool::new(false));
        let ran = Arc::clone(&hook_ran);
        let app = RustStream::new(AppInfo::new("filters", "0.1.0"))
            .on_startup(async move |()| {
                ran.store(true, Ordering::SeqCst);
                Ok::<_, std::convert::Infallible>(())
            })
            .with_broker(crate::NatsBroker::new("nats://127.0.0.1:1"), |b| {
                b.include(
                    JetStreamSubject::new("orders.created", "ORDERS")
                        .filter_subject("orders..created")
                        .handler(Noop),
                )
                .name("created");
            });
        let err = app.start(Env::new()).await.expect_err("refused");
        assert_eq!(err.kind(), ErrorKind::Config, "{err}");
        assert!(
            err.to_string()
                .contains("registration `created` filters on `orders..created`"),
            "{err}"
        );
        assert!(!hook_ran.load(Ordering::SeqCst), "no startup hook ran");
    }
}
