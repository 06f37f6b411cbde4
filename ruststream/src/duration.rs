//! A duration that is never zero, for settings where zero would mean "never" or "at once".

use std::fmt;
use std::num::NonZeroU64;
use std::time::Duration;

/// A [`Duration`] greater than zero.
///
/// ```
/// use ruststream::{NonZeroDuration, nonzero};
/// use std::time::Duration;
///
/// let wait = NonZeroDuration::from_secs(nonzero!(60));
/// assert_eq!(wait.get(), Duration::from_secs(60));
/// assert!(NonZeroDuration::new(Duration::ZERO).is_none());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NonZeroDuration(Duration);

impl NonZeroDuration {
    /// `duration`, or `None` when it is zero.
    pub const fn new(duration: Duration) -> Option<Self> {
        if duration.is_zero() {
            None
        } else {
            Some(Self(duration))
        }
    }

    /// Whole seconds.
    pub const fn from_secs(secs: NonZeroU64) -> Self {
        Self(Duration::from_secs(secs.get()))
    }

    /// Milliseconds.
    pub const fn from_millis(millis: NonZeroU64) -> Self {
        Self(Duration::from_millis(millis.get()))
    }

    /// The duration.
    pub const fn get(self) -> Duration {
        self.0
    }
}

impl fmt::Debug for NonZeroDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for NonZeroDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl From<NonZeroDuration> for Duration {
    fn from(value: NonZeroDuration) -> Self {
        value.0
    }
}

impl TryFrom<Duration> for NonZeroDuration {
    type Error = ZeroDuration;

    fn try_from(value: Duration) -> Result<Self, Self::Error> {
        Self::new(value).ok_or(ZeroDuration)
    }
}

/// A zero duration was given where only a positive one makes sense.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the duration must be greater than zero")]
pub struct ZeroDuration;
