//! Where the broker URL comes from (`run --url`, `NATS_URL`, the code), whether it parses, and
//! which nats-server versions RustStream supports.

use ruststream::broker::BrokerUrl;
use ruststream::{Env, Error, ErrorKind};

use crate::options::{SplitUrl, split_credentials};

/// The oldest nats-server RustStream supports: the oldest its tests run against in CI.
///
/// Older servers miss pull-request heartbeats and `-NAK` delays the runtime relies on. 2.9.x
/// also has a defect a 2.10 server fixed: a delayed redelivery that comes due as the only
/// waiting pull request expires is lost until `ack_wait` runs out (RustStream keeps a second
/// request waiting before one expires, which avoids it; see `transport/nats/pull.rs`).
pub const MIN_SERVER_VERSION: (u64, u64, u64) = (2, 9, 10);

/// The URL given to the app from outside (`--url`, `NATS_URL`), split from its credentials at
/// once, and where it came from; `None` when the code's URL stands.
pub(crate) fn given(env: &Env) -> Option<(SplitUrl, &'static str)> {
    env.get::<BrokerUrl>()
        .map(|given| (split_credentials(&given.url), given.from))
}

/// Refuses a URL that does not parse, naming the setting it came from. `servers` carry no
/// credentials (see [`split_credentials`]), so the message may quote them.
pub(crate) fn check_url(servers: &[String], from: &str) -> Result<(), Error> {
    if servers.is_empty() {
        return Err(Error::new(
            ErrorKind::Config,
            format!(
                "the NATS URL from {from} names no server; set it to a URL such as nats://localhost:4222"
            ),
        ));
    }
    let problems: Vec<String> = servers
        .iter()
        .filter_map(|one| {
            one.parse::<async_nats::ServerAddr>()
                .err()
                .map(|err| format!("`{one}`: {err}"))
        })
        .collect();
    if problems.is_empty() {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::Config,
        format!(
            "the NATS URL from {from} does not parse ({}); set it to a URL such as nats://localhost:4222 (several separated by commas)",
            problems.join(", ")
        ),
    ))
}

/// `2.9.10` as numbers; a suffix (`-beta`) is ignored, a missing part is 0.
pub(crate) fn parse_version(version: &str) -> Option<(u64, u64, u64)> {
    let core = version.trim().trim_start_matches('v');
    let core = core.split(['-', '+']).next()?;
    let mut parts = core.split('.').map(str::parse::<u64>);
    let major = parts.next()?.ok()?;
    let minor = parts.next().unwrap_or(Ok(0)).ok()?;
    let patch = parts.next().unwrap_or(Ok(0)).ok()?;
    Some((major, minor, patch))
}

/// The warning for a server older than [`MIN_SERVER_VERSION`], if it is.
pub(crate) fn version_warning(version: &str) -> Option<String> {
    let found = parse_version(version)?;
    (found < MIN_SERVER_VERSION).then(|| {
        let (a, b, c) = MIN_SERVER_VERSION;
        format!(
            "nats-server {version} is older than {a}.{b}.{c}, the oldest RustStream supports; redeliveries and pull requests may misbehave: upgrade the server"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_below_the_minimum_are_warned_about() {
        assert_eq!(parse_version("2.9.10"), Some((2, 9, 10)));
        assert_eq!(parse_version("2.15.1-beta.2"), Some((2, 15, 1)));
        assert_eq!(parse_version("v2.10"), Some((2, 10, 0)));
        assert_eq!(parse_version("garbage"), None);
        assert!(version_warning("2.9.10").is_none());
        assert!(version_warning("2.15.1").is_none());
        let warning = version_warning("2.8.4").expect("2.8.4 is too old");
        assert!(
            warning.contains("2.8.4") && warning.contains("2.9.10"),
            "{warning}"
        );
    }

    #[test]
    fn a_url_that_does_not_parse_names_its_setting_and_hides_credentials() {
        let check = |url: &str, from| check_url(&split_credentials(url).servers, from);
        assert!(check("nats://localhost:4222", "--url").is_ok());
        assert!(check("nats://a:4222, nats://b:4223", "NATS_URL").is_ok());
        let err = check("nats://alice:s3cret@host:notaport", "NATS_URL")
            .expect_err("the port is not a number")
            .to_string();
        assert!(err.contains("from NATS_URL"), "{err}");
        assert!(!err.contains("s3cret"), "{err}");
        let err = check(" , ", "--url").expect_err("no server");
        assert!(err.to_string().contains("from --url"), "{err}");
    }
}
