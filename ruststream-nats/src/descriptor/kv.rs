use std::time::Duration;

use ruststream::registration::DescriptorInfo;
use ruststream::settle::DeliveryModel;
use ruststream::{Descriptor, WithDeliveryHandler};

use super::jetstream::{DEFAULT_ACK_WAIT, wait};
use super::options::{ConsumerOptions, DeliverPolicy};

/// The changes of a key-value bucket, read through a pull consumer on the bucket's stream
/// (`KV_<bucket>`, subjects `$KV.<bucket>.<key>`): every put, delete and purge is a JetStream
/// delivery, settled like any other (a retry brings the same revision back, the cap and the
/// dead letter apply, a durable goes on where it stopped). Its handler takes
/// [`&KvChange<T>`](crate::KvChange).
///
/// ```
/// use std::time::Duration;
/// use ruststream_nats::KvChanges;
///
/// let config = KvChanges::new("config")
///     .keys("app.>")
///     .durable("config-watcher")
///     .latest_per_key()
///     .ack_wait(Duration::from_secs(10));
/// assert_eq!(config.stream(), "KV_config");
/// assert_eq!(config.subject(), "$KV.config.app.>");
/// ```
///
/// By default every revision the bucket holds is delivered, oldest first, one at a time: a
/// revision waiting for its retry holds back the later ones (`max_ack_pending` 1), so the
/// handler sees the changes in revision order. `.max_ack_pending(n)` lets `n` be in flight at
/// once: faster, and a retried revision then comes back after later ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvChanges {
    bucket: String,
    keys: String,
    subject: String,
    stream: String,
    durable: Option<String>,
    ack_wait: Duration,
    max_ack_pending: i64,
    deliver_policy: DeliverPolicy,
}

impl KvChanges {
    /// Every key of bucket `bucket`, every revision, through an ephemeral consumer unless
    /// `.durable(..)` names one.
    pub fn new(bucket: impl Into<String>) -> Self {
        let bucket = bucket.into();
        Self {
            subject: format!("$KV.{bucket}.>"),
            stream: format!("KV_{bucket}"),
            bucket,
            keys: ">".to_owned(),
            durable: None,
            ack_wait: DEFAULT_ACK_WAIT,
            max_ack_pending: 1,
            deliver_policy: DeliverPolicy::All,
        }
    }

    /// Only the keys `pattern` matches (`app.>`, `limits.*`, or one key): a subject pattern
    /// over the keys, without the `$KV.<bucket>.` prefix. All keys by default.
    pub fn keys(mut self, pattern: impl Into<String>) -> Self {
        self.keys = pattern.into();
        self.subject = format!("$KV.{}.{}", self.bucket, self.keys);
        self
    }

    /// A durable consumer named `name`: it keeps its place across restarts and is shared by
    /// every instance of the service.
    pub fn durable(mut self, name: impl Into<String>) -> Self {
        self.durable = Some(name.into());
        self
    }

    /// A new consumer starts with the latest revision of each key (a delete or a purge, when
    /// that is the latest), then every change after it: what a configuration watcher wants.
    /// By default it starts with every revision the bucket holds. A durable that exists goes on
    /// where it stopped either way.
    pub fn latest_per_key(mut self) -> Self {
        self.deliver_policy = DeliverPolicy::LastPerSubject;
        self
    }

    /// Only changes made after the consumer was created.
    pub fn new_changes_only(mut self) -> Self {
        self.deliver_policy = DeliverPolicy::New;
        self
    }

    /// How long the server waits for a settlement before delivering again (30 s by default).
    pub fn ack_wait(mut self, wait: impl wait::AckWait) -> Self {
        self.ack_wait = wait.into_wait();
        self
    }

    /// How many changes may wait for a settlement at once (1 by default: in revision order,
    /// even through retries).
    pub fn max_ack_pending(mut self, n: i64) -> Self {
        self.max_ack_pending = n;
        self
    }

    /// Pairs the descriptor with a manual handler (`Handle<KvChange<T>>`), for `b.include(..)`.
    pub fn handler<H>(self, handler: H) -> WithDeliveryHandler<Self, H> {
        WithDeliveryHandler::new(self, handler)
    }

    /// The bucket.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The bucket's stream, `KV_<bucket>`.
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// The subjects read, `$KV.<bucket>.<keys>`.
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// The durable consumer's name, if any.
    pub fn durable_name(&self) -> Option<&str> {
        self.durable.as_deref()
    }

    /// Where a new consumer starts.
    pub fn deliver_policy_value(&self) -> DeliverPolicy {
        self.deliver_policy
    }
}

impl Descriptor for KvChanges {
    fn info(&self) -> DescriptorInfo {
        let mut info = DescriptorInfo::new(DeliveryModel::JetStream, &self.subject);
        info.stream = Some(self.stream.clone());
        info.consumer = self.durable.clone();
        info.ack_wait = Some(self.ack_wait);
        info.wildcard = self.subject.contains(['*', '>']);
        info.kind = "KvChanges";
        info.bucket = Some(self.bucket.clone());
        info.bucket_changes = Some(match self.deliver_policy {
            DeliverPolicy::LastPerSubject => "latest per key",
            DeliverPolicy::New => "new changes only",
            _ => "every revision",
        });
        info.broker.insert(ConsumerOptions {
            max_ack_pending: Some(self.max_ack_pending),
            deliver_policy: self.deliver_policy,
            ..ConsumerOptions::default()
        });
        info
    }
}

/// The bucket registration `info` reads the changes of, when it is a [`KvChanges`] one.
pub(crate) fn bucket_of(info: &DescriptorInfo) -> Option<&str> {
    info.bucket.as_deref()
}
