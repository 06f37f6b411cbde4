#![doc = include_str!("../README.md")]
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod ack_wire;
mod broker;
mod copies;
pub mod descriptor;
#[cfg(feature = "embedded")]
pub mod embedded;
mod events;
mod executor;
#[cfg(test)]
mod fuzz;
mod idempotency;
mod jetstream_info;
mod keys;
mod kv_change;
mod micro;
mod options;
mod publish;
mod rate;
mod running;
mod settings;
mod source;
mod stream_checks;
mod subject;
mod supervise;
mod telemetry;
#[cfg(test)]
mod test_metrics;
#[cfg(feature = "testing")]
pub mod testing;
pub mod transport;
mod validate;

/// The runtime, for the code the macros write in a crate that depends only on `ruststream-nats`.
#[doc(hidden)]
pub use ruststream;

pub use broker::NatsBroker;
pub use copies::RETRY_COUNT_HEADER;
pub use descriptor::{CoreSubject, CoreWildcard, DeliverPolicy, JetStreamSubject, KvChanges};
pub use jetstream_info::JetStreamInfo;
pub use keys::{JetStream, StreamName, StreamSequence};
pub use kv_change::{KV_OPERATION_HEADER, KvChange, KvOp};
pub use publish::{
    MSG_ID_HEADER, NatsClient, RELEARN_AFTER, STREAM_ADVISORIES, StoredPublish, output_message_id,
};
pub use settings::MIN_SERVER_VERSION;
pub use transport::{StoredAck, StreamDeclaration};

/// Every name a NATS service uses, in one glob: `use ruststream_nats::prelude::*;`.
pub mod prelude {
    pub use ruststream::prelude::*;
    pub use ruststream::{AckError, Context, Handle, HandlerOutcome};

    pub use crate::{CoreSubject, CoreWildcard, DeliverPolicy, JetStreamSubject, NatsBroker};
    pub use crate::{KvChange, KvChanges, KvOp};
    pub use crate::{StreamName, StreamSequence};
}

/// The guides in `docs/`, compiled as doctests (`cargo test --doc -p ruststream-nats`).
#[cfg(doctest)]
pub mod guides {
    #[doc = include_str!("../../docs/handlers.md")]
    pub mod handlers {}
    #[doc = include_str!("../../docs/app.md")]
    pub mod app {}
    #[doc = include_str!("../../docs/settlement.md")]
    pub mod settlement {}
    #[doc = include_str!("../../docs/acknowledgement.md")]
    pub mod acknowledgement {}
    #[doc = include_str!("../../docs/at-most-once.md")]
    pub mod at_most_once {}
    #[doc = include_str!("../../docs/retries-dead-letters.md")]
    pub mod retries_dead_letters {}
    #[doc = include_str!("../../docs/consumers.md")]
    pub mod consumers {}
    #[cfg(feature = "testing")]
    #[doc = include_str!("../../docs/kv-changes.md")]
    pub mod kv_changes {}
    #[doc = include_str!("../../docs/deployment.md")]
    pub mod deployment {}
    #[doc = include_str!("../../docs/architecture.md")]
    pub mod architecture {}
    #[doc = include_str!("../../docs/security.md")]
    pub mod security {}
    #[cfg(feature = "testing")]
    #[doc = include_str!("../../docs/testing.md")]
    pub mod testing {}
    #[cfg(all(feature = "msgpack", feature = "cbor", feature = "protobuf"))]
    #[doc = include_str!("../../docs/codecs.md")]
    pub mod codecs {}
    #[doc = include_str!("../../docs/middleware.md")]
    pub mod middleware {}
    #[cfg(feature = "testing")]
    #[doc = include_str!("../../docs/idempotency.md")]
    pub mod idempotency {}
    #[cfg(feature = "testing")]
    #[doc = include_str!("../../docs/first-service.md")]
    pub mod first_service {}
    #[doc = include_str!("../../docs/publishing.md")]
    pub mod publishing {}
    #[cfg(feature = "testing")]
    #[doc = include_str!("../../docs/request-reply.md")]
    pub mod request_reply {}
    #[doc = include_str!("../../docs/guarantees.md")]
    pub mod guarantees {}
    #[doc = include_str!("../../docs/operations.md")]
    pub mod operations {}
}

/// No cycle between the top-level modules of the library crates.
#[cfg(test)]
mod module_graph;

/// `docs/architecture.md` is the code's map: every `.rs` path it names exists.
#[cfg(test)]
mod architecture_map {
    use std::path::{Path, PathBuf};

    /// Every `.rs` file under `dir`, as a path relative to `root` with `/` separators.
    fn rust_files(root: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            if name == "target" || name.to_string_lossy().starts_with('.') {
                continue;
            }
            if path.is_dir() {
                rust_files(root, &path, out);
            } else if path.extension().is_some_and(|e| e == "rs")
                && let Ok(relative) = path.strip_prefix(root)
            {
                out.push(relative.to_string_lossy().replace('\\', "/"));
            }
        }
    }

    /// The `.rs` paths a line names: a word ending in `.rs` (backticked or in a map block).
    fn named_paths(line: &str) -> Vec<&str> {
        line.split(|c: char| !(c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '/')))
            .map(|word| word.trim_start_matches('.').trim_end_matches('.'))
            .filter(|word| word.ends_with(".rs") && word.len() > 3)
            .collect()
    }

    #[test]
    fn every_rust_path_in_the_architecture_page_exists() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("the crate sits in the workspace")
            .to_path_buf();
        let page = std::fs::read_to_string(root.join("docs/architecture.md"))
            .expect("docs/architecture.md is readable");
        let mut files = Vec::new();
        rust_files(&root, &root, &mut files);
        // A path is written from the repository root, or (in a crate's section of "What goes
        // where") from that crate's `src/`, or elsewhere as the end of one file's path.
        let mut section = "";
        let mut missing = Vec::new();
        let mut checked = 0;
        for (number, line) in page.lines().enumerate() {
            if let Some(heading) = line.strip_prefix("### ") {
                section = if heading.starts_with("`ruststream-nats`") {
                    "ruststream-nats/src/"
                } else if heading.starts_with("`ruststream`") {
                    "ruststream/src/"
                } else {
                    ""
                };
            }
            for path in named_paths(line) {
                checked += 1;
                let found = root.join(path).is_file()
                    || files.iter().any(|file| {
                        file.strip_prefix(section)
                            .is_some_and(|rest| rest == path || rest.ends_with(&format!("/{path}")))
                    });
                if !found {
                    missing.push(format!("line {}: `{path}`", number + 1));
                }
            }
        }
        assert!(
            checked > 50,
            "only {checked} paths found: is the page's map still there?"
        );
        assert!(
            missing.is_empty(),
            "docs/architecture.md names files that do not exist (written from the repository \
             root, or in a crate's section from its src/):\n{}",
            missing.join("\n")
        );
    }
}
