//! What the `security_*` tests share: every log line of the test binary, captured at TRACE for
//! every target (async-nats's and rustls's included), to look for a secret or a warning in.

// Each test crate uses a part of it.
#![allow(dead_code)]

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

/// Every line logged so far by any test of this binary.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("not poisoned")).into_owned()
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

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("not poisoned").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs the capturing subscriber (once per test binary) at TRACE for every target, `log`
/// records included, and returns what it captured.
pub fn capture() -> Captured {
    static CAPTURED: OnceLock<Captured> = OnceLock::new();
    CAPTURED
        .get_or_init(|| {
            let captured = Captured::default();
            let writer = captured.clone();
            tracing_subscriber::fmt()
                .with_max_level(tracing::Level::TRACE)
                .with_ansi(false)
                .with_writer(move || writer.clone())
                .try_init()
                .expect(
                    "the capturing subscriber must be the first one installed; run the security tests without RUST_LOG",
                );
            captured
        })
        .clone()
}

/// Asserts that `secret` appears nowhere in what was logged, nor in `texts`.
pub fn assert_never_shown(captured: &Captured, secret: &str, texts: &[(&str, String)]) {
    let logged = captured.text();
    assert!(
        !logged.is_empty(),
        "the capturing subscriber saw nothing: the test proves nothing"
    );
    if let Some(line) = logged.lines().find(|line| line.contains(secret)) {
        panic!("a log line shows the secret: {line}");
    }
    for (what, text) in texts {
        assert!(!text.contains(secret), "{what} shows the secret: {text}");
    }
}
