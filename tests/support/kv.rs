//! What the key-value change tests share: each change a handler saw, as a comparable record,
//! and the state that collects them (the app's state, read by `State<Changes>`).

use std::sync::{Arc, Mutex, PoisonError};

use ruststream_nats::{KvChange, KvOp};
use ruststream_test_server::client::{PATIENCE, eventually};

/// One change as a handler saw it: key, revision, operation (`put <value>`, `delete`,
/// `purge`), attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub key: String,
    pub revision: u64,
    pub op: String,
    pub attempt: u32,
}

impl Change {
    /// What `change`, at `attempt`, is.
    pub fn of(change: &KvChange<u32>, attempt: u32) -> Self {
        let op = match &change.op {
            KvOp::Put(value) => format!("put {value}"),
            KvOp::Delete => "delete".to_owned(),
            KvOp::Purge => "purge".to_owned(),
        };
        Self {
            key: change.key.clone(),
            revision: change.revision,
            op,
            attempt,
        }
    }
}

/// The change a test expects.
pub fn change(key: &str, revision: u64, op: &str, attempt: u32) -> Change {
    Change {
        key: key.to_owned(),
        revision,
        op: op.to_owned(),
        attempt,
    }
}

/// Every change handled, in order.
#[derive(Clone, Default)]
pub struct Changes(Arc<Mutex<Vec<Change>>>);

impl Changes {
    pub fn all(&self) -> Vec<Change> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub fn push(&self, change: Change) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(change);
    }

    /// Waits until `n` changes were handled (real time), and returns them.
    pub async fn until(&self, n: usize) -> Vec<Change> {
        eventually(PATIENCE, &format!("{n} changes handled"), || async {
            let all = self.all();
            (all.len() >= n).then_some(all)
        })
        .await
    }
}
