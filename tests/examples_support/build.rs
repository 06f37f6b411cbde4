//! Makes the examples includable by the tests and the demo.
//!
//! A test reaches an example's private items (its `app()`, its message types) by including the
//! example's code into a module of its own:
//!
//! ```ignore
//! mod payments {
//!     include!(concat!(env!("OUT_DIR"), "/examples/payments.rs"));
//! }
//! ```
//!
//! `#[path = "../examples/payments.rs"] mod payments;` would keep `app()` private to that module,
//! and `include!` takes items only, not a file's inner doc comments. So this script copies every
//! `examples/*.rs` and `examples/manual/*.rs` to `OUT_DIR/examples/`, with the file's leading
//! `//!` lines turned into plain `//` comments; nothing else changes.

use std::path::{Path, PathBuf};
use std::{env, fs};

fn main() {
    let root = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets it"));
    for dir in ["examples", "examples/manual"] {
        println!("cargo::rerun-if-changed={dir}");
        copy_examples(&root.join(dir), &out.join(dir));
    }
}

/// Copies the `.rs` files of `from` to `to`, each with its leading inner doc comments made plain.
fn copy_examples(from: &Path, to: &Path) {
    let Ok(entries) = fs::read_dir(from) else {
        return;
    };
    fs::create_dir_all(to).unwrap_or_else(|e| panic!("cannot create {}: {e}", to.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|ext| ext != "rs") || !path.is_file() {
            continue;
        }
        let text = fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let target = to.join(entry.file_name());
        fs::write(&target, includable(&text))
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", target.display()));
    }
}

/// `text` with the `//!` lines that open it (blank lines between them allowed) written as `//`
/// lines.
fn includable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut opening = true;
    for line in text.split_inclusive('\n') {
        match line.strip_prefix("//!") {
            Some(rest) if opening => {
                out.push_str("//");
                out.push_str(rest);
            }
            _ => {
                opening = opening && line.trim().is_empty();
                out.push_str(line);
            }
        }
    }
    out
}
