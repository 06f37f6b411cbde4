//! One message as a broker handed it to the runtime, in terms every broker shares.

use std::any::{Any, TypeId};
use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;

use bytes::Bytes;

/// Message headers: an ordered list of name and value pairs; a name may repeat.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Headers {
    entries: Vec<(Arc<str>, Arc<str>)>,
}

impl Headers {
    /// No headers.
    pub const fn new() -> Self {
        Self {
            entries: Vec::new(),
        }
    }

    /// The first value of `name`, compared case-sensitively as NATS does.
    #[inline]
    pub fn get(&self, name: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(n, _)| &**n == name)
            .map(|(_, v)| &**v)
    }

    /// Every value of `name`.
    pub fn get_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.entries
            .iter()
            .filter(move |(n, _)| &**n == name)
            .map(|(_, v)| &**v)
    }

    /// Adds a value to `name`, keeping the ones already there.
    pub fn append(&mut self, name: impl Into<Arc<str>>, value: impl Into<Arc<str>>) {
        self.entries.push((name.into(), value.into()));
    }

    /// Sets `name` to one value, replacing any others.
    pub fn insert(&mut self, name: impl Into<Arc<str>>, value: impl Into<Arc<str>>) {
        let name = name.into();
        self.entries.retain(|(n, _)| *n != name);
        self.entries.push((name, value.into()));
    }

    /// Removes every value of `name`.
    pub fn remove(&mut self, name: &str) {
        self.entries.retain(|(n, _)| &**n != name);
    }

    /// Every pair, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(n, v)| (&**n, &**v))
    }

    /// Whether there are no headers.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many pairs there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

impl fmt::Debug for Headers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<N: Into<Arc<str>>, V: Into<Arc<str>>> FromIterator<(N, V)> for Headers {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(iter: I) -> Self {
        Self {
            entries: iter
                .into_iter()
                .map(|(n, v)| (n.into(), v.into()))
                .collect(),
        }
    }
}

/// Typed values a broker attaches to a delivery (a stream sequence, a consumer name), read with
/// [`Delivery::extension`] or a broker's own [`Key`](crate::Key).
#[derive(Default, Clone)]
pub struct Extensions {
    // A broker attaches one or two per delivery: the first in place, the rest in a list,
    // searched in order (cheaper than hashing, and no allocation besides the value's own).
    first: Option<Extension>,
    more: Vec<Extension>,
}

// Shared, so that a delivery can be copied for a call on a registration's threads.
type Extension = (TypeId, Arc<dyn Any + Send + Sync>);

impl Extensions {
    /// Stores `value`, replacing one of the same type.
    pub fn insert<T: Send + Sync + 'static>(&mut self, value: T) {
        let id = TypeId::of::<T>();
        let value: Arc<dyn Any + Send + Sync> = Arc::new(value);
        if let Some((_, slot)) = self
            .first
            .iter_mut()
            .chain(self.more.iter_mut())
            .find(|(t, _)| *t == id)
        {
            *slot = value;
        } else if self.first.is_none() {
            self.first = Some((id, value));
        } else {
            self.more.push((id, value));
        }
    }

    /// The stored value of type `T`.
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.find()
    }

    /// [`get`](Self::get) for any `T`: one that is not `Send + Sync` was never stored.
    pub(crate) fn find<T: 'static>(&self) -> Option<&T> {
        let id = TypeId::of::<T>();
        self.first
            .iter()
            .chain(self.more.iter())
            .find(|(t, _)| *t == id)
            .and_then(|(_, v)| v.downcast_ref())
    }
}

impl fmt::Debug for Extensions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = usize::from(self.first.is_some()) + self.more.len();
        write!(f, "Extensions({n})")
    }
}

/// One message as it arrived, with the facts the runtime and the extractors need.
///
/// Its parts live in one heap block, so a delivery moves as a pointer: on its way from the
/// wire to the handler's call and back to the settlement it is handed on by value many times.
pub struct Delivery(Box<Parts>);

/// What a [`Delivery`] holds.
struct Parts {
    subject: Arc<str>,
    payload: Bytes,
    headers: Headers,
    reply: Option<Arc<str>>,
    delivered: Option<u64>,
    attempt: NonZeroU32,
    /// The registration's cap, as the broker handed the delivery over.
    max_attempts: Option<NonZeroU32>,
    extensions: Extensions,
    /// What its handler registered with `Context::after_ack`.
    after_ack: crate::after_ack::Slot,
}

impl Parts {
    /// A first attempt on `subject`, with nothing else set.
    #[inline]
    fn fresh(subject: Arc<str>, payload: Bytes) -> Self {
        Self {
            subject,
            payload,
            headers: Headers::new(),
            reply: None,
            delivered: None,
            attempt: NonZeroU32::MIN,
            max_attempts: None,
            extensions: Extensions::default(),
            after_ack: crate::after_ack::Slot::default(),
        }
    }
}

impl Delivery {
    /// A copy of this delivery, its extensions shared: what a call on a registration's threads
    /// (`.threads(n)`) owns while the original stays with the broker.
    pub(crate) fn duplicate(&self) -> Self {
        let p = &*self.0;
        Self(Box::new(Parts {
            subject: Arc::clone(&p.subject),
            payload: p.payload.clone(),
            headers: p.headers.clone(),
            reply: p.reply.clone(),
            delivered: p.delivered,
            attempt: p.attempt,
            max_attempts: p.max_attempts,
            extensions: p.extensions.clone(),
            after_ack: p.after_ack.duplicate(),
        }))
    }

    /// A delivery on `subject`, first attempt, no server-side count.
    // Inlined: a broker builds each delivery with these, which would otherwise move it
    // whole in and out of each call.
    #[inline]
    pub fn new(subject: impl Into<Arc<str>>, payload: Bytes) -> Self {
        Self(Box::new(Parts::fresh(subject.into(), payload)))
    }

    /// This delivery's allocation made over for a new message: the same as
    /// [`Delivery::new`]`(subject, payload)`, keeping nothing of this one. A broker that is done
    /// with a delivery builds its next one this way, without allocating.
    #[inline]
    pub fn renew(mut self, subject: impl Into<Arc<str>>, payload: Bytes) -> Self {
        *self.0 = Parts::fresh(subject.into(), payload);
        self
    }

    /// Sets the headers.
    #[inline]
    pub fn with_headers(mut self, headers: Headers) -> Self {
        self.0.headers = headers;
        self
    }

    /// Sets the reply subject the publisher asked for.
    #[inline]
    pub fn with_reply(mut self, reply: Option<Arc<str>>) -> Self {
        self.0.reply = reply;
        self
    }

    /// Sets the server's delivery count (JetStream).
    #[inline]
    pub fn with_delivered(mut self, delivered: Option<u64>) -> Self {
        self.0.delivered = delivered;
        self
    }

    /// Sets the attempt number the cap counts.
    #[inline]
    pub fn with_attempt(mut self, attempt: NonZeroU32) -> Self {
        self.0.attempt = attempt;
        self
    }

    /// Sets the cap of the registration the delivery is handed to (`max_attempts`, the first
    /// delivery counting as one; `None`: no cap).
    #[inline]
    pub fn with_max_attempts(mut self, max_attempts: Option<NonZeroU32>) -> Self {
        self.0.max_attempts = max_attempts;
        self
    }

    /// The subject the message arrived on.
    pub fn subject(&self) -> &str {
        &self.0.subject
    }

    /// The subject as a shared string.
    pub fn subject_arc(&self) -> &Arc<str> {
        &self.0.subject
    }

    /// The payload bytes, as they arrived.
    pub fn payload(&self) -> &Bytes {
        &self.0.payload
    }

    /// The headers, as they arrived.
    pub fn headers(&self) -> &Headers {
        &self.0.headers
    }

    /// The reply subject the publisher asked for, if any.
    pub fn reply(&self) -> Option<&str> {
        self.0.reply.as_deref()
    }

    /// The reply subject as a shared string, if any.
    pub fn reply_arc(&self) -> Option<&Arc<str>> {
        self.0.reply.as_ref()
    }

    /// The server's delivery count: `Some(1)` on a first JetStream delivery, `None` on Core.
    pub fn delivered(&self) -> Option<u64> {
        self.0.delivered
    }

    /// The attempt number the cap counts; the first delivery is 1.
    pub fn attempt(&self) -> NonZeroU32 {
        self.0.attempt
    }

    /// The cap of the registration handling the delivery, the first delivery counting as one;
    /// `None` without a cap.
    pub fn max_attempts(&self) -> Option<NonZeroU32> {
        self.0.max_attempts
    }

    /// Whether this is the last attempt the cap allows: a retry now brings the message back no
    /// more (it goes to the dead-letter subject, or ends). `false` without a cap.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use ruststream::Delivery;
    /// use std::num::NonZeroU32;
    ///
    /// let cap = NonZeroU32::new(2);
    /// let first = Delivery::new("orders.created", Bytes::new()).with_max_attempts(cap);
    /// assert!(!first.is_last_attempt());
    /// let second = first.with_attempt(NonZeroU32::new(2).expect("2 is not zero"));
    /// assert!(second.is_last_attempt());
    /// assert!(!second.with_max_attempts(None).is_last_attempt());
    /// ```
    pub fn is_last_attempt(&self) -> bool {
        self.0.max_attempts.is_some_and(|cap| self.0.attempt >= cap)
    }

    /// The broker's typed extras.
    pub fn extensions(&self) -> &Extensions {
        &self.0.extensions
    }

    /// The broker's typed extras, to add to.
    pub fn extensions_mut(&mut self) -> &mut Extensions {
        &mut self.0.extensions
    }

    /// One typed extra.
    pub fn extension<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.0.extensions.get()
    }

    /// Keeps `hook` to run once the delivery is acknowledged ([`crate::Context::after_ack`]).
    pub(crate) fn push_after_ack(
        &self,
        hook: std::pin::Pin<Box<dyn Future<Output = ()> + Send + 'static>>,
    ) {
        self.0.after_ack.push(hook);
    }

    /// The hooks its handler registered with [`Context::after_ack`](crate::Context::after_ack),
    /// taken: a broker runs them once the delivery's acknowledgement reached the server, and
    /// drops them when the delivery was settled any other way.
    #[inline]
    pub fn take_after_ack(&self) -> crate::AfterAck {
        self.0.after_ack.take()
    }
}

impl fmt::Debug for Delivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Parts {
            subject,
            payload,
            headers,
            reply,
            delivered,
            attempt,
            max_attempts,
            extensions,
            after_ack,
        } = &*self.0;
        f.debug_struct("Delivery")
            .field("subject", subject)
            .field("payload", payload)
            .field("headers", headers)
            .field("reply", reply)
            .field("delivered", delivered)
            .field("attempt", attempt)
            .field("max_attempts", max_attempts)
            .field("extensions", extensions)
            .field("after_ack", after_ack)
            .finish()
    }
}

/// A message to publish.
#[derive(Debug, Clone)]
pub struct OutboundMessage {
    /// Where it goes.
    pub subject: Arc<str>,
    /// Its headers.
    pub headers: Headers,
    /// Its encoded payload.
    pub payload: Bytes,
}

impl OutboundMessage {
    /// A message with no headers.
    pub fn new(subject: impl Into<Arc<str>>, payload: Bytes) -> Self {
        Self {
            subject: subject.into(),
            headers: Headers::new(),
            payload,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A delivery moves as one pointer (its parts are boxed): the hot path hands it on by value
    /// many times per message. A field added to `Delivery` itself instead of `Parts` fails here.
    #[test]
    fn a_delivery_is_one_pointer() {
        assert_eq!(size_of::<Delivery>(), size_of::<usize>());
    }

    #[test]
    fn a_renewed_delivery_keeps_nothing_of_the_last_one() {
        let mut headers = Headers::new();
        headers.insert("k", "v");
        let mut spent = Delivery::new("orders.placed", Bytes::from_static(b"{}"))
            .with_headers(headers)
            .with_reply(Some(Arc::from("_INBOX.1")))
            .with_delivered(Some(3))
            .with_attempt(NonZeroU32::new(2).expect("not zero"))
            .with_max_attempts(NonZeroU32::new(5));
        spent.extensions_mut().insert(7_u64);
        spent.push_after_ack(Box::pin(async {}));
        let at = &*spent.0 as *const Parts;
        let renewed = spent.renew("orders.paid", Bytes::from_static(b"[]"));
        assert_eq!(&*renewed.0 as *const Parts, at, "the allocation is reused");
        let fresh = Delivery::new("orders.paid", Bytes::from_static(b"[]"));
        assert_eq!(format!("{renewed:?}"), format!("{fresh:?}"));
        assert_eq!(renewed.extension::<u64>(), None);
        assert!(renewed.take_after_ack().is_empty());
    }

    #[test]
    fn the_builder_sets_each_part() {
        let mut headers = Headers::new();
        headers.insert("k", "v");
        let delivery = Delivery::new("orders.placed", Bytes::from_static(b"{}"))
            .with_headers(headers)
            .with_reply(Some(Arc::from("_INBOX.1")))
            .with_delivered(Some(3))
            .with_attempt(NonZeroU32::new(2).expect("not zero"));
        assert_eq!(delivery.subject(), "orders.placed");
        assert_eq!(delivery.payload().as_ref(), b"{}");
        assert_eq!(delivery.headers().get("k"), Some("v"));
        assert_eq!(delivery.reply(), Some("_INBOX.1"));
        assert_eq!(delivery.delivered(), Some(3));
        assert_eq!(delivery.attempt().get(), 2);
        let printed = format!("{delivery:?}");
        assert!(printed.starts_with("Delivery {"), "{printed}");
        assert!(printed.contains("orders.placed"), "{printed}");
    }
}
