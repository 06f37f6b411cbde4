//! The module graph of the workspace's library crates has no cycle (docs/architecture.md, "How
//! this is checked"), and no library file grows past 500 lines without saying why: tests, not
//! scripts beside the repository.
//!
//! Each top-level module of a crate (`app`, `registration`, `source`: a file and everything
//! under its directory) is one node. An edge goes from a node to the node a path in its files
//! names: the paths of `use crate::..`, `use super::..`, `use self::..` (brace groups expanded),
//! and `crate::x::..` / `super::x::..` written in code. A name the crate root re-exports
//! (`crate::Error`) counts as the module it comes from. Unit tests (`#[cfg(test)]` items,
//! `tests.rs` files, `tests/` directories) and comments are left out: a test may use what it
//! tests from above.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A crate's source files: path relative to `src/` (with `/`), and text.
type Files = Vec<(String, String)>;

/// The directed graph between the crate's top-level modules.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// The crates whose graphs are checked, relative to the workspace root.
const CRATES: [&str; 4] = [
    "ruststream/src",
    "ruststream-nats/src",
    "ruststream-macros/src",
    "tests/test-server/src",
];

fn read_crate(src: &Path) -> Files {
    fn walk(src: &Path, dir: &Path, out: &mut Files) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(src, &path, out);
            } else if path.extension().is_some_and(|e| e == "rs")
                && let (Ok(relative), Ok(text)) =
                    (path.strip_prefix(src), std::fs::read_to_string(&path))
            {
                out.push((relative.to_string_lossy().replace('\\', "/"), text));
            }
        }
    }
    let mut files = Vec::new();
    walk(src, src, &mut files);
    files
}

/// The module path of a file: `lib.rs` is `[]`, `a/mod.rs` and `a.rs` are `[a]`, `a/b.rs` is
/// `[a, b]`; `None` for a test file.
fn module_of(file: &str) -> Option<Vec<String>> {
    let mut parts: Vec<String> = file.split('/').map(str::to_owned).collect();
    let last = parts.pop()?;
    if last == "tests.rs" || parts.iter().any(|p| p == "tests") {
        return None;
    }
    match last.as_str() {
        "lib.rs" | "main.rs" | "mod.rs" => {}
        name => parts.push(name.trim_end_matches(".rs").to_owned()),
    }
    Some(parts)
}

/// The text without comments and without `#[cfg(test)]` items.
fn code(text: &str) -> String {
    let mut out = String::new();
    let mut skip_depth: Option<i64> = None;
    let mut skip_next = false;
    for line in text.lines() {
        let line = strip_comment(line);
        let trimmed = line.trim();
        if let Some(depth) = &mut skip_depth {
            *depth += brace_balance(trimmed);
            if *depth <= 0 && trimmed.contains('}') {
                skip_depth = None;
            }
            continue;
        }
        if trimmed.starts_with("#[cfg(test)]") {
            skip_next = true;
            continue;
        }
        if skip_next {
            if trimmed.starts_with("#[") || trimmed.is_empty() {
                continue;
            }
            skip_next = false;
            let depth = brace_balance(trimmed);
            if depth > 0 || (!trimmed.ends_with(';') && !trimmed.contains('}')) {
                skip_depth = Some(depth);
            }
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

fn brace_balance(line: &str) -> i64 {
    line.chars().fold(0, |n, c| match c {
        '{' => n + 1,
        '}' => n - 1,
        _ => n,
    })
}

/// `line` up to a `//` that is not inside a string literal.
fn strip_comment(line: &str) -> &str {
    let mut in_string = false;
    let bytes = line.as_bytes();
    for i in 0..bytes.len() {
        match bytes[i] {
            b'"' if i == 0 || bytes[i - 1] != b'\\' => in_string = !in_string,
            b'/' if !in_string && bytes.get(i + 1) == Some(&b'/') => return &line[..i],
            _ => {}
        }
    }
    line
}

/// The full paths of a `use` tree (`crate::{a::X, b::{Y, Z}}`), each as its segments.
fn expand_use(tree: &str) -> Vec<Vec<String>> {
    // Whitespace only where it separates words (`Z as W`).
    let words: Vec<&str> = tree.split_whitespace().collect();
    let mut tree = String::new();
    for pair in words.windows(2) {
        tree.push_str(pair[0]);
        let ends = pair[0].ends_with(|c: char| c.is_alphanumeric() || c == '_');
        let starts = pair[1].starts_with(|c: char| c.is_alphanumeric() || c == '_');
        if ends && starts {
            tree.push(' ');
        }
    }
    tree.push_str(words.last().copied().unwrap_or_default());
    let Some(open) = tree.find('{') else {
        let path = tree.split(' ').next().unwrap_or_default();
        return vec![segments(path)];
    };
    let prefix = segments(tree[..open].trim_end_matches("::"));
    let inner = tree[open + 1..]
        .strip_suffix('}')
        .unwrap_or(&tree[open + 1..]);
    let mut out = Vec::new();
    for part in split_top_level(inner) {
        for mut rest in expand_use(part) {
            if rest.first().is_some_and(|s| s == "self") {
                rest.remove(0);
            }
            let mut full = prefix.clone();
            full.append(&mut rest);
            out.push(full);
        }
    }
    out
}

fn segments(path: &str) -> Vec<String> {
    path.split("::")
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// `a, b::{c, d}, e` split at the commas outside braces.
fn split_top_level(list: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in list.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&list[start..]);
    out.into_iter().filter(|p| !p.is_empty()).collect()
}

/// Every path of the code that starts at `crate`, `super` or `self`.
fn paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    // `use` statements, brace groups expanded.
    let mut rest = code;
    while let Some(at) = find_word(rest, "use ") {
        let after = &rest[at + 4..];
        let end = after.find(';').unwrap_or(after.len());
        out.extend(expand_use(&after[..end]));
        rest = &after[end..];
    }
    // Paths in code: `crate::a::b`, `super::a`.
    for anchor in ["crate::", "super::"] {
        let mut rest = code;
        while let Some(at) = find_word(rest, anchor) {
            let after = &rest[at..];
            let end = after
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(after.len());
            out.push(segments(&after[..end]));
            rest = &after[anchor.len()..];
        }
    }
    out
}

/// The position of `word` in `text` where it does not continue an identifier (or `$crate`).
fn find_word(text: &str, word: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = text[from..].find(word) {
        let at = from + i;
        let before = text[..at].chars().next_back();
        if !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$' || c == ':') {
            return Some(at);
        }
        from = at + word.len();
    }
    None
}

/// The absolute module path a path from module `here` names (`None`: not a crate path).
fn absolute(here: &[String], path: &[String]) -> Option<Vec<String>> {
    let mut base: Vec<String> = here.to_vec();
    let mut segments = path.iter().peekable();
    match segments.peek().map(|s| s.as_str()) {
        Some("crate") => {
            base.clear();
            segments.next();
        }
        Some("self") => {
            segments.next();
        }
        Some("super") => {
            while segments.peek().is_some_and(|s| *s == "super") {
                segments.next();
                base.pop()?;
            }
        }
        _ => return None,
    }
    base.extend(segments.cloned());
    Some(base)
}

/// The graph between the top-level modules of a crate.
fn graph(files: &Files) -> Graph {
    let tops: BTreeSet<String> = files
        .iter()
        .filter_map(|(file, _)| module_of(file)?.first().cloned())
        .collect();
    // What the crate root re-exports, by name: `pub use a::{X, Y}` makes `crate::X` mean `a`.
    let mut reexports: BTreeMap<String, String> = BTreeMap::new();
    for (file, text) in files {
        if file != "lib.rs" {
            continue;
        }
        for line in code(text).split(';') {
            let Some(at) = find_word(line, "pub use ") else {
                continue;
            };
            for path in expand_use(&line[at + 8..]) {
                let path = absolute(&[], &path).unwrap_or(path);
                if let (Some(top), Some(name)) = (path.first(), path.last())
                    && tops.contains(top)
                {
                    reexports.insert(name.clone(), top.clone());
                }
            }
        }
    }
    let mut graph = Graph::new();
    for (file, text) in files {
        let Some(here) = module_of(file) else {
            continue;
        };
        let Some(from) = here.first() else {
            continue;
        };
        graph.entry(from.clone()).or_default();
        for path in paths(&code(text)) {
            let Some(target) = absolute(&here, &path) else {
                continue;
            };
            let Some(first) = target.first() else {
                continue;
            };
            let to = if tops.contains(first) {
                first
            } else if let Some(module) = reexports.get(first) {
                module
            } else {
                continue;
            };
            if to != from {
                graph.entry(from.clone()).or_default().insert(to.clone());
            }
        }
    }
    graph
}

/// The cycles of `graph`: for each strongly connected component of more than one node, a
/// shortest cycle through its first node (`a -> b -> a`).
fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(node) = stack.pop() {
            for next in graph.get(&node).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    };
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for node in graph.keys() {
        if done.contains(node) || !reach(node).contains(node) {
            continue;
        }
        // A shortest way back to `node`, breadth first.
        let mut back: BTreeMap<String, String> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([node.clone()]);
        'search: while let Some(at) = queue.pop_front() {
            for next in graph.get(&at).into_iter().flatten() {
                if next == node {
                    back.insert(node.clone(), at.clone());
                    break 'search;
                }
                if !back.contains_key(next) {
                    back.insert(next.clone(), at.clone());
                    queue.push_back(next.clone());
                }
            }
        }
        let mut cycle = vec![node.clone()];
        let mut at = back.get(node).cloned();
        while let Some(step) = at.filter(|s| s != node) {
            cycle.push(step.clone());
            at = back.get(&step).cloned();
        }
        cycle[1..].reverse();
        cycle.push(node.clone());
        // The rest of its component is on a cycle with it: reported once.
        done.extend(
            reach(node)
                .into_iter()
                .filter(|other| reach(other).contains(node)),
        );
        out.push(cycle);
    }
    out
}

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the crate sits in the workspace")
        .to_path_buf()
}

#[test]
fn no_library_crate_has_a_cycle_between_its_top_level_modules() {
    let mut found = Vec::new();
    for krate in CRATES {
        let files = read_crate(&workspace().join(krate));
        assert!(files.len() > 3, "{krate}: its sources were not found");
        let graph = graph(&files);
        // The runtime's modules build on each other: a reader that saw no edge there would
        // check nothing.
        if krate == "ruststream/src" {
            assert!(
                graph["app"].contains("registration"),
                "{krate}: the edges were not read: {graph:?}"
            );
        }
        for cycle in cycles(&graph) {
            found.push(format!("{krate}: {}", cycle.join(" -> ")));
        }
    }
    assert!(
        found.is_empty(),
        "module cycles (give the shared part its own module, or let the dependency run one way):\n{}",
        found.join("\n")
    );
}

/// The longest a library file may be without saying why at its top.
const MAX_LINES: usize = 500;

/// The files of `files` over [`MAX_LINES`] whose first lines do not say why they are longer
/// (a comment naming "500 lines" there); test files are left out.
fn long_without_reason(files: &Files) -> Vec<String> {
    files
        .iter()
        .filter(|(file, _)| module_of(file).is_some())
        .filter(|(_, text)| text.lines().count() > MAX_LINES)
        .filter(|(_, text)| {
            !text
                .lines()
                .take(8)
                .any(|line| line.trim_start().starts_with("//") && line.contains("500 lines"))
        })
        .map(|(file, text)| format!("{file} ({} lines)", text.lines().count()))
        .collect()
}

#[test]
fn every_library_file_is_short_or_says_why() {
    let mut found = Vec::new();
    for krate in CRATES {
        let files = read_crate(&workspace().join(krate));
        found.extend(
            long_without_reason(&files)
                .into_iter()
                .map(|file| format!("{krate}/{file}")),
        );
    }
    assert!(
        found.is_empty(),
        "library files over {MAX_LINES} lines: split each by responsibility, or say at its top why \
         it is one piece (a comment naming \"500 lines\" in its first lines):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_length_rule_reads_the_reason_and_skips_tests() {
    let long = "fn f() {}\n".repeat(MAX_LINES + 1);
    let files = synthetic(&[
        ("a.rs", &long),
        ("b.rs", &format!("// Over 500 lines: one table.\n{long}")),
        ("c/tests.rs", &long),
        ("d.rs", "fn short() {}\n"),
    ]);
    assert_eq!(long_without_reason(&files), ["a.rs (501 lines)"]);
}

fn synthetic(files: &[(&str, &str)]) -> Files {
    files
        .iter()
        .map(|(f, t)| ((*f).to_owned(), (*t).to_owned()))
        .collect()
}

#[test]
fn the_checker_finds_a_cycle_through_use_super_and_a_root_reexport() {
    let files = synthetic(&[
        (
            "lib.rs",
            "mod app;\nmod broker;\nmod observer;\npub use observer::Observer;\n",
        ),
        ("app/mod.rs", "mod builder;\nuse crate::broker::Broker;\n"),
        ("app/builder.rs", "use super::super::observer;\n"),
        (
            "broker.rs",
            "// use crate::app; (a comment)\nuse crate::Observer;\n",
        ),
        (
            "observer.rs",
            "pub struct Observer;\nfn f() { let _ = crate::app::App::new(); }\n#[cfg(test)]\nmod tests {\n    use crate::broker;\n}\n",
        ),
    ]);
    let graph = graph(&files);
    assert_eq!(
        graph["app"],
        BTreeSet::from(["broker".to_owned(), "observer".to_owned()])
    );
    assert_eq!(graph["broker"], BTreeSet::from(["observer".to_owned()]));
    assert_eq!(
        graph["observer"],
        BTreeSet::from(["app".to_owned()]),
        "not the test's edge"
    );
    assert_eq!(
        cycles(&graph),
        [["app", "observer", "app"].map(str::to_owned).to_vec()],
        "one cycle for the component of app, broker and observer"
    );
}

#[test]
fn the_checker_expands_brace_groups_and_finds_no_cycle_in_a_layered_graph() {
    let files = synthetic(&[
        ("lib.rs", "mod a;\nmod b;\nmod c;\n"),
        ("a.rs", "use crate::{b::{X, Y}, c::Z as W};\n"),
        (
            "b/mod.rs",
            "mod inner;\nuse self::inner::Q;\nuse crate::c;\n",
        ),
        ("b/inner.rs", "use super::super::c::Z;\n"),
        ("b/tests.rs", "use crate::a;\n"),
        ("c.rs", "pub struct Z;\n"),
    ]);
    let graph = graph(&files);
    assert_eq!(graph["a"], BTreeSet::from(["b".to_owned(), "c".to_owned()]));
    assert_eq!(graph["b"], BTreeSet::from(["c".to_owned()]));
    assert!(cycles(&graph).is_empty(), "{graph:?}");
}
