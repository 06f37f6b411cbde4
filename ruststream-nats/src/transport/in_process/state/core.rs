//! Core NATS in the emulated server: subscriptions, and routing a message to every matching
//! one (one member per queue group, in turn).

use std::collections::BTreeMap;

use tokio::sync::mpsc::UnboundedSender;

use super::State;
use crate::subject::matches;
use crate::transport::RawMessage;

/// A Core subscription.
#[derive(Debug)]
pub(super) struct Subscription {
    pub(super) id: u64,
    pub(super) pattern: String,
    pub(super) group: Option<String>,
    pub(super) tx: UnboundedSender<RawMessage>,
    /// Messages sent to the feed that its reader has not taken yet.
    pub(super) queued: usize,
}

impl State {
    pub(in crate::transport::in_process) fn subscribe(
        &mut self,
        pattern: String,
        group: Option<String>,
        tx: UnboundedSender<RawMessage>,
    ) -> u64 {
        let id = self.id();
        self.subscriptions.push(Subscription {
            id,
            pattern,
            group,
            tx,
            queued: 0,
        });
        self.activity += 1;
        id
    }

    /// Whether a Core subscription matches `subject`.
    pub(in crate::transport::in_process) fn has_subscriber(&self, subject: &str) -> bool {
        self.subscriptions
            .iter()
            .any(|s| !s.tx.is_closed() && matches(&s.pattern, subject))
    }

    /// A fresh inbox subject for a request.
    pub(in crate::transport::in_process) fn new_inbox(&mut self) -> String {
        format!("_INBOX.inprocess.{}", self.id())
    }

    /// Hands a Core message to every matching subscription, one member per queue group.
    pub(super) fn route(&mut self, message: &RawMessage) {
        self.subscriptions.retain(|s| !s.tx.is_closed());
        let mut groups: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        let mut chosen = Vec::new();
        for (i, sub) in self.subscriptions.iter().enumerate() {
            if !matches(&sub.pattern, &message.subject) {
                continue;
            }
            match &sub.group {
                Some(group) => groups.entry(group.clone()).or_default().push(i),
                None => chosen.push(i),
            }
        }
        for (group, members) in groups {
            let cursor = self.group_cursor.entry(group).or_insert(0);
            chosen.push(members[*cursor % members.len()]);
            *cursor = cursor.wrapping_add(1);
        }
        chosen.sort_unstable();
        for i in chosen {
            let sub = &mut self.subscriptions[i];
            if sub.tx.send(message.clone()).is_ok() {
                sub.queued += 1;
                self.activity += 1;
            }
        }
    }
}
