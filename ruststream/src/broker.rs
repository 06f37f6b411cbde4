//! The seam between the runtime and a broker crate.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::error::Error;
use crate::observer::Observer;
use crate::publish::Publish;
use crate::registration::{Endpoint, RegistrationInfo};

/// A message broker the app connects to: NATS, for one.
///
/// A broker records its configuration when built and connects only in [`Broker::start`].
pub trait Broker: Send + 'static {
    /// A short name for logs and `describe`: `nats`.
    fn kind(&self) -> &'static str;

    /// Where the broker is, safe to print (no credentials).
    fn address(&self) -> String;

    /// Refuses registrations the broker cannot run, before anything connects.
    fn validate(&self, registrations: &[RegistrationInfo]) -> Result<(), Error>;

    /// The streams the broker declares at startup, as `(name, subjects)`, for `describe`.
    fn declared_streams(&self) -> Vec<(String, Vec<String>)> {
        Vec::new()
    }

    /// How the broker's client authenticates, for the AsyncAPI document: the ways its
    /// configuration shows, never a secret. None by default.
    fn security_schemes(&self) -> Vec<crate::asyncapi::SecurityScheme> {
        Vec::new()
    }

    /// What the broker would run but warns about at startup (and `check` prints): a
    /// registration that can retry forever, say. One sentence each, naming the registration.
    fn warnings(&self, registrations: &[RegistrationInfo]) -> Vec<String> {
        let _ = registrations;
        Vec::new()
    }

    /// The startup checks that need the server, without changing anything on it (`check`):
    /// connects and reports, one line each, what it checked. The default checks nothing.
    fn check<'a>(
        &'a self,
        registrations: &'a [RegistrationInfo],
        env: &'a Env,
    ) -> BoxFuture<'a, Result<Vec<String>, Error>> {
        let _ = (registrations, env);
        Box::pin(async { Ok(Vec::new()) })
    }

    /// Connects, opens every endpoint and starts handing it deliveries.
    fn start(
        self: Box<Self>,
        endpoints: Vec<Endpoint>,
        env: Env,
    ) -> BoxFuture<'static, Result<Box<dyn RunningBroker>, Error>>;
}

/// A started broker.
pub trait RunningBroker: Send {
    /// Stops taking deliveries, lets handlers in flight finish (up to the drain timeout), sends
    /// their settlements, flushes and closes.
    fn stop(self: Box<Self>) -> BoxFuture<'static, Result<(), Error>>;

    /// What publishes on this broker from outside a handler (`main`, a startup hook, a test),
    /// if it offers that. `None` by default.
    fn publisher(&self) -> Option<Arc<dyn Publish>> {
        None
    }
}

/// The environment an app starts in: the drain timeout, an observer for tests, and typed
/// values a broker may look for (an in-process transport, for one).
#[derive(Clone, Default)]
pub struct Env {
    values: HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
    observer: Option<Arc<dyn Observer>>,
    /// Set by the code that built the environment (a test, `TestApp`); `None`: the app's, else
    /// [`DEFAULT_DRAIN_TIMEOUT`].
    drain_timeout: Option<Duration>,
}

/// How long a stop waits for handlers in flight when nobody chose.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

impl fmt::Debug for Env {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Env")
            .field("values", &self.values.len())
            .field("observer", &self.observer.is_some())
            .field("drain_timeout", &self.drain_timeout)
            .finish()
    }
}

impl Env {
    /// The production environment.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a typed value for brokers to find.
    pub fn with<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.values.insert(TypeId::of::<T>(), Arc::new(value));
        self
    }

    /// A typed value, if one was added.
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.values.get(&TypeId::of::<T>())?.downcast_ref()
    }

    /// Sets the observer told of every handled delivery.
    pub fn with_observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// The observer, if any.
    pub fn observer(&self) -> Option<&Arc<dyn Observer>> {
        self.observer.as_ref()
    }

    /// Sets how long a stop waits for handlers in flight.
    pub fn with_drain_timeout(mut self, timeout: Duration) -> Self {
        self.drain_timeout = Some(timeout);
        self
    }

    /// How long a stop waits for handlers in flight.
    pub fn drain_timeout(&self) -> Duration {
        self.drain_timeout.unwrap_or(DEFAULT_DRAIN_TIMEOUT)
    }

    /// The drain timeout set with [`with_drain_timeout`](Self::with_drain_timeout), if any.
    pub(crate) fn chosen_drain_timeout(&self) -> Option<Duration> {
        self.drain_timeout
    }
}

/// Put into the [`Env`] by the generated `main`: the broker URL from `run --url` or the
/// `NATS_URL` environment variable, which a broker uses instead of the URL in the code.
///
/// Its `Debug` shows the URL with every server's credentials redacted.
#[derive(Clone, PartialEq, Eq)]
pub struct BrokerUrl {
    /// The URL, as given (it may carry credentials: never print it as it is).
    pub url: String,
    /// Where it came from, for logs and errors: `--url` or `NATS_URL`.
    pub from: &'static str,
}

impl fmt::Debug for BrokerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BrokerUrl")
            .field("url", &redact_url(&self.url))
            .field("from", &self.from)
            .finish()
    }
}

/// `url` safe to print: every server's credentials (`user:password@`, `token@`, up to the last
/// `@` of the server) become `<redacted>@`. A server that is not `host[:port]` once its
/// credentials are out (a password cut by an unencoded `,`) is shown as `<redacted>` whole.
pub(crate) fn redact_url(url: &str) -> String {
    url.split(',')
        .map(|one| {
            let one = one.trim();
            let (scheme, rest) = match one.find("://") {
                Some(i) => one.split_at(i + 3),
                None => ("", one),
            };
            let (userinfo, host) = match rest.rfind('@') {
                Some(at) => ("<redacted>@", &rest[at + 1..]),
                None => ("", rest),
            };
            if looks_like_host(host) {
                format!("{scheme}{userinfo}{host}")
            } else {
                "<redacted>".to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Whether `rest` (what follows the scheme and credentials) starts with `host` or `host:port`
/// with a numeric port, so that it cannot be a piece of a password.
fn looks_like_host(rest: &str) -> bool {
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.starts_with('[') {
        // An IPv6 address: `[::1]` or `[::1]:4222`.
        return match authority.rsplit_once(']') {
            Some((_, "")) => true,
            Some((_, port)) => port
                .strip_prefix(':')
                .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())),
            None => false,
        };
    }
    match authority.split_once(':') {
        None => !authority.is_empty(),
        Some((host, port)) => {
            !host.is_empty() && !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit())
        }
    }
}

/// Put into the [`Env`] by `run --embedded` (or `RUSTSTREAM_EMBEDDED=1`): the broker
/// runs on a server inside the process, for development, with nothing persisted (a broker that
/// cannot refuses to start).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Embedded {
    /// A file of messages to publish once the app started: one `publish SUBJECT JSON` a line.
    pub seed: Option<std::path::PathBuf>,
    /// Whether to read more `publish SUBJECT JSON` lines from standard input.
    pub stdin: bool,
    /// Notified once standard input ended and what it published was handled: `run` then stops,
    /// so that a piped script ends the program.
    pub input_ended: InputEnded,
}

/// Between `run` and the embedded NATS (see [`Embedded::input_ended`]): `run` notifies
/// `started` once the app consumes (before that, a message stored but not yet delivered is
/// counted nowhere); the embedded NATS notifies `ended` once its standard input has ended and
/// nothing is left to handle.
#[derive(Debug, Clone, Default)]
pub struct InputEnded {
    /// Notified by `run` once the app started.
    pub started: std::sync::Arc<tokio::sync::Notify>,
    /// Notified by the embedded NATS once its input ended and every message was handled.
    pub ended: std::sync::Arc<tokio::sync::Notify>,
}

impl PartialEq for InputEnded {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.ended, &other.ended)
    }
}

impl Eq for InputEnded {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_url_hides_every_credential() {
        assert_eq!(redact_url("nats://localhost:4222"), "nats://localhost:4222");
        assert_eq!(
            redact_url("nats://alice:s3cret@localhost:4222"),
            "nats://<redacted>@localhost:4222"
        );
        assert_eq!(
            redact_url("tls://T0KEN@host:4222/x"),
            "tls://<redacted>@host:4222/x"
        );
        assert_eq!(redact_url("a:b@host"), "<redacted>@host");
        assert_eq!(
            redact_url("nats://u:pa/ss?w@rd@host:4222, nats://b:4222"),
            "nats://<redacted>@host:4222,nats://b:4222"
        );
        assert_eq!(redact_url("nats://[::1]:4222"), "nats://[::1]:4222");
        // A password cut by an unencoded `,`: neither piece shows.
        assert_eq!(
            redact_url("nats://alice:pa,ss@host:4222"),
            "<redacted>,<redacted>@host:4222"
        );
    }

    #[test]
    fn broker_url_debug_shows_no_password() {
        let url = BrokerUrl {
            url: "nats://alice:Pw/9x?q:z#Lm2@127.0.0.1:4222".into(),
            from: "NATS_URL",
        };
        let shown = format!("{url:?}");
        assert!(!shown.contains("Pw/9x"), "{shown}");
        assert!(!shown.contains("Lm2"), "{shown}");
        assert!(shown.contains("127.0.0.1:4222"), "{shown}");
        assert!(shown.contains("NATS_URL"), "{shown}");
        let token = BrokerUrl {
            url: "nats://T0k3n-7f1c@host".into(),
            from: "--url",
        };
        assert!(!format!("{token:?}").contains("T0k3n"), "{token:?}");
    }
}
