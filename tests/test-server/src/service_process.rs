//! A RustStream service running as a child process, killed with `SIGKILL` (a crash, an OOM kill)
//! or stopped with `SIGTERM` (a graceful drain) by the test. Its stdout and stderr go to files
//! whose tail the failure messages show. Dropping it kills the process.
//!
//! The service is either an example of the workspace ([`ServiceProcess::example`], built once
//! per test binary, started by [`ServiceProcess::spawn`]), or one test of the current test binary
//! ([`ServiceProcess::test_entry`]): the test file keeps the service's code next to the test that
//! kills it. That test is `#[ignore]`d (it runs only when asked for by name), and reads what it
//! needs from environment variables.
//!
//! ```no_run
//! use ruststream_test_server::service_process::ServiceProcess;
//!
//! let binary = ServiceProcess::example("orders_worker");
//! let mut worker = ServiceProcess::spawn(&binary, &[("NATS_URL", "nats://127.0.0.1:4222")]);
//! worker.terminate(); // SIGTERM: the app drains and exits
//!
//! let mut child = ServiceProcess::test_entry("worker_child", &[("WORKER_URL", "nats://...")]);
//! // ... wait until it is in the middle of something ...
//! child.kill(); // SIGKILL: no drain, no destructor runs in the child
//! assert!(!child.is_running());
//! ```

use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// How long a graceful stop may take before the test fails.
const STOP_DEADLINE: Duration = Duration::from_secs(30);
/// How often the process is polled.
const POLL: Duration = Duration::from_millis(20);
/// How many trailing lines of the output go into a panic message.
const TAIL_LINES: usize = 40;

/// A child process running a service.
#[derive(Debug)]
pub struct ServiceProcess {
    binary: PathBuf,
    child: Option<Child>,
    dir: TempDir,
}

impl ServiceProcess {
    /// The path of the workspace example `name` (`examples/NAME.rs`), built in the target
    /// directory of the running test when it is missing or older than its source (`cargo test`
    /// of the whole workspace has built it already; `cargo test --test X` has not). Built once
    /// per test binary.
    ///
    /// # Panics
    ///
    /// If cargo cannot build it; the message has cargo's output.
    pub fn example(name: &str) -> PathBuf {
        static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
        let mut built = BUILT
            .get_or_init(Mutex::default)
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(path) = built.get(name) {
            return path.clone();
        }
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let root = root.canonicalize().unwrap_or(root);
        // The test runs as `<target>/<profile>/deps/<test>-<hash>`.
        let exe = std::env::current_exe()
            .unwrap_or_else(|e| panic!("service process support: no current exe: {e}"));
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .map(Path::to_path_buf)
            .unwrap_or_else(|| root.join("target/debug"));
        let target_dir = profile_dir
            .parent()
            .map_or_else(|| root.join("target"), Path::to_path_buf);
        let release = profile_dir.file_name().is_some_and(|n| n == "release");
        let binary = profile_dir.join("examples").join(name);
        let source = [
            root.join("examples").join(format!("{name}.rs")),
            root.join("examples/manual").join(format!(
                "{}.rs",
                name.strip_prefix("manual_").unwrap_or(name)
            )),
        ];
        let fresh = fs::metadata(&binary)
            .and_then(|b| b.modified())
            .is_ok_and(|built_at| {
                source.iter().all(|s| {
                    fs::metadata(s)
                        .and_then(|m| m.modified())
                        .map_or(true, |changed| changed <= built_at)
                })
            });
        if !fresh {
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let mut command = Command::new(cargo);
            command
                .current_dir(&root)
                .args(["build", "--quiet", "--example", name, "--target-dir"])
                .arg(&target_dir);
            if release {
                command.arg("--release");
            }
            let output = command
                .stdin(Stdio::null())
                .output()
                .unwrap_or_else(|e| panic!("service process support: cannot run cargo: {e}"));
            assert!(
                output.status.success(),
                "service process support: `cargo build --example {name}` failed ({}):\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        assert!(
            binary.is_file(),
            "service process support: example {name} not found at {} after building it",
            binary.display()
        );
        built.insert(name.to_owned(), binary.clone());
        binary
    }

    /// Starts `binary` (with `run`, the default command) with `env` added to the test's
    /// environment.
    ///
    /// # Panics
    ///
    /// If the process cannot be spawned.
    pub fn spawn(binary: &Path, env: &[(&str, &str)]) -> Self {
        let mut command = Command::new(binary);
        command.envs(env.iter().copied());
        Self::start(command, binary.to_path_buf())
    }

    /// Runs test `name` of the current test binary (exactly that one, ignored or not) as the
    /// child, with `env` added to the test's environment.
    ///
    /// # Panics
    ///
    /// If the current executable cannot be found or spawned.
    pub fn test_entry(name: &str, env: &[(&str, &str)]) -> Self {
        let binary = std::env::current_exe()
            .unwrap_or_else(|e| panic!("service process support: no current executable: {e}"));
        let mut command = Command::new(&binary);
        command
            .args([
                name,
                "--exact",
                "--include-ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .envs(env.iter().copied());
        Self::start(command, binary.with_file_name(name))
    }

    /// Spawns `command` (named `binary` in messages), its stdout and stderr to files.
    fn start(mut command: Command, binary: PathBuf) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("ruststream-service-")
            .tempdir()
            .unwrap_or_else(|e| panic!("service process support: cannot create a temp dir: {e}"));
        let file = |name: &str| {
            fs::File::create(dir.path().join(name))
                .unwrap_or_else(|e| panic!("service process support: cannot create {name}: {e}"))
        };
        let child = command
            .stdin(Stdio::null())
            .stdout(file("stdout"))
            .stderr(file("stderr"))
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "service process support: cannot spawn {}: {e}",
                    binary.display()
                )
            });
        Self {
            binary,
            child: Some(child),
            dir,
        }
    }

    /// The process id, while it runs.
    pub fn id(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process runs.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// Kills the process with `SIGKILL`, like a crash: nothing is drained or acknowledged.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Asks the process to stop with `SIGTERM` (the app drains: it stops taking deliveries and
    /// lets its handlers finish and settle) and waits until it exited. Returns its exit status.
    ///
    /// # Panics
    ///
    /// If it does not run, or does not exit within 30 seconds (it is killed then).
    pub fn terminate(&mut self) -> ExitStatus {
        let Some(mut child) = self.child.take() else {
            panic!(
                "service process support: {} is not running\n{}",
                self.binary.display(),
                self.output_tail()
            );
        };
        // std cannot send SIGTERM; the shell's `kill` builtin is always there.
        let _ = Command::new("sh")
            .args(["-c", "kill -TERM \"$1\"", "sh", &child.id().to_string()])
            .stdin(Stdio::null())
            .status();
        let deadline = Instant::now() + STOP_DEADLINE;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "service process support: {} did not stop within {STOP_DEADLINE:?} of SIGTERM\n{}",
                    self.binary.display(),
                    self.output_tail()
                );
            }
            thread::sleep(POLL);
        }
    }

    /// Everything the process wrote to stdout so far.
    pub fn stdout(&self) -> String {
        fs::read_to_string(self.dir.path().join("stdout")).unwrap_or_default()
    }

    /// The last lines of the process's stdout and stderr, for assertion messages.
    pub fn output_tail(&self) -> String {
        let mut out = String::new();
        for name in ["stdout", "stderr"] {
            let text = fs::read_to_string(self.dir.path().join(name)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let skip = lines.len().saturating_sub(TAIL_LINES);
            let _ = writeln!(
                out,
                "--- {} {name} (last {} lines) ---",
                self.binary.display(),
                lines.len() - skip
            );
            for line in &lines[skip..] {
                let _ = writeln!(out, "{line}");
            }
        }
        out
    }
}

impl Drop for ServiceProcess {
    fn drop(&mut self) {
        self.kill();
    }
}
