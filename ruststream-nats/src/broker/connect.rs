//! Connecting to NATS: the options the broker was given, and, when it fails, why (naming the
//! server, never a credential) and the likely fix.

use std::sync::Arc;

use ruststream::{Env, Error, ErrorKind};

use super::NatsBroker;
use crate::events::Events;
use crate::options::ConnectionOptions;
use crate::settings;
use crate::transport::nats::NatsTransport;

impl NatsBroker {
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
        // Not async-nats's own setting, which sizes every subscription's buffer (the pull
        // inboxes' too): the transport bounds Core subscriptions itself.
        if options.subscription_capacity == Some(0) {
            return Err(Error::new(
                ErrorKind::Config,
                "`.subscription_capacity(0)` leaves no room for a single message; give at least 1",
            ));
        }
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
