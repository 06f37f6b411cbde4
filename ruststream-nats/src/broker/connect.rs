//! Connecting to NATS: the options the broker was given, and, when it fails, why (naming the
//! server, never a credential) and the likely fix; a client the app connected; or the embedded
//! NATS in place of a server.

use std::sync::Arc;

use ruststream::broker::Embedded;
#[cfg(feature = "embedded")]
use ruststream::registration::RegistrationInfo;
use ruststream::{Endpoint, Env, Error, ErrorKind};

use super::NatsBroker;
use crate::events::Events;
use crate::options::ConnectionOptions;
use crate::settings;
use crate::transport::nats::NatsTransport;
use crate::transport::{StreamDeclaration, Transport};

impl NatsBroker {
    /// Connects with async-nats's own `options` (ping interval, reconnect policy and delay,
    /// buffers, inbox prefix, `no_echo`, name, an auth callback...), under the URL's servers and
    /// credentials: credentials in the URL, `NATS_URL` or `--url`, and those given with
    /// `.user_and_password(..)`, `.token(..)`, `.nkey(..)` or `.credentials_file(..)`, replace
    /// the options' own; TLS files and `.connection_name(..)` add to them. The options' own
    /// `connection_timeout` stands unless `.connection_timeout(..)` sets one, and so does their
    /// `subscription_capacity` (async-nats's 65 536 unless set, where the broker's own
    /// connection holds 262 144 messages per subscription). RustStream
    /// installs its own event callback (the connection logs, `/readyz`, the `ruststream_connected`
    /// gauge), replacing one the options carry.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ruststream_nats::NatsBroker;
    ///
    /// let broker = NatsBroker::new("nats://localhost:4222").with_options(
    ///     async_nats::ConnectOptions::new()
    ///         .ping_interval(Duration::from_secs(10))
    ///         .custom_inbox_prefix("_INBOX_ORDERS"),
    /// );
    /// # let _ = broker;
    /// ```
    pub fn with_options(mut self, options: async_nats::ConnectOptions) -> Self {
        self.options.base = Some(options);
        self
    }

    /// Runs on `client`, a connection the app made itself with async-nats: the app neither
    /// connects nor closes it. `--url` and `NATS_URL` do not apply (a warning says so when one
    /// is set), nor do the broker's connection settings (credentials, TLS, name, timeout,
    /// `with_options`): giving one is an error at start, since the client is connected already.
    /// Connection events are the client's own: readiness follows its connection state.
    pub fn from_client(client: async_nats::Client) -> Self {
        let info = client.server_info();
        let mut broker = Self::new(format!("nats://{}:{}", info.host, info.port));
        broker.client = Some(client);
        broker
    }

    /// The transport on the client the app connected (`from_client`).
    fn adopt(
        &self,
        client: &async_nats::Client,
        env: &Env,
        events: Arc<Events>,
    ) -> Result<NatsTransport, Error> {
        check_capacity(&self.options)?;
        let set = self.options.set_methods();
        if !set.is_empty() {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "the broker runs on a client the app connected (`NatsBroker::from_client`), which {} cannot change; give those settings to async_nats::ConnectOptions before connecting",
                    set.join(", ")
                ),
            ));
        }
        if let Some((_, from)) = settings::given(env) {
            tracing::warn!(
                "the URL from {from} is not used: the app runs on the client it connected itself (`NatsBroker::from_client`)"
            );
        }
        let info = client.server_info();
        tracing::info!(
            address = %self.url,
            server_version = %info.version,
            "running on the NATS client the app connected"
        );
        Ok(NatsTransport::new(client.clone())
            .with_events(events)
            .with_core_capacity(self.options.subscription_capacity))
    }

    /// The servers the app connects to, without credentials, and where the URL came from:
    /// `--url` or `NATS_URL` when `env` gives one, else the code's.
    pub(super) fn address(&self, env: &Env) -> (String, &'static str) {
        match settings::given(env) {
            Some((split, from)) => (split.servers.join(","), from),
            None => (self.url.clone(), "the app's code"),
        }
    }

    /// Connects to the server at the URL `env` gives (`--url`, `NATS_URL`), else the one in the
    /// code. async-nats is given the servers without credentials, and the credentials as
    /// options: an outside URL's credentials replace the code's, its servers without any keep
    /// the code's way of authenticating.
    pub(super) async fn connect(
        &self,
        env: &Env,
        events: Arc<Events>,
    ) -> Result<NatsTransport, Error> {
        if let Some(client) = &self.client {
            return self.adopt(client, env, events);
        }
        let (servers, url_problem, options, from) = match settings::given(env) {
            Some((split, from)) => {
                let mut options = self.options.clone();
                if split.auth.is_some() {
                    options.auth = split.auth;
                }
                (split.servers, split.problem, options, from)
            }
            None => (
                self.servers.clone(),
                self.url_problem.clone(),
                self.options.clone(),
                "the app's code",
            ),
        };
        settings::check_url(&servers, from)?;
        let address = servers.join(",");
        if let Some(problem) = url_problem {
            return Err(Error::new(
                ErrorKind::Config,
                format!("cannot connect to NATS at {address} (URL from {from}): {problem}"),
            ));
        }
        tracing::info!(address = %address, from, "connecting to NATS (URL from {from})");
        let options = options.for_servers(&servers);
        let mut built = options.build(&address).await?;
        check_capacity(&options)?;
        let callback = Arc::clone(&events);
        built = built.event_callback(move |event| {
            let events = Arc::clone(&callback);
            async move { events.on_event(event) }
        });
        let client = built
            .connect(servers)
            .await
            .map_err(|err| connect_error(&address, &options, err))?;
        let version = client.server_info().version;
        tracing::info!(address = %address, server_version = %version, "connected to NATS");
        if let Some(warning) = settings::version_warning(&version) {
            tracing::warn!(address = %address, "{warning}");
        }
        Ok(NatsTransport::new(client)
            .with_events(events)
            .with_core_capacity(options.subscription_capacity))
    }
}

/// `.subscription_capacity(..)` is not async-nats's own setting, which sizes every
/// subscription's buffer (the pull inboxes' too): the transport bounds Core subscriptions itself.
fn check_capacity(options: &ConnectionOptions) -> Result<(), Error> {
    if options.subscription_capacity == Some(0) {
        return Err(Error::new(
            ErrorKind::Config,
            "`.subscription_capacity(0)` leaves no room for a single message; give at least 1",
        ));
    }
    Ok(())
}

/// Why connecting failed, naming the server (never a credential) and the likely fix.
fn connect_error(
    address: &str,
    options: &ConnectionOptions,
    err: async_nats::ConnectError,
) -> Error {
    use async_nats::ConnectErrorKind as Kind;
    // rustls's refusals reach async-nats as I/O errors.
    let shown = err.to_string().to_ascii_lowercase();
    let tls = err.kind() == Kind::Tls
        || ["certificate", "alert", "handshake", "tls"]
            .iter()
            .any(|word| shown.contains(word));
    let fix = match err.kind() {
        _ if tls => "the TLS handshake failed; check that the server's certificate is signed by the CA given with `.root_certificate(..)` and names the host of the URL, and, when the server asks for client certificates, that the one given with `.client_certificate(..)` is signed by a CA the server trusts".to_owned(),
        Kind::AuthorizationViolation | Kind::Authentication => match &options.auth {
            None if options.base.is_some() => "the server refused the connection; check the credentials or auth callback of the options given with `.with_options(..)`, or give them in the URL".to_owned(),
            None => "the server asks for credentials and the app gives none; give them in the URL (`nats://user:password@host`), or with `.user_and_password(..)`, `.token(..)`, `.nkey(..)` or `.credentials_file(..)`".to_owned(),
            Some(auth) => format!(
                "the server refused the {}; check them against the server's configuration",
                auth.what()
            ),
        },
        Kind::TimedOut => "no answer in time; check that nats-server runs there, that the URL is right, or raise `.connection_timeout(..)`".to_owned(),
        Kind::ServerParse => "the URL is not a NATS URL; write it like `nats://host:4222`".to_owned(),
        _ => "check that nats-server runs there and the URL is right".to_owned(),
    };
    Error::new(
        ErrorKind::Connect,
        format!("cannot connect to NATS at {address}; {fix}"),
    )
    .with_source(err)
}

/// The embedded NATS in place of a server (`run --embedded`).
#[cfg(feature = "embedded")]
pub(super) async fn start_embedded(
    embedded: &Embedded,
    endpoints: &[Endpoint],
    declared: &[StreamDeclaration],
) -> Result<Arc<dyn Transport>, Error> {
    let infos: Vec<RegistrationInfo> = endpoints.iter().map(|e| e.info().clone()).collect();
    let nats = crate::embedded::start(embedded, &infos, declared).await?;
    Ok(Arc::new(nats))
}

#[cfg(not(feature = "embedded"))]
pub(super) async fn start_embedded(
    _embedded: &Embedded,
    _endpoints: &[Endpoint],
    _declared: &[StreamDeclaration],
) -> Result<Arc<dyn Transport>, Error> {
    Err(Error::new(
        ErrorKind::Config,
        "this app was built without the embedded NATS: run it with `cargo run --features ruststream-nats/embedded -- run --embedded`, or enable the `embedded` feature of ruststream-nats in Cargo.toml",
    ))
}
