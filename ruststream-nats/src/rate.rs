//! Logging that a flood cannot turn into a flood of log lines: the first occurrence is logged,
//! then at most one line per period, saying how many were not logged in between.

use std::sync::Mutex;
use std::sync::PoisonError;
use std::time::Duration;

use tokio::time::Instant;

/// How often a rate-limited problem is logged at most.
pub(crate) const LOG_EVERY: Duration = Duration::from_secs(10);

/// One kind of problem, logged at most once per [`LOG_EVERY`].
#[derive(Debug, Default)]
pub(crate) struct RateLimited {
    /// When it was last logged, and how many occurrences were not logged since.
    state: Mutex<Option<(Instant, u64)>>,
}

impl RateLimited {
    pub(crate) const fn new() -> Self {
        Self {
            state: Mutex::new(None),
        }
    }

    /// Whether to log this occurrence: `Some(n)` with the `n` occurrences not logged since the
    /// last line, `None` to stay quiet.
    pub(crate) fn check(&self) -> Option<u64> {
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match &mut *state {
            Some((last, suppressed)) if now.duration_since(*last) < LOG_EVERY => {
                *suppressed += 1;
                None
            }
            other => {
                let suppressed = other.map_or(0, |(_, suppressed)| suppressed);
                *other = Some((now, 0));
                Some(suppressed)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn logs_the_first_then_once_per_period_with_a_count() {
        let limit = RateLimited::new();
        assert_eq!(limit.check(), Some(0));
        for _ in 0..1_000 {
            assert_eq!(limit.check(), None);
        }
        tokio::time::advance(LOG_EVERY).await;
        assert_eq!(limit.check(), Some(1_000));
        assert_eq!(limit.check(), None);
    }
}
