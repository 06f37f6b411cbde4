//! The first build stays lean: the service of `docs/first-service.md`, made from the guide's own
//! blocks, compiles only the crates in `tests/firstrun_lean_build.crates`. A crate that a default
//! feature (ours or a dependency's) starts pulling in fails here, naming the path that brought
//! it; the guide's crate count is checked against the same build.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{} is readable: {e}", path.display()))
}

/// The code blocks of `page` whose info string starts with `lang`, in order.
fn blocks(page: &str, lang: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut current: Option<String> = None;
    for line in page.lines() {
        match (&mut current, line.strip_prefix("```")) {
            (None, Some(info)) if info.starts_with(lang) => current = Some(String::new()),
            (Some(_), Some("")) => found.extend(current.take()),
            (Some(block), _) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    found
}

/// A Rust block as the user's file holds it: without the lines rustdoc hides (`# ...`).
fn visible(block: &str) -> String {
    block
        .lines()
        .filter(|line| !(line.trim() == "#" || line.trim_start().starts_with("# ")))
        .map(|line| format!("{line}\n"))
        .collect()
}

/// The first service of the guide as a package of its own: its `Cargo.toml` (paths pointed at
/// this checkout), `src/lib.rs` and `src/main.rs`, with this workspace's lock file.
fn first_service() -> PathBuf {
    static PROJECT: OnceLock<PathBuf> = OnceLock::new();
    PROJECT.get_or_init(write_first_service).clone()
}

fn write_first_service() -> PathBuf {
    let guide = read(&root().join("docs/first-service.md"));
    let project = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("first-service");
    std::fs::create_dir_all(project.join("src")).unwrap();
    let manifest = blocks(&guide, "toml")
        .into_iter()
        .next()
        .expect("the guide shows the Cargo.toml");
    let checkout = format!("{}/", root().display());
    assert!(
        manifest.contains("../ruststream/"),
        "the guide's Cargo.toml depends on a checkout at ../ruststream/:\n{manifest}"
    );
    let manifest = manifest.replace("../ruststream/", &checkout);
    std::fs::write(
        project.join("Cargo.toml"),
        format!("{manifest}\n[workspace]\n"),
    )
    .unwrap();
    let rust = blocks(&guide, "rust");
    assert!(
        rust.len() >= 2,
        "the guide shows src/lib.rs and src/main.rs"
    );
    std::fs::write(project.join("src/lib.rs"), visible(&rust[0])).unwrap();
    std::fs::write(project.join("src/main.rs"), visible(&rust[1])).unwrap();
    std::fs::copy(root().join("Cargo.lock"), project.join("Cargo.lock")).unwrap();
    project
}

/// `cargo tree` on the first service's normal and build dependencies, one package a line.
fn tree(project: &Path, args: &[&str]) -> String {
    let output = Command::new(env!("CARGO"))
        .args(["tree", "--offline", "--manifest-path"])
        .arg(project.join("Cargo.toml"))
        .args(["-e", "normal,build", "--prefix", "none"])
        .args(args)
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "cargo tree failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("cargo tree prints UTF-8")
}

/// The crates the first service compiles: `(name, version)`, each once.
fn packages(project: &Path) -> BTreeSet<(String, String)> {
    tree(project, &["-f", "{p}"])
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            Some((words.next()?.to_owned(), words.next()?.to_owned()))
        })
        .collect()
}

/// The names allowed in a plain service's build, from `tests/firstrun_lean_build.crates`.
fn allowed() -> BTreeSet<String> {
    read(&root().join("tests/firstrun_lean_build.crates"))
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_plain_service_compiles_only_the_crates_it_uses() {
    let project = first_service();
    // The service itself is the first line of the tree.
    let service = tree(&project, &["-f", "{p}", "--depth", "0"]);
    let service = service
        .split_whitespace()
        .next()
        .expect("the service's package");
    let names: BTreeSet<String> = packages(&project)
        .into_iter()
        .map(|(name, _)| name)
        .filter(|name| name != service)
        .collect();
    let allowed = allowed();
    let extra: Vec<String> = names
        .difference(&allowed)
        .map(|name| {
            let path = tree(&project, &["-i", name, "-e", "features", "--depth", "6"]);
            format!("{name}, brought in by:\n{path}")
        })
        .collect();
    assert!(
        extra.is_empty(),
        "a plain service now compiles crates it does not use; put what brings them behind a \
         non-default feature, or, if every service needs them, add them to \
         tests/firstrun_lean_build.crates and update the count in docs/first-service.md:\n\n{}",
        extra.join("\n")
    );
    let gone: Vec<&String> = allowed.difference(&names).collect();
    assert!(
        gone.is_empty(),
        "no longer compiled by a plain service; take them off tests/firstrun_lean_build.crates \
         and update the count in docs/first-service.md: {gone:?}"
    );
}

#[test]
fn no_optional_part_is_on_by_default() {
    let project = first_service();
    let features = tree(&project, &["-f", "{p} [{f}]"]);
    let enabled = |crate_name: &str| -> BTreeSet<String> {
        features
            .lines()
            .find(|line| line.starts_with(&format!("{crate_name} ")))
            .and_then(|line| {
                line.rsplit_once('[')?
                    .1
                    .strip_suffix(']')
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| panic!("{crate_name} is in the first service's build"))
            .split(',')
            .filter(|f| !f.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let nats = enabled("ruststream-nats");
    assert!(
        nats.iter().all(|feature| feature == "default"),
        "ruststream-nats has default features again ({nats:?}): the embedded NATS, the testing \
         harness, OpenTelemetry, codecs and WebSocket are opt-in"
    );
    let runtime = enabled("ruststream");
    let expected: BTreeSet<String> = ["default", "prometheus"].map(String::from).into();
    assert_eq!(
        runtime, expected,
        "ruststream's default features are the Prometheus exporter only"
    );
}

#[test]
fn the_guide_states_the_measured_crate_count() {
    let project = first_service();
    let count = packages(&project).len();
    let guide = read(&root().join("docs/first-service.md"));
    let stated = format!("compiles {count} crates");
    assert!(
        guide.contains(&stated),
        "docs/first-service.md should say it `{stated}` (cargo tree counts {count}); measure \
         the cold build again and update the paragraph"
    );
}

/// The guide's service, built as a user builds it (no features), runs `describe`, and asked for
/// the embedded NATS and the OTLP export it was built without, says how to get them.
#[test]
fn the_plain_build_runs_and_names_the_embedded_feature() {
    let project = first_service();
    let target = project.join("target");
    let build = Command::new(env!("CARGO"))
        .args(["build", "--offline", "--quiet", "--manifest-path"])
        .arg(project.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .expect("cargo runs");
    assert!(
        build.status.success(),
        "the first service does not build:\n{}",
        String::from_utf8_lossy(&build.stderr)
    );
    let binary = target.join("debug/hello");
    let describe = Command::new(&binary).arg("describe").output().unwrap();
    let described = String::from_utf8_lossy(&describe.stdout);
    assert!(
        describe.status.success() && described.contains("greet"),
        "describe: {describe:?}"
    );
    // Asked to export traces too, which it was built without: a warning names that feature.
    let embedded = Command::new(&binary)
        .args(["run", "--embedded"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&embedded.stderr);
    assert_eq!(embedded.status.code(), Some(1), "run --embedded: {stderr}");
    assert!(
        stderr.contains("--features ruststream-nats/embedded"),
        "the error names the feature: {stderr}"
    );
    let stdout = String::from_utf8_lossy(&embedded.stdout);
    assert_eq!(
        stdout
            .matches("OTEL_EXPORTER_OTLP_ENDPOINT is set, but this program is built without the OTLP exporter: no trace is exported; build it with the `otlp` feature of ruststream-nats")
            .count(),
        1,
        "warned once, naming the feature: {stdout}"
    );
}
