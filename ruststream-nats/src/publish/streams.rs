//! Which subjects the streams store ([`StoredSubjects`]), and what keeps a running app's list
//! fresh ([`StreamWatch`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use futures::{FutureExt as _, StreamExt as _};
use tokio::time::Instant;

use super::RELEARN_AFTER;
use crate::subject::matches;
use crate::transport::{StreamAdmin, StreamSpec, Subscription};

/// Which subjects the streams store, as last learned.
#[derive(Debug, Default)]
pub(crate) struct StoredSubjects {
    /// Each stream's name and the subjects it stores.
    streams: RwLock<Vec<(Arc<str>, Vec<Filter>)>>,
    learned: Mutex<Option<Instant>>,
    /// Whether a [`StreamWatch`] keeps the list fresh: then a publish neither reads the clock
    /// nor takes `learned`'s lock.
    pub(super) watched: AtomicBool,
    /// Wakes the [`StreamWatch`] to learn the list again (a publish found a stream gone).
    pub(super) stale: tokio::sync::Notify,
}

/// A subject a stream stores, prepared for the question every publish asks (does it match
/// this subject?): most subjects are refused by a length or prefix comparison, without
/// splitting either into tokens.
#[derive(Debug)]
pub(super) struct Filter {
    pattern: String,
    /// The bytes before the first wildcard token (all of them when there is none).
    literal: usize,
}

impl Filter {
    pub(super) fn new(pattern: String) -> Self {
        let literal = pattern
            .split('.')
            .take_while(|token| *token != "*" && *token != ">")
            .map(|token| token.len() + 1)
            .sum::<usize>()
            .min(pattern.len());
        Self { pattern, literal }
    }

    pub(super) fn matches(&self, subject: &str) -> bool {
        if self.literal == self.pattern.len() {
            return self.pattern == subject;
        }
        subject
            .as_bytes()
            .starts_with(&self.pattern.as_bytes()[..self.literal])
            && matches(&self.pattern, subject)
    }
}

impl StoredSubjects {
    /// The stream storing `subject`, if any.
    pub(crate) fn stream_of(&self, subject: &str) -> Option<Arc<str>> {
        let streams = self.streams.read().ok()?;
        streams
            .iter()
            .find(|(_, filters)| filters.iter().any(|f| f.matches(subject)))
            .map(|(name, _)| Arc::clone(name))
    }

    pub(super) fn set(&self, streams: Vec<StreamSpec>) {
        if let Ok(mut current) = self.streams.write() {
            *current = streams
                .into_iter()
                .map(|s| {
                    let filters = s.subjects.into_iter().map(Filter::new).collect();
                    (Arc::from(s.name), filters)
                })
                .collect();
        }
    }

    /// Whether the list is older than [`RELEARN_AFTER`] (`Some(true)`) or was never learned
    /// (`Some(false)`); if so, marks it learned now (one caller relearns).
    pub(super) fn due(&self) -> Option<bool> {
        let Ok(mut learned) = self.learned.lock() else {
            return None;
        };
        let now = Instant::now();
        match learned.replace(now) {
            Some(at) if now.duration_since(at) < RELEARN_AFTER => {
                *learned = Some(at);
                None
            }
            Some(_) => Some(true),
            None => Some(false),
        }
    }

    /// A stream the list names is gone: the list is learned again, by the watcher when one
    /// runs, else by the next publish.
    pub(super) fn forget(&self) {
        if self.watched.load(Ordering::Acquire) {
            self.stale.notify_one();
        } else if let Ok(mut learned) = self.learned.lock() {
            *learned = None;
        }
    }
}

/// Keeps a running app's list of stored subjects fresh: learned again when the server announces
/// a stream created, updated or deleted, when a publish found a stream gone, and every
/// [`RELEARN_AFTER`] in any case (a connection not allowed to see the advisories, one missed
/// while the link was down).
pub(crate) struct StreamWatch {
    pub(super) transport: Arc<dyn StreamAdmin>,
    pub(super) stored: Arc<StoredSubjects>,
    pub(super) advisories: Option<Subscription>,
}

impl StreamWatch {
    /// Runs until the broker stops (`stop` holds its drain deadline, the sources' signal).
    pub(crate) async fn run(self, mut stop: tokio::sync::watch::Receiver<Option<Instant>>) {
        let Self {
            transport,
            stored,
            advisories,
        } = self;
        let (mut advisories, unsubscribe) = match advisories {
            Some((messages, unsubscribe)) => (Some(messages), Some(unsubscribe)),
            None => (None, None),
        };
        let mut every = tokio::time::interval_at(Instant::now() + RELEARN_AFTER, RELEARN_AFTER);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let advisory = async {
                match advisories.as_mut() {
                    Some(messages) => messages.next().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                _ = stop.wait_for(Option::is_some) => break,
                () = stored.stale.notified() => {}
                next = advisory => {
                    if next.is_none() {
                        // The subscription ended (the connection closed for good): the
                        // periodic look goes on.
                        advisories = None;
                        continue;
                    }
                    // The rest of a burst (several streams made at once) is one relearn.
                    while let Some(Some(_)) = advisories.as_mut().and_then(|m| m.next().now_or_never()) {}
                }
                _ = every.tick() => {}
            }
            learn(&*transport, &stored).await;
        }
        if let Some(unsubscribe) = unsubscribe {
            unsubscribe.stop().await;
        }
    }
}

pub(super) async fn learn(transport: &dyn StreamAdmin, stored: &StoredSubjects) {
    match transport.streams().await {
        Ok(streams) => stored.set(streams),
        Err(err) => tracing::debug!(
            %err,
            "cannot list the streams; outputs are Core publishes until the list is known"
        ),
    }
}
