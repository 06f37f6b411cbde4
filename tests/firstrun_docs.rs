//! The guides a new user reads: every page in `docs/` is reached from the reading order in
//! `docs/README.md`, which the repository's `README.md` points at, and every page holding Rust
//! code is compiled as a doc test of `ruststream-nats`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{} is readable: {e}", path.display()))
}

/// The guides in `docs/`: every `.md` file but the reading order itself.
fn guides() -> BTreeSet<String> {
    let dir = root().join("docs");
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{dir:?} is listable: {e}"));
    entries
        .map(|entry| entry.expect("a directory entry").file_name())
        .filter_map(|name| name.to_str().map(str::to_owned))
        .filter(|name| name.ends_with(".md") && name != "README.md")
        .collect()
}

/// The targets of the markdown links `[text](target)` in `text`: the page (empty for a link
/// within the page) and the `#fragment`, if any.
fn link_targets(text: &str) -> Vec<(String, Option<String>)> {
    text.match_indices("](")
        .filter_map(|(at, _)| {
            let rest = &text[at + 2..];
            let target = &rest[..rest.find(')')?];
            let (page, fragment) = match target.split_once('#') {
                Some((page, fragment)) => (page, Some(fragment.to_owned())),
                None => (target, None),
            };
            Some((page.to_owned(), fragment))
        })
        .collect()
}

/// The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as `-`.
fn anchors(page: &str) -> BTreeSet<String> {
    let mut in_code = false;
    page.lines()
        .filter(|line| {
            if line.starts_with("```") {
                in_code = !in_code;
            }
            !in_code && line.starts_with('#')
        })
        .map(|heading| {
            heading
                .trim_start_matches('#')
                .trim()
                .to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
                .map(|c| if c == ' ' { '-' } else { c })
                .collect()
        })
        .collect()
}

/// The numbered entries of the reading order: `N. [Title](page.md): what it is for`.
fn reading_order() -> Vec<(String, String)> {
    read(&root().join("docs/README.md"))
        .lines()
        .filter_map(|line| {
            let (number, rest) = line.split_once(". [")?;
            number.trim().parse::<u32>().ok()?;
            let (_, after) = rest.split_once("](")?;
            let (page, purpose) = after.split_once(')')?;
            Some((page.to_owned(), purpose.to_owned()))
        })
        .collect()
}

#[test]
fn every_guide_is_in_the_reading_order_with_what_it_is_for() {
    let order = reading_order();
    let listed: BTreeSet<String> = order.iter().map(|(page, _)| page.clone()).collect();
    let missing: Vec<String> = guides()
        .into_iter()
        .filter(|g| !listed.contains(g))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/README.md's reading order does not list {missing:?}: add each as a numbered \
         entry `N. [Title](page.md): what it is for`"
    );
    for (page, purpose) in &order {
        assert!(
            root().join("docs").join(page).is_file(),
            "docs/README.md lists {page}, which is not a file in docs/"
        );
        assert!(
            purpose.starts_with(": ") && purpose.len() > 10,
            "docs/README.md lists {page} without a line saying what it is for"
        );
    }
    assert_eq!(
        listed.len(),
        order.len(),
        "docs/README.md lists a page twice: {order:?}"
    );
}

#[test]
fn every_link_between_the_guides_resolves() {
    let docs = root().join("docs");
    let mut broken = Vec::new();
    for page in guides().into_iter().chain(["README.md".to_owned()]) {
        for (target, fragment) in link_targets(&read(&docs.join(&page))) {
            if target.contains("://") || !(target.is_empty() || target.ends_with(".md")) {
                continue;
            }
            let linked = if target.is_empty() {
                page.clone()
            } else {
                target.clone()
            };
            let path = docs.join(&linked);
            if !path.is_file() {
                broken.push(format!("{page} -> {target}"));
            } else if let Some(fragment) = fragment
                && !anchors(&read(&path)).contains(&fragment)
            {
                broken.push(format!("{page} -> {linked}#{fragment} (no such heading)"));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "links to pages or headings that do not exist: {broken:?}"
    );
}

#[test]
fn the_repository_readme_points_at_the_reading_order() {
    let readme = read(&root().join("README.md"));
    let section = readme
        .split("\n## ")
        .find(|s| s.starts_with("Documentation"))
        .expect("README.md has a `## Documentation` section");
    assert!(
        link_targets(section)
            .iter()
            .any(|(page, _)| page == "docs/README.md"),
        "README.md's Documentation section links docs/README.md"
    );
}

#[test]
fn every_guide_with_rust_code_compiles_as_a_doc_test() {
    let lib = read(&root().join("ruststream-nats/src/lib.rs"));
    let not_compiled: Vec<String> = guides()
        .into_iter()
        .filter(|page| read(&root().join("docs").join(page)).contains("```rust"))
        .filter(|page| !lib.contains(&format!("include_str!(\"../../docs/{page}\")")))
        .collect();
    assert!(
        not_compiled.is_empty(),
        "ruststream-nats/src/lib.rs does not include {not_compiled:?} in `mod guides`"
    );
}
