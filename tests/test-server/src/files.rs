//! The files a running `nats-server` writes that a test reads: its ports file (the client
//! port it chose) and the tails of its log and stderr.

use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::Path;

/// How many trailing lines of the server's log and stderr go into a panic message.
const LOG_TAIL_LINES: usize = 60;

/// Removes ports files left by earlier runs (a killed server leaves its own).
pub(crate) fn remove_ports_files(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().ends_with(".ports") {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Reads the client port from `<dir>/<binary name>_<pid>.ports`, which looks
/// like `{"nats":["nats://127.0.0.1:41234"],...}`. `None` until it is complete.
pub(crate) fn read_ports_file(dir: &Path, pid: u32) -> Option<u16> {
    let suffix = format!("_{pid}.ports");
    let path = fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|entry| entry.path())
        .find(|path| {
            path.file_name()
                .is_some_and(|name| name.to_string_lossy().ends_with(&suffix))
        })?;
    parse_client_port(&fs::read_to_string(path).ok()?)
}

/// Extracts the port of the first URL in the `"nats"` array of a ports file.
fn parse_client_port(json: &str) -> Option<u16> {
    let after_key = &json[json.find("\"nats\"")? + "\"nats\"".len()..];
    let array = after_key.trim_start().strip_prefix(':')?.trim_start();
    let array = array.strip_prefix('[')?.trim_start();
    let url = array.strip_prefix('"')?;
    let url = &url[..url.find('"')?];
    let port = url.rsplit(':').next()?;
    port.trim_end_matches('/').parse().ok()
}

pub(crate) fn append_tail(out: &mut String, label: &str, path: &Path) {
    match fs::read_to_string(path) {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            let skip = lines.len().saturating_sub(LOG_TAIL_LINES);
            let _ = writeln!(
                out,
                "--- nats-server {label} ({}, last {} lines) ---",
                path.display(),
                lines.len() - skip
            );
            for line in &lines[skip..] {
                let _ = writeln!(out, "{line}");
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let _ = writeln!(
                out,
                "--- nats-server {label}: none ({}) ---",
                path.display()
            );
        }
        Err(e) => {
            let _ = writeln!(
                out,
                "--- nats-server {label}: cannot read {}: {e} ---",
                path.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_client_port;

    #[test]
    fn parses_the_ports_file() {
        assert_eq!(
            parse_client_port(r#"{"nats":["nats://127.0.0.1:44993"]}"#),
            Some(44993)
        );
        assert_eq!(
            parse_client_port(
                r#"{"nats": [ "nats://127.0.0.1:4222" ], "monitoring": ["http://127.0.0.1:8222"]}"#
            ),
            Some(4222)
        );
        assert_eq!(parse_client_port(r#"{"nats":["nats://127.0.0.1:"#), None);
        assert_eq!(parse_client_port(""), None);
    }
}
