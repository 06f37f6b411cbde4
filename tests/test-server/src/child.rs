//! A service run as a child process, to kill with `SIGKILL` in the middle of its work (a crash,
//! an OOM kill) and start again.
//!
//! [`ChildProcess::test_entry`] runs one test of the current test binary as the child: the test
//! file keeps the service's code next to the test that kills it. That test is `#[ignore]`d (it
//! runs only when asked for by name), and reads what it needs from environment variables.
//!
//! ```no_run
//! use ruststream_test_server::child::ChildProcess;
//!
//! let mut worker = ChildProcess::test_entry("worker_child", &[("WORKER_URL", "nats://...")]);
//! // ... wait until it is in the middle of something ...
//! worker.kill(); // SIGKILL: no drain, no destructor runs in the child
//! assert!(!worker.is_running());
//! ```

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use tempfile::TempDir;

/// A child process, killed on drop; its stdout and stderr go to a file.
#[derive(Debug)]
pub struct ChildProcess {
    child: Option<Child>,
    _dir: TempDir,
    output: PathBuf,
}

impl ChildProcess {
    /// Spawns `command`, its output to a temporary file.
    ///
    /// # Panics
    ///
    /// If it cannot be spawned.
    pub fn spawn(mut command: Command) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("ruststream-child-")
            .tempdir()
            .unwrap_or_else(|e| panic!("child process support: cannot create a temp dir: {e}"));
        let output = dir.path().join("output.log");
        let out = fs::File::create(&output)
            .unwrap_or_else(|e| panic!("child process support: cannot create its log: {e}"));
        let err = out
            .try_clone()
            .unwrap_or_else(|e| panic!("child process support: cannot share its log: {e}"));
        let child = command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("child process support: cannot spawn {command:?}: {e}"));
        Self {
            child: Some(child),
            _dir: dir,
            output,
        }
    }

    /// Runs test `name` of the current test binary (exactly that one, ignored or not) as the
    /// child, with `env` set.
    ///
    /// # Panics
    ///
    /// If the current executable cannot be found or spawned.
    pub fn test_entry(name: &str, env: &[(&str, &str)]) -> Self {
        let binary = std::env::current_exe()
            .unwrap_or_else(|e| panic!("child process support: no current executable: {e}"));
        let mut command = Command::new(binary);
        command.args([
            name,
            "--exact",
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ]);
        for (key, value) in env {
            command.env(key, value);
        }
        Self::spawn(command)
    }

    /// Kills the child with `SIGKILL` and waits for it: no cleanup of any kind runs in it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Whether the child still runs.
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            None => false,
            Some(child) => matches!(child.try_wait(), Ok(None)),
        }
    }

    /// The file the child's output goes to.
    pub fn output_path(&self) -> &Path {
        &self.output
    }

    /// What the child printed so far (stdout and stderr), for assertion messages.
    pub fn output(&self) -> String {
        fs::read_to_string(&self.output).unwrap_or_default()
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.kill();
    }
}
