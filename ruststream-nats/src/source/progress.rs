//! Where a JetStream registration stands in its stream: what a consumer created again starts
//! from, and whether a settlement is stale.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

/// Where a JetStream registration stands in its stream: the stream sequences it took and has not
/// settled yet, and the highest it took.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    inner: Mutex<ProgressInner>,
}

#[derive(Debug, Default)]
struct ProgressInner {
    /// Stream sequences taken and not settled yet.
    unsettled: BTreeMap<u64, Pending>,
    /// One past the highest stream sequence taken.
    next: Option<u64>,
}

/// The deliveries of one stream sequence taken and not settled yet.
#[derive(Debug, Default)]
struct Pending {
    /// How many (a redelivery can be taken while an earlier delivery still runs).
    count: u32,
    /// The highest delivered count among those already settled.
    settled: u64,
}

impl Progress {
    fn lock(&self) -> std::sync::MutexGuard<'_, ProgressInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A delivery of `sequence` was taken for handling.
    pub(crate) fn taken(&self, sequence: u64) {
        let mut inner = self.lock();
        inner.unsettled.entry(sequence).or_default().count += 1;
        let next = sequence.saturating_add(1);
        inner.next = Some(inner.next.map_or(next, |at| at.max(next)));
    }

    /// Delivery `delivered` of `sequence` was settled (or given up on).
    pub(crate) fn settled(&self, sequence: u64, delivered: u64) {
        let mut inner = self.lock();
        if let Some(pending) = inner.unsettled.get_mut(&sequence) {
            pending.count = pending.count.saturating_sub(1);
            pending.settled = pending.settled.max(delivered);
            if pending.count == 0 {
                inner.unsettled.remove(&sequence);
            }
        }
    }

    /// Whether a later delivery of `sequence` than `delivered` was already settled here: this
    /// one's settlement is stale (the server has moved on; a hung handler that finished after
    /// its message was dead-lettered past the cap, say).
    pub(crate) fn superseded(&self, sequence: u64, delivered: u64) -> bool {
        self.lock()
            .unsettled
            .get(&sequence)
            .is_some_and(|pending| pending.settled > delivered)
    }

    /// Where a consumer created again starts: the lowest sequence not settled, or one past the
    /// highest taken; `None` when nothing was taken yet (the descriptor's deliver policy).
    pub(crate) fn resume(&self) -> Option<u64> {
        let inner = self.lock();
        inner.unsettled.keys().next().copied().or(inner.next)
    }
}

#[cfg(test)]
mod tests {
    use super::Progress;

    #[test]
    fn a_consumer_opened_again_starts_where_the_registration_stood() {
        let progress = Progress::default();
        assert_eq!(progress.resume(), None, "nothing taken: the deliver policy");
        progress.taken(5);
        progress.taken(7);
        assert_eq!(progress.resume(), Some(5), "the lowest unsettled");
        progress.settled(5, 1);
        assert_eq!(progress.resume(), Some(7));
        progress.taken(7); // a redelivery while the first still runs
        assert!(!progress.superseded(7, 1));
        progress.settled(7, 2);
        assert!(progress.superseded(7, 1), "the later delivery was settled");
        assert_eq!(progress.resume(), Some(7));
        progress.settled(7, 1);
        assert!(!progress.superseded(7, 1), "forgotten once all are settled");
        assert_eq!(progress.resume(), Some(8), "one past the highest taken");
        progress.settled(8, 1); // never taken: ignored
        assert_eq!(progress.resume(), Some(8));
    }
}
