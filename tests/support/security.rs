//! What the `security_*` tests share: every log line of the test binary, captured at TRACE for
//! every target (async-nats's and rustls's included, [`super::logs::Logs::global`]), to look for
//! a secret or a warning in.

// Each test crate uses a part of it.
#![allow(dead_code)]

pub use super::logs::Logs as Captured;

/// Installs the capturing subscriber (once per test binary) at TRACE for every target, `log`
/// records included, and returns what it captured.
pub fn capture() -> Captured {
    Captured::global()
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
