//! Where a JetStream registration stands in its stream: what a consumer created again starts
//! from, and whether a settlement is stale.
//!
//! A stream sequence is owed from the moment a delivery of it is taken until a delivery of it
//! is settled with what the server never delivers again (`+ACK`, `+TERM`). A `-NAK`, with a
//! delay or not (`retry`, `retry_after`, a release at stop or from a lane, a dead letter held
//! back, an idempotency hold), leaves it owed: a consumer created again starts at the lowest
//! sequence owed, so that it delivers it again.
//!
//! A sequence owed that never comes back (deleted from the stream by an operator, or by a
//! per-subject limit) keeps the place there: every consumer created again starts at it and
//! delivers the messages after it again (duplicates, never a loss). Sequences below the stream's
//! first one are forgotten when the consumer is created again ([`Progress::resume_in`]).

use std::sync::{Mutex, PoisonError};

use crate::transport::StreamPlace;

/// Where a JetStream registration stands in its stream: the stream sequences it owes, the
/// highest it took, and which stream these are of.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    inner: Mutex<ProgressInner>,
}

#[derive(Debug, Default)]
struct ProgressInner {
    /// Stream sequences owed, in ascending order: taken and in flight, or settled with a
    /// `-NAK` and to be delivered again. Few: the handlers in flight and the messages waiting
    /// out a retry. A sorted `Vec`, not a `BTreeMap`: every delivery is taken and settled here,
    /// and one handler at a time this is one slot, found and emptied in a few instructions.
    owed: Vec<(u64, Pending)>,
    /// One past the highest stream sequence taken.
    next: Option<u64>,
    /// When the stream these sequences are of was created, once known: a stream deleted and
    /// created again under the same name numbers its messages from 1 again.
    created: Option<String>,
}

/// The deliveries of one stream sequence owed.
#[derive(Debug, Default)]
struct Pending {
    /// How many are in flight (a redelivery can be taken while an earlier delivery still runs).
    count: u32,
    /// The highest delivered count among those already settled.
    settled: u64,
    /// Whether that delivery's settlement was final (`+ACK`, `+TERM`).
    done: bool,
}

/// Where a consumer created again starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resume {
    /// Where the descriptor's deliver policy says: nothing was taken yet, or the stream is
    /// another one than the sequences owed are of.
    Descriptor,
    /// At this stream sequence.
    At(u64),
}

impl Progress {
    fn lock(&self) -> std::sync::MutexGuard<'_, ProgressInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A delivery of `sequence` was taken for handling.
    pub(crate) fn taken(&self, sequence: u64) {
        let mut inner = self.lock();
        match inner.find(sequence) {
            Ok(at) => inner.owed[at].1.count += 1,
            Err(at) => inner.owed.insert(
                at,
                (
                    sequence,
                    Pending {
                        count: 1,
                        settled: 0,
                        done: false,
                    },
                ),
            ),
        }
        let next = sequence.saturating_add(1);
        inner.next = Some(inner.next.map_or(next, |at| at.max(next)));
    }

    /// Delivery `delivered` of `sequence` was settled (or given up on); `done` when what reached
    /// the server was final ([`ruststream::settle::AckKind::is_final`]). The sequence stays owed
    /// unless the latest delivery settled was settled for good.
    pub(crate) fn settled(&self, sequence: u64, delivered: u64, done: bool) {
        let mut inner = self.lock();
        if let Ok(at) = inner.find(sequence) {
            let pending = &mut inner.owed[at].1;
            pending.count = pending.count.saturating_sub(1);
            if delivered >= pending.settled {
                pending.settled = delivered;
                pending.done = done;
            }
            if pending.count == 0 && pending.done {
                inner.owed.remove(at);
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
            .is_ok_and(|at| inner.owed[at].1.settled > delivered)
    }

    /// Where a consumer created again starts: the lowest sequence owed, or one past the highest
    /// taken.
    pub(crate) fn resume(&self) -> Resume {
        let inner = self.lock();
        inner
            .owed
            .first()
            .map(|&(sequence, _)| sequence)
            .or(inner.next)
            .map_or(Resume::Descriptor, Resume::At)
    }

    /// The stream is found at `place` as its consumer is opened: recorded the first time.
    /// Then, when it is another stream than before (created again), everything kept of the old
    /// one is forgotten and the consumer starts where the descriptor says; else the sequences
    /// owed below its first one are forgotten (gone for good) and it starts at
    /// [`resume`](Self::resume). Without a place, [`resume`](Self::resume).
    ///
    /// A consumer created again counts its deliveries from 1 again: the deliveries settled on
    /// the one before no longer make a delivery of the new one stale.
    pub(crate) fn resume_in(&self, registration: &str, place: Option<&StreamPlace>) -> Resume {
        {
            let mut inner = self.lock();
            for (_, pending) in &mut inner.owed {
                pending.settled = 0;
            }
        }
        if let Some(place) = place {
            let mut inner = self.lock();
            match &inner.created {
                Some(created) if *created != place.created => {
                    tracing::warn!(
                        registration,
                        was = %created,
                        now = %place.created,
                        "the stream was created again: its consumer starts where the descriptor says, and what was owed of the old stream is forgotten"
                    );
                    *inner = ProgressInner {
                        created: Some(place.created.clone()),
                        ..ProgressInner::default()
                    };
                }
                Some(_) => inner.owed.retain(|(sequence, pending)| {
                    *sequence >= place.first_sequence || pending.count > 0
                }),
                None => inner.created = Some(place.created.clone()),
            }
        }
        self.resume()
    }
}

impl ProgressInner {
    /// Where `sequence` is in `owed` (`Ok`), or where it would go (`Err`).
    fn find(&self, sequence: u64) -> Result<usize, usize> {
        self.owed
            .binary_search_by_key(&sequence, |&(taken, _)| taken)
    }
}

#[cfg(test)]
mod tests {
    use super::{Progress, Resume};
    use crate::transport::StreamPlace;

    fn place(created: &str, first_sequence: u64) -> StreamPlace {
        StreamPlace {
            created: created.to_owned(),
            first_sequence,
            messages: 0,
        }
    }

    #[test]
    fn a_consumer_opened_again_starts_at_the_lowest_sequence_owed() {
        let progress = Progress::default();
        assert_eq!(progress.resume(), Resume::Descriptor, "nothing taken");
        progress.taken(5);
        progress.taken(7);
        assert_eq!(progress.resume(), Resume::At(5), "the lowest in flight");
        progress.settled(5, 1, true);
        assert_eq!(progress.resume(), Resume::At(7));
        progress.taken(7); // a redelivery while the first still runs
        assert!(!progress.superseded(7, 1));
        progress.settled(7, 2, true);
        assert!(progress.superseded(7, 1), "the later delivery was settled");
        assert_eq!(progress.resume(), Resume::At(7));
        progress.settled(7, 1, false); // stale: not sent
        assert!(!progress.superseded(7, 1), "forgotten once all are settled");
        assert_eq!(
            progress.resume(),
            Resume::At(8),
            "one past the highest taken"
        );
        progress.settled(8, 1, true); // never taken: ignored
        assert_eq!(progress.resume(), Resume::At(8));
    }

    #[test]
    fn a_sequence_released_or_held_back_stays_owed_until_settled_for_good() {
        let progress = Progress::default();
        progress.taken(3);
        progress.settled(3, 1, false); // -NAK {"delay": ...}: it comes back later
        progress.taken(4);
        progress.settled(4, 1, true);
        assert_eq!(progress.resume(), Resume::At(3), "3 is still to come back");
        progress.taken(3);
        progress.settled(3, 2, false); // released again
        assert_eq!(progress.resume(), Resume::At(3));
        progress.taken(3);
        progress.settled(3, 3, true);
        assert_eq!(progress.resume(), Resume::At(5), "settled for good at last");
    }

    #[test]
    fn a_later_delivery_released_after_an_earlier_one_was_acknowledged_is_owed_again() {
        // The server redelivered 9 before the first +ACK reached it: the -NAK of the
        // redelivery decides, at worst a duplicate after a recreate, never a loss.
        let progress = Progress::default();
        progress.taken(9);
        progress.taken(9);
        progress.settled(9, 1, true);
        progress.settled(9, 2, false);
        assert_eq!(progress.resume(), Resume::At(9));
    }

    #[test]
    fn a_stream_created_again_is_read_from_where_the_descriptor_says() {
        let progress = Progress::default();
        assert_eq!(
            progress.resume_in("r", Some(&place("t1", 1))),
            Resume::Descriptor
        );
        progress.taken(2);
        progress.settled(2, 1, false);
        progress.taken(6);
        progress.settled(6, 1, true);
        assert_eq!(
            progress.resume_in("r", None),
            Resume::At(2),
            "no place: as it stood"
        );
        assert_eq!(
            progress.resume_in("r", Some(&place("t1", 1))),
            Resume::At(2)
        );
        assert_eq!(
            progress.resume_in("r", Some(&place("t1", 4))),
            Resume::At(7),
            "2 left the stream: it can never come back"
        );
        progress.taken(8);
        progress.settled(8, 3, false);
        assert!(progress.superseded(8, 1));
        assert_eq!(
            progress.resume_in("r", Some(&place("t1", 4))),
            Resume::At(8)
        );
        assert!(
            !progress.superseded(8, 1),
            "the new consumer's first delivery of 8 is not stale"
        );
        assert_eq!(
            progress.resume_in("r", Some(&place("t2", 1))),
            Resume::Descriptor,
            "another stream under the same name: nothing of the old one counts"
        );
        assert_eq!(
            progress.resume_in("r", Some(&place("t2", 1))),
            Resume::Descriptor
        );
        progress.taken(1);
        assert_eq!(
            progress.resume_in("r", Some(&place("t2", 1))),
            Resume::At(1)
        );
    }

    proptest::proptest! {
        /// Deliveries taken and settled in any order, redeliveries among them (many handlers
        /// at once), settled for good or not: the sorted slots answer as a map of sequence to
        /// (in flight, highest settled, whether that one was final) does, a sequence leaving it
        /// only when nothing is in flight and its latest settlement was final.
        #[test]
        fn out_of_order_settlements_answer_as_a_map_would(
            steps in proptest::collection::vec(
                (proptest::bool::ANY, 1..40_u64, 1..5_u64, proptest::bool::ANY, 1..40_u64, 1..5_u64),
                0..400,
            )
        ) {
            use std::collections::BTreeMap;
            let progress = Progress::default();
            let mut model: BTreeMap<u64, (u32, u64, bool)> = BTreeMap::new();
            let mut next: Option<u64> = None;
            for (take, sequence, delivered, done, probe, at) in steps {
                if take {
                    progress.taken(sequence);
                    model.entry(sequence).or_default().0 += 1;
                    next = Some(next.map_or(sequence + 1, |n| n.max(sequence + 1)));
                } else {
                    progress.settled(sequence, delivered, done);
                    if let Some(pending) = model.get_mut(&sequence) {
                        pending.0 = pending.0.saturating_sub(1);
                        if delivered >= pending.1 {
                            pending.1 = delivered;
                            pending.2 = done;
                        }
                        if pending.0 == 0 && pending.2 {
                            model.remove(&sequence);
                        }
                    }
                }
                proptest::prop_assert_eq!(
                    progress.superseded(probe, at),
                    model.get(&probe).is_some_and(|pending| pending.1 > at)
                );
                let expected = model.keys().next().copied().or(next);
                proptest::prop_assert_eq!(
                    progress.resume(),
                    expected.map_or(Resume::Descriptor, Resume::At)
                );
            }
        }
    }
}
