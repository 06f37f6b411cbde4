//! [`LaneKey`]: what `.by_key(..)` and `.by_key_header(..)` put in a registration's policy, the
//! key of a delivery's ordering lane. It reads the key with the idempotency key's machinery
//! (`crate::idempotency::by_payload`, `by_header`): one way to take a key from a message.

use std::fmt;
use std::sync::Arc;

use crate::Delivery;
use crate::codec::Format;
use crate::idempotency::KeyFn;

/// The key of a registration's ordering lanes: deliveries with the same key are handled one
/// after the other, in the order they arrived; different keys in parallel (up to the
/// registration's concurrency). Set with
/// [`Registration::by_key`](crate::Registration::by_key) or
/// [`by_key_header`](crate::Registration::by_key_header); see `docs/consumers.md`.
///
/// Two keys are equal when they read the same source (`payload`, `header <name>`).
#[derive(Clone)]
pub struct LaneKey {
    source: String,
    key: Arc<KeyFn>,
}

impl LaneKey {
    pub(crate) fn new(source: String, key: Arc<KeyFn>) -> Self {
        Self { source, key }
    }

    /// Where the key comes from: `payload` or `header <name>`.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The key of `delivery` (its payload read as `format`), or why it has none.
    ///
    /// # Errors
    ///
    /// Why the delivery has no key: its payload does not decode, the header is missing, the
    /// key is empty.
    pub fn of(&self, delivery: &Delivery, format: Format) -> Result<String, String> {
        (self.key)(delivery, format)
    }
}

impl PartialEq for LaneKey {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Eq for LaneKey {}

impl fmt::Debug for LaneKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("LaneKey").field(&self.source).finish()
    }
}

impl fmt::Display for LaneKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ordered by key ({})", self.source)
    }
}
