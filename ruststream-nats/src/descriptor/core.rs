use std::num::NonZeroUsize;
use std::time::Duration;

use ruststream::registration::DescriptorInfo;
use ruststream::settle::DeliveryModel;
use ruststream::{Descriptor, WithHandler};

use super::JetStreamOnly;

/// One Core NATS subject: at-most-once delivery, nothing to acknowledge.
///
/// A string literal in `#[subscriber("orders.shipped")]` is a `CoreSubject`. A retry copy of a
/// Core message is published back to this subject.
///
/// ```
/// use ruststream_nats::CoreSubject;
///
/// let notices = CoreSubject::new("orders.shipped").queue_group("mailers");
/// assert_eq!(notices.subject(), "orders.shipped");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoreSubject {
    subject: String,
    queue_group: Option<String>,
    retry_to: Option<String>,
    batch: CoreBatch,
}

/// How a Core descriptor gathers messages for a batch handler: gathered in the client, since a
/// Core subscription delivers each message as it is published.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct CoreBatch {
    pub(super) size: Option<NonZeroUsize>,
    pub(super) max_wait: Option<Duration>,
}

impl CoreBatch {
    /// Writes the batch size and the linger into `info`, when set.
    pub(super) fn describe(self, info: &mut DescriptorInfo) {
        info.batch = self.size;
        info.batch_max_wait = self.max_wait;
    }
}

/// The batch options of a Core descriptor (`CoreSubject`, `CoreWildcard`), whose `batch` field is
/// a [`CoreBatch`]: written once for both.
macro_rules! core_batch_options {
    ($ty:ident) => {
        /// How many messages a batch handler (payload `&[T]`) gets at once: 64 by default. The
        /// client gathers them as they arrive; each message is still settled on its own, with
        /// Core semantics (see `docs/consumers.md`, "Core batches"). Only a batch handler reads
        /// it: on a handler of single messages the app refuses to start.
        ///
        /// ```
        /// use ruststream::nonzero;
        #[doc = concat!("use ruststream_nats::", stringify!($ty), ";")]
        /// use std::time::Duration;
        ///
        #[doc = concat!("let readings = ", stringify!($ty), "::new(\"sensors.readings\")")]
        ///     .batch(nonzero!(100))
        ///     .max_wait(Duration::from_millis(200));
        /// assert_eq!(readings.batch_size().get(), 100);
        /// assert_eq!(readings.max_wait_duration(), Some(Duration::from_millis(200)));
        /// ```
        pub fn batch(mut self, size: std::num::NonZeroUsize) -> Self {
            self.batch.size = Some(size);
            self
        }

        /// How long a batch handler's batch may wait to fill (the linger): once its first
        /// message came, the batch is handed over when it holds `batch` messages or `wait` has
        /// passed, whichever comes first. Without it a batch is what is ready at once. A request
        /// in the batch is answered up to `wait` later; a stop hands the batch being formed over
        /// at once.
        pub fn max_wait(mut self, wait: std::time::Duration) -> Self {
            self.batch.max_wait = Some(wait);
            self
        }

        /// The batch size: the one set, else the default of 64.
        pub fn batch_size(&self) -> std::num::NonZeroUsize {
            self.batch.size.unwrap_or(crate::descriptor::DEFAULT_BATCH)
        }

        /// How long a batch may wait to fill, when set.
        pub fn max_wait_duration(&self) -> Option<std::time::Duration> {
            self.batch.max_wait
        }
    };
}
pub(super) use core_batch_options;

impl CoreSubject {
    /// Reads `subject`.
    pub fn new(subject: impl Into<String>) -> Self {
        Self {
            subject: subject.into(),
            queue_group: None,
            retry_to: None,
            batch: CoreBatch::default(),
        }
    }

    core_batch_options!(CoreSubject);

    /// Publishes retry copies to `subject` instead of this one.
    ///
    /// By default a copy goes back to the subject read, so every other subscriber of that
    /// subject (other services, other queue groups, a stream storing it) sees each retry as a
    /// new message. A subject of its own keeps retries apart; something must read it (another
    /// registration, or this handler mounted on it too). A `.retry_to(..)` at the mount site
    /// wins over this one. See `docs/at-most-once.md`.
    ///
    /// ```
    /// use ruststream_nats::CoreSubject;
    ///
    /// let notices = CoreSubject::new("orders.shipped").retry_to("orders.shipped.retry");
    /// assert_eq!(notices.retry_target(), "orders.shipped.retry");
    /// ```
    pub fn retry_to(mut self, subject: impl Into<String>) -> Self {
        self.retry_to = Some(subject.into());
        self
    }

    /// Where a retry copy goes: the `retry_to` subject, else the subject read.
    pub fn retry_target(&self) -> &str {
        self.retry_to.as_deref().unwrap_or(&self.subject)
    }

    /// Shares the subject with the other members of queue group `name`: each message goes to
    /// one of them.
    pub fn queue_group(mut self, name: impl Into<String>) -> Self {
        self.queue_group = Some(name.into());
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

    /// The queue group, if any.
    pub fn group(&self) -> Option<&str> {
        self.queue_group.as_deref()
    }

    #[doc(hidden)]
    pub fn durable<N: Into<String>>(self, _name: N) -> Self
    where
        Self: JetStreamOnly<N>,
    {
        self
    }

    #[doc(hidden)]
    pub fn ack_wait<W>(self, _wait: W) -> Self
    where
        Self: JetStreamOnly<W>,
    {
        self
    }

    #[doc(hidden)]
    pub fn max_ack_pending<N: Into<i64>>(self, _n: N) -> Self
    where
        Self: JetStreamOnly<N>,
    {
        self
    }
}

impl Descriptor for CoreSubject {
    fn info(&self) -> DescriptorInfo {
        let mut info = DescriptorInfo::new(DeliveryModel::Core, &self.subject)
            .with_copy_target(self.retry_target());
        info.queue_group = self.queue_group.clone();
        info.kind = "CoreSubject";
        self.batch.describe(&mut info);
        info
    }

    fn prefixed(&self, prefix: &str) -> Option<std::sync::Arc<dyn Descriptor>> {
        let mut routed = self.clone();
        routed.subject = format!("{prefix}.{}", self.subject);
        Some(std::sync::Arc::new(routed))
    }
}
