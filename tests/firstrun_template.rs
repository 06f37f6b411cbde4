//! The project template (`templates/service`) a newcomer generates with cargo-generate works as
//! generated: rendered here as cargo-generate renders it (each placeholder replaced, the
//! RustStream dependencies pointed at this checkout), it is formatted, its tests (in process and
//! live, on a nats-server the live test starts) pass, and its binary describes its handler.
//!
//! The build reuses this workspace's target directory: crates built with the same features are
//! not built again.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const NAME: &str = "first-orders";
const CRATE: &str = "first_orders";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The workspace's target directory (`CARGO_TARGET_TMPDIR` is `<target>/tmp`).
fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("CARGO_TARGET_TMPDIR is inside the target directory")
        .to_path_buf()
}

/// Every file under `dir`, as paths relative to it.
fn files(dir: &Path, base: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            files(&path, base, out);
        } else {
            out.push(path.strip_prefix(base).expect("under base").to_path_buf());
        }
    }
}

/// Writes `contents` to `path` unless it holds them already: an unchanged file keeps its time,
/// so cargo does not build the project again.
fn write(path: &Path, contents: &str) {
    if std::fs::read_to_string(path).is_ok_and(|old| old == contents) {
        return;
    }
    std::fs::create_dir_all(path.parent().expect("a parent")).expect("the directory");
    std::fs::write(path, contents).expect("written");
}

/// Renders the template, as `cargo generate --name first-orders` would with the RustStream
/// checkout at this workspace, over the last rendering (a file the template no longer has is
/// removed).
fn render() -> PathBuf {
    let template = root().join("templates/service");
    let project = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("template")
        .join(NAME);
    let mut paths = Vec::new();
    files(&template, &template, &mut paths);
    // cargo-generate reads its own configuration and leaves it out of the project.
    paths.retain(|path| path != Path::new("cargo-generate.toml"));
    if project.is_dir() {
        let mut old = Vec::new();
        files(&project, &project, &mut old);
        for path in old {
            if !paths.contains(&path) && path != Path::new("Cargo.lock") {
                std::fs::remove_file(project.join(path)).expect("a stale file removed");
            }
        }
    }
    let checkout = root().display().to_string();
    for path in paths {
        let text = std::fs::read_to_string(template.join(&path)).expect("a text file");
        let rendered = text
            .replace("{{project-name}}", NAME)
            .replace("{{crate_name}}", CRATE)
            .replace("{{ruststream_path}}", &checkout)
            .replace(
                "{{ruststream_git}}",
                "https://example.invalid/ruststream.git",
            );
        assert!(
            !rendered.contains("{{") && !rendered.contains("{%"),
            "templates/service/{} uses a placeholder cargo-generate.toml does not declare (or \
             text cargo-generate would take for one):\n{rendered}",
            path.display()
        );
        // Generated under this workspace's target directory, it stays a workspace of its own.
        let rendered = if path == Path::new("Cargo.toml") {
            rendered + "\n[workspace]\n"
        } else {
            rendered
        };
        write(&project.join(&path), &rendered);
    }
    // The same versions as this workspace, offline (cargo prunes what the project does not use).
    if !project.join("Cargo.lock").exists() {
        std::fs::copy(root().join("Cargo.lock"), project.join("Cargo.lock")).expect("the lock");
    }
    project
}

/// `cargo ARGS` on the project, in this workspace's target directory, without the variables
/// cargo sets for this test: build scripts (ring's) watch some of them, and a different value
/// would build them again here and again in the next workspace build.
fn cargo(project: &Path, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO"));
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        let set_for_this_test = key.starts_with("CARGO_PKG_")
            || [
                "CARGO_MANIFEST_DIR",
                "CARGO_MANIFEST_PATH",
                "CARGO_MANIFEST_LINKS",
                "CARGO_CRATE_NAME",
                "CARGO_BIN_NAME",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_TARGET_TMPDIR",
                "CARGO_RUSTC_CURRENT_DIR",
                "OUT_DIR",
            ]
            .contains(&&*key);
        if set_for_this_test {
            command.env_remove(&*key);
        }
    }
    command
        .args(args)
        .arg("--manifest-path")
        .arg(project.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", target_dir())
        .output()
        .expect("cargo runs")
}

fn text(output: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn the_generated_service_is_formatted_passes_its_tests_and_describes_itself() {
    let project = render();

    let fmt = cargo(&project, &["fmt", "--check"]);
    assert!(
        fmt.status.success(),
        "the generated service is not formatted as `cargo fmt` formats it:\n{}",
        text(&fmt)
    );

    let test = cargo(&project, &["test", "--offline"]);
    let out = text(&test);
    assert!(
        test.status.success(),
        "the generated service's tests:\n{out}"
    );
    for name in ["in_process", "live"] {
        assert!(
            out.contains(&format!("test {name} ... ok")),
            "the test `{name}` ran and passed:\n{out}"
        );
    }

    let describe = Command::new(target_dir().join("debug").join(NAME))
        .arg("describe")
        .output()
        .expect("the service's binary runs");
    let described = text(&describe);
    assert!(
        describe.status.success()
            && described.contains("accept")
            && described.contains("orders.created")
            && described.contains("orders.dead"),
        "describe names the handler, its subject and its dead letters:\n{described}"
    );
}
