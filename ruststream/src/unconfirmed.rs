//! The log of outputs a stream did not confirm, rate-limited: a stream that stays full makes its
//! inputs come back at once, again and again, and one error line per attempt would flood the
//! log.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// At most one line per this interval; the lines in between are counted.
pub(crate) const EVERY: Duration = Duration::from_secs(1);

static LAST: AtomicU64 = AtomicU64::new(0);
static SUPPRESSED: AtomicU64 = AtomicU64::new(0);

fn now_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    let start = *START.get_or_init(Instant::now);
    // +1: 0 means "never logged".
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX - 1) + 1
}

/// Whether to log now, and how many lines were left out since the last one.
pub(crate) fn log_now() -> Option<u64> {
    let now = now_ms();
    let last = LAST.load(Ordering::Relaxed);
    let every = u64::try_from(EVERY.as_millis()).unwrap_or(1000);
    if last != 0 && now.saturating_sub(last) < every {
        SUPPRESSED.fetch_add(1, Ordering::Relaxed);
        return None;
    }
    if LAST
        .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
        .is_err()
    {
        SUPPRESSED.fetch_add(1, Ordering::Relaxed);
        return None;
    }
    Some(SUPPRESSED.swap(0, Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_a_second_and_a_count_of_the_others() {
        assert!(log_now().is_some(), "the first is logged");
        assert_eq!(log_now(), None);
        assert_eq!(log_now(), None);
        std::thread::sleep(EVERY + Duration::from_millis(50));
        assert_eq!(log_now(), Some(2), "the next says how many were left out");
    }
}
