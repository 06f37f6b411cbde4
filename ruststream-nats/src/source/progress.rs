//! Where a JetStream registration stands in its stream: what a consumer created again starts
//! from, and whether a settlement is stale.

use std::sync::{Mutex, PoisonError};

/// Where a JetStream registration stands in its stream: the stream sequences it took and has not
/// settled yet, and the highest it took.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    inner: Mutex<ProgressInner>,
}

#[derive(Debug, Default)]
struct ProgressInner {
    /// Stream sequences taken and not settled yet, in ascending order. Few: at most the
    /// handlers in flight. A sorted `Vec`, not a `BTreeMap`: every delivery is taken and settled
    /// here, and one handler at a time this is one slot, found and emptied in a few
    /// instructions, where the map's search and rebalancing ran about 250 (callgrind) through
    /// code of its own that a message's turn had to fetch again.
    unsettled: Vec<(u64, Pending)>,
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
        match inner.find(sequence) {
            Ok(at) => inner.unsettled[at].1.count += 1,
            Err(at) => inner.unsettled.insert(
                at,
                (
                    sequence,
                    Pending {
                        count: 1,
                        settled: 0,
                    },
                ),
            ),
        }
        let next = sequence.saturating_add(1);
        inner.next = Some(inner.next.map_or(next, |at| at.max(next)));
    }

    /// Delivery `delivered` of `sequence` was settled (or given up on).
    pub(crate) fn settled(&self, sequence: u64, delivered: u64) {
        let mut inner = self.lock();
        if let Ok(at) = inner.find(sequence) {
            let pending = &mut inner.unsettled[at].1;
            pending.count = pending.count.saturating_sub(1);
            pending.settled = pending.settled.max(delivered);
            if pending.count == 0 {
                inner.unsettled.remove(at);
            }
        }
    }

    /// Whether a later delivery of `sequence` than `delivered` was already settled here: this
    /// one's settlement is stale (the server has moved on; a hung handler that finished after
    /// its message was dead-lettered past the cap, say).
    pub(crate) fn superseded(&self, sequence: u64, delivered: u64) -> bool {
        let inner = self.lock();
        inner
            .find(sequence)
            .is_ok_and(|at| inner.unsettled[at].1.settled > delivered)
    }

    /// Where a consumer created again starts: the lowest sequence not settled, or one past the
    /// highest taken; `None` when nothing was taken yet (the descriptor's deliver policy).
    pub(crate) fn resume(&self) -> Option<u64> {
        let inner = self.lock();
        inner
            .unsettled
            .first()
            .map(|&(sequence, _)| sequence)
            .or(inner.next)
    }
}

impl ProgressInner {
    /// Where `sequence` is in `unsettled` (`Ok`), or where it would go (`Err`).
    fn find(&self, sequence: u64) -> Result<usize, usize> {
        self.unsettled
            .binary_search_by_key(&sequence, |&(taken, _)| taken)
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

    proptest::proptest! {
        /// Deliveries taken and settled in any order, redeliveries among them (many handlers
        /// at once): the sorted slots answer as a map of sequence to (count, highest settled)
        /// does.
        #[test]
        fn out_of_order_settlements_answer_as_a_map_would(
            steps in proptest::collection::vec((proptest::bool::ANY, 1..40_u64, 1..5_u64, 1..40_u64, 1..5_u64), 0..400)
        ) {
            use std::collections::BTreeMap;
            let progress = Progress::default();
            let mut model: BTreeMap<u64, (u32, u64)> = BTreeMap::new();
            let mut next: Option<u64> = None;
            for (take, sequence, delivered, probe, at) in steps {
                if take {
                    progress.taken(sequence);
                    model.entry(sequence).or_default().0 += 1;
                    next = Some(next.map_or(sequence + 1, |n| n.max(sequence + 1)));
                } else {
                    progress.settled(sequence, delivered);
                    if let Some(pending) = model.get_mut(&sequence) {
                        pending.0 = pending.0.saturating_sub(1);
                        pending.1 = pending.1.max(delivered);
                        if pending.0 == 0 {
                            model.remove(&sequence);
                        }
                    }
                }
                proptest::prop_assert_eq!(
                    progress.superseded(probe, at),
                    model.get(&probe).is_some_and(|pending| pending.1 > at)
                );
                proptest::prop_assert_eq!(progress.resume(), model.keys().next().copied().or(next));
            }
        }
    }
}
