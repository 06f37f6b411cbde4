//! Log capture: every line the runtime (and any library under it) logs while a capturing
//! subscriber is installed, to look for a warning, an error or a leaked secret in.
//!
//! [`Logs::install`] and [`Logs::install_at`] capture on the test's thread while the guard lives
//! (`#[tokio::test]` runs every task on the test's thread); [`Logs::global`] captures everything
//! the test binary logs, at TRACE for every target, from its first call on.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// The lines logged while it is installed.
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    /// Captures INFO and above on this thread until the guard is dropped.
    pub fn install(&self) -> tracing::subscriber::DefaultGuard {
        self.install_at(tracing::Level::INFO)
    }

    /// Captures `level` and above on this thread until the guard is dropped.
    pub fn install_at(&self, level: tracing::Level) -> tracing::subscriber::DefaultGuard {
        let logs = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(level)
            .with_writer(move || logs.clone())
            .finish();
        tracing::subscriber::set_default(subscriber)
    }

    /// Every line the test binary logs, at TRACE for every target (async-nats's and rustls's
    /// included, `log` records too): the global subscriber, installed by the first call.
    ///
    /// # Panics
    ///
    /// If another global subscriber was installed first (`RUST_LOG` makes the helpers install
    /// one).
    pub fn global() -> Self {
        static GLOBAL: OnceLock<Logs> = OnceLock::new();
        GLOBAL
            .get_or_init(|| {
                let logs = Self::default();
                let writer = logs.clone();
                tracing_subscriber::fmt()
                    .with_max_level(tracing::Level::TRACE)
                    .with_ansi(false)
                    .with_writer(move || writer.clone())
                    .try_init()
                    .expect(
                        "the capturing subscriber must be the first one installed; run these tests without RUST_LOG",
                    );
                logs
            })
            .clone()
    }

    /// Everything captured so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(PoisonError::into_inner)).into_owned()
    }

    /// The captured lines.
    pub fn lines(&self) -> Vec<String> {
        self.text().lines().map(str::to_owned).collect()
    }

    /// The captured lines that contain every one of `needles`.
    pub fn lines_with(&self, needles: &[&str]) -> Vec<String> {
        self.text()
            .lines()
            .filter(|line| needles.iter().all(|needle| line.contains(needle)))
            .map(str::to_owned)
            .collect()
    }
}

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
