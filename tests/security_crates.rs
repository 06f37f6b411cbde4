//! Every library crate of the workspace forbids `unsafe` code: a member added later without
//! `#![forbid(unsafe_code)]` fails here.

use std::path::Path;

#[test]
fn every_library_crate_forbids_unsafe_code() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest =
        std::fs::read_to_string(root.join("Cargo.toml")).expect("the workspace manifest");
    let members = manifest
        .split_once("members = [")
        .and_then(|(_, rest)| rest.split_once(']'))
        .map(|(list, _)| list)
        .expect("the workspace lists its members");
    let mut checked = 0;
    for member in members.split(',') {
        let member = member.trim().trim_matches('"');
        if member.is_empty() {
            continue;
        }
        let lib = root.join(member).join("src/lib.rs");
        let Ok(source) = std::fs::read_to_string(&lib) else {
            continue;
        };
        assert!(
            source
                .lines()
                .any(|line| line.trim() == "#![forbid(unsafe_code)]"),
            "{} does not say `#![forbid(unsafe_code)]`",
            lib.display()
        );
        checked += 1;
    }
    assert!(checked >= 4, "only {checked} library crates found");
}
