//! `NatsBroker`: configuration recorded at build time; everything connects at startup.
//!
//! This file holds the broker, its builder methods and its `Broker` methods (validate, check,
//! start). `connect.rs` makes the connection (and says why one failed), `checks.rs` holds the
//! startup checks and notes made against the server, `opening.rs` opens a registration's
//! subscription or pull consumer, `security.rs` says how it authenticates (for AsyncAPI).

mod checks;
mod connect;
mod opening;
mod security;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use ruststream::broker::Embedded;
use ruststream::registration::RegistrationInfo;
use ruststream::settle::DeliveryModel;
use ruststream::{Broker, Endpoint, Env, Error, ErrorKind, RunningBroker};
use tokio::sync::watch;

use self::checks::{
    check_on_server, check_streams, log_outputs, warn_stream_changes, warn_unstored_dead_letters,
};
use self::connect::start_embedded;
use self::opening::{batch_size, open};
use crate::copies::{Copies, DEFAULT_MAX_DELAYED_COPIES};
use crate::events::{Connected, Events};
use crate::executor::Executor;
use crate::micro;
use crate::options::{Auth, ConnectionOptions, split_credentials};
use crate::publish::NatsPublisher;
use crate::running::RunningNatsBroker;
use crate::source::{Handling, Progress, Reopen, Source};
use crate::supervise::{Kind, Supervisor};
use crate::transport::{StreamDeclaration, StreamSpec, Subscription, Transport, TransportOverride};
use crate::validate::validate;

/// A NATS server (Core and JetStream over one connection).
///
/// `NatsBroker::new(url)` only records the configuration; the app connects when it starts and
/// refuses to start when the server cannot be reached, a stream is missing or a durable
/// consumer conflicts with its descriptor.
///
/// ```
/// use ruststream::Broker;
/// use ruststream_nats::NatsBroker;
///
/// let broker = NatsBroker::new("nats://alice:s3cret@localhost:4222")
///     .declare_stream("PAYMENTS", ["payments.>"]);
/// // Never printed: the credentials.
/// assert_eq!(broker.address(), "nats://localhost:4222");
/// assert!(!format!("{broker:?}").contains("s3cret"));
/// ```
#[derive(Clone)]
pub struct NatsBroker {
    /// Whether undecodable payloads are logged with the decoder's whole message.
    log_payload_values: bool,
    /// The most `retry_after` Core copies waiting at once.
    max_delayed_copies: usize,
    /// The URL without its credentials (they are in `options.auth`).
    url: String,
    /// The servers of the URL, without credentials: what async-nats is given.
    servers: Vec<String>,
    /// Why the URL's credentials cannot be used.
    url_problem: Option<String>,
    options: ConnectionOptions,
    /// A client the app connected itself (`from_client`), used instead of connecting.
    client: Option<async_nats::Client>,
    streams: Vec<StreamDeclaration>,
}

impl fmt::Debug for NatsBroker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NatsBroker")
            .field("url", &self.url)
            .field("options", &self.options)
            .field(
                "client",
                &self.client.as_ref().map(|_| "connected by the app"),
            )
            .field("streams", &self.streams)
            .field("max_delayed_copies", &self.max_delayed_copies)
            .field("log_payload_values", &self.log_payload_values)
            .finish()
    }
}

impl NatsBroker {
    /// A broker at `url` (`nats://localhost:4222`; several servers separated by commas).
    ///
    /// Credentials in the URL authenticate: `nats://user:password@host:4222` (a user and a
    /// password) or `nats://token@host:4222` (a token), percent-encoded or not (only a `,` in a
    /// password must be written `%2C`). They are taken out of the URL at once: neither logs,
    /// `describe`, errors nor async-nats ever see them. A later `.user_and_password(..)`,
    /// `.token(..)`, `.nkey(..)` or `.credentials_file(..)` replaces them.
    pub fn new(url: impl Into<String>) -> Self {
        let url: String = url.into();
        let split = split_credentials(&url);
        drop(url);
        let options = ConnectionOptions {
            auth: split.auth,
            ..ConnectionOptions::default()
        };
        Self {
            log_payload_values: false,
            max_delayed_copies: DEFAULT_MAX_DELAYED_COPIES,
            url: split.servers.join(","),
            servers: split.servers,
            url_problem: split.problem,
            options,
            client: None,
            streams: Vec::new(),
        }
    }

    /// Authenticates with a `.creds` file (a user JWT and its NKey seed), read at startup.
    pub fn credentials_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.options.auth = Some(Auth::CredentialsFile(path.into()));
        self
    }

    /// Authenticates with a user and a password.
    pub fn user_and_password(
        mut self,
        user: impl Into<String>,
        password: impl Into<String>,
    ) -> Self {
        self.options.auth = Some(Auth::UserPassword {
            user: user.into(),
            password: password.into(),
        });
        self
    }

    /// Authenticates with a token.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.options.auth = Some(Auth::Token(token.into()));
        self
    }

    /// Authenticates with an NKey seed.
    pub fn nkey(mut self, seed: impl Into<String>) -> Self {
        self.options.auth = Some(Auth::NKey(seed.into()));
        self
    }

    /// Trusts the certificate authority in this PEM file for the server's TLS certificate.
    pub fn root_certificate(mut self, path: impl Into<PathBuf>) -> Self {
        self.options.root_certificates.push(path.into());
        self
    }

    /// Presents this client certificate and key (PEM files) to the server (mutual TLS).
    pub fn client_certificate(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.options.client_certificate = Some((cert.into(), key.into()));
        self
    }

    /// Refuses to connect without TLS. A `tls://` URL sets it: every server is then reached
    /// over TLS, those the cluster announces (plain `host:port`) too.
    pub fn require_tls(mut self, required: bool) -> Self {
        self.options.require_tls = required;
        self
    }

    /// The connection's name, as the server's monitoring shows it.
    pub fn connection_name(mut self, name: impl Into<String>) -> Self {
        self.options.name = Some(name.into());
        self
    }

    /// How long connecting at startup may take before the app refuses to start (5 s by default).
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.options.connection_timeout = Some(timeout);
        self
    }

    /// How many Core messages the client holds for each Core subscription while its handlers
    /// are busy (by default 262 144, whatever their size: four times async-nats's own default,
    /// so that a burst the server delivers is not dropped by the client). Past it, new messages are
    /// dropped, each counted (`ruststream_slow_consumer_dropped_total`), and a warning names the
    /// registration and how many it lost. Bounds the memory a fast publisher can take; at
    /// least 1. JetStream pulls are not bounded by it: their lookahead bounds them.
    pub fn subscription_capacity(mut self, capacity: usize) -> Self {
        self.options.subscription_capacity = Some(capacity);
        self
    }

    /// How many `retry_after` copies of Core messages may wait on their timers at once
    /// (10 000 by default). Each holds its message in memory; past the bound a copy is refused
    /// and an error logged: the message is lost, as Core NATS is at most once.
    pub fn max_delayed_copies(mut self, max: usize) -> Self {
        self.max_delayed_copies = max;
        self
    }

    /// Whether the warning about a payload that does not decode quotes the decoder's whole
    /// message, which may quote values from the payload (a card number, an address): `false` by
    /// default, when it says only the type, the kind of error and where it happened
    /// (`invalid type (at line 1 column 24)`). Turn it on where payloads are not sensitive, to
    /// see the value at fault.
    pub fn log_payload_values(mut self, quote: bool) -> Self {
        self.log_payload_values = quote;
        self
    }

    /// Creates stream `name` storing `subjects` at startup, or adds the subjects it lacks when
    /// it exists (never removing one, with a warning naming what it added). Without a
    /// declaration the crate declares nothing to the server.
    pub fn declare_stream<I, S>(self, name: impl Into<String>, subjects: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.declare_stream_with(StreamDeclaration::new(name, subjects))
    }

    /// [`declare_stream`](Self::declare_stream) with replicas and limits:
    /// `.declare_stream_with(StreamDeclaration::new("PAYMENTS", ["payments.>"]).replicas(3))`.
    /// An existing stream gets the subjects it lacks and each limit below the declared one
    /// raised; a limit the declaration would tighten is left as it is (tightening could
    /// discard stored messages), and a warning names what changed and what did not.
    pub fn declare_stream_with(mut self, declaration: StreamDeclaration) -> Self {
        self.streams.push(declaration);
        self
    }

    /// The declared streams' names and subjects.
    fn stream_specs(&self) -> Vec<StreamSpec> {
        self.streams.iter().map(StreamDeclaration::spec).collect()
    }
}

impl Broker for NatsBroker {
    fn kind(&self) -> &'static str {
        "nats"
    }

    fn address(&self) -> String {
        self.url.clone()
    }

    fn validate(&self, registrations: &[RegistrationInfo]) -> Result<(), Error> {
        validate(registrations, &self.streams)
    }

    fn warnings(&self, registrations: &[RegistrationInfo]) -> Vec<String> {
        crate::validate::warnings(registrations)
    }

    fn security_schemes(&self) -> Vec<ruststream::asyncapi::SecurityScheme> {
        self.described_security()
    }

    fn declared_streams(&self) -> Vec<(String, Vec<String>)> {
        self.streams
            .iter()
            .map(|s| (s.name.clone(), s.subjects.clone()))
            .collect()
    }

    fn check<'a>(
        &'a self,
        registrations: &'a [RegistrationInfo],
        env: &'a Env,
    ) -> BoxFuture<'a, Result<Vec<String>, Error>> {
        Box::pin(async move {
            let (address, from) = self.address(env);
            let events = Arc::new(Events::new(address.clone()));
            let transport = self.connect(env, events).await?;
            let version = transport.client().server_info().version;
            let mut done = vec![format!(
                "connected to nats-server {version} at {address} (URL from {from})"
            )];
            done.extend(check_on_server(&transport, registrations, &self.stream_specs()).await?);
            Ok(done)
        })
    }

    fn start(
        self: Box<Self>,
        endpoints: Vec<Endpoint>,
        env: Env,
    ) -> BoxFuture<'static, Result<Box<dyn RunningBroker>, Error>> {
        Box::pin(async move {
            // The address the app connects to (`--url`, `NATS_URL` or the code's), without
            // credentials: what the `ruststream_connected` gauge and the connection logs name.
            let events = Arc::new(
                Events::new(self.address(&env).0)
                    .with_health(env.get::<ruststream::telemetry::Health>().cloned()),
            );
            for endpoint in &endpoints {
                let descriptor = &endpoint.info().descriptor;
                if descriptor.model == DeliveryModel::Core {
                    events.name_registration(
                        endpoint.name(),
                        &descriptor.subject,
                        descriptor.queue_group.as_deref(),
                    );
                }
            }
            // Only a connection of its own reports events (an override, the in-process NATS
            // for one, has none).
            // With it, what the client says of its connection now: readiness does not hang on
            // every event reaching the reporter (async-nats may drop one under a burst).
            let (transport, connected): (Arc<dyn Transport>, Option<Connected>) =
                match env.get::<TransportOverride>() {
                    Some(TransportOverride(transport)) => (Arc::clone(transport), None),
                    None => match env.get::<Embedded>() {
                        Some(embedded) => (
                            start_embedded(embedded, &endpoints, &self.streams).await?,
                            None,
                        ),
                        None => {
                            let transport = self.connect(&env, Arc::clone(&events)).await?;
                            let client = transport.client().clone();
                            let connected: Connected = Arc::new(move || {
                                client.connection_state()
                                    == async_nats::connection::State::Connected
                            });
                            (Arc::new(transport), Some(connected))
                        }
                    },
                };
            for declaration in &self.streams {
                let changes = transport
                    .declare_stream_with(declaration.clone())
                    .await
                    // The transport's error names the stream and what went wrong.
                    .map_err(|err| {
                        Error::new(ErrorKind::Broker, "cannot start the broker").with_source(err)
                    })?;
                warn_stream_changes(&declaration.name, &changes);
            }
            check_streams(&*transport, &endpoints).await?;
            warn_unstored_dead_letters(&*transport, &endpoints).await;
            let publisher = Arc::new(NatsPublisher::new(Arc::clone(&transport)));
            // Subscribed to the stream advisories before the first look at the list, so that
            // a stream created in between is learned too.
            let stream_watch = publisher.watch_streams().await;
            publisher.learn().await;
            log_outputs(&publisher, &endpoints);

            let mut opened: Vec<(Endpoint, Subscription, Arc<Progress>)> = Vec::new();
            for endpoint in endpoints {
                let progress = Arc::new(Progress::default());
                match open(&*transport, &endpoint, &progress).await {
                    Ok(subscription) => opened.push((endpoint, subscription, progress)),
                    Err(err) => {
                        for (_, (_, unsubscribe), _) in opened {
                            unsubscribe.stop().await;
                        }
                        return Err(err);
                    }
                }
            }

            let endpoints = opened.iter().map(|(endpoint, _, _)| endpoint);
            let service = match micro::service(&env, endpoints, self.log_payload_values) {
                Some(service) => micro::open(service, &transport).await.map(Some),
                None => Ok(None),
            };
            let service = match service {
                Ok(service) => service,
                Err(err) => {
                    for (_, (_, unsubscribe), _) in opened {
                        unsubscribe.stop().await;
                    }
                    return Err(err);
                }
            };
            let copies =
                Arc::new(Copies::new(transport.clone()).with_max_waiting(self.max_delayed_copies));
            let (stop, signal) = watch::channel(None);
            let supervisor = Supervisor::new(
                env.get::<ruststream::telemetry::Health>().cloned(),
                signal.clone(),
            );
            let mut background = Vec::with_capacity(3);
            if let Some(connected) = connected {
                let reporting = Arc::clone(&events).report_until_stopped(signal.clone(), connected);
                background.push(supervisor.spawn(Kind::Background, "event reporter", reporting));
            }
            let watching = stream_watch.run(signal.clone());
            background.push(supervisor.spawn(Kind::Background, "stream watcher", watching));
            let mut sources = Vec::with_capacity(opened.len());
            for (endpoint, (messages, unsubscribe), progress) in opened {
                let executor = Arc::new(
                    Executor::new(Arc::clone(&transport), Arc::clone(&copies), endpoint.info())
                        .with_payload_values_in_logs(self.log_payload_values)
                        .with_totals(service.as_ref().and_then(|s| s.totals(endpoint.name()))),
                );
                let batch = if endpoint.is_batch() {
                    batch_size(&endpoint)
                } else {
                    1
                };
                let linger = endpoint.info().descriptor.batch_max_wait;
                tracing::info!(
                    registration = endpoint.name(),
                    subject = %endpoint.info().descriptor.subject,
                    model = ?endpoint.info().descriptor.model,
                    "subscribed"
                );
                let reopen: Reopen = {
                    let transport = Arc::clone(&transport);
                    let endpoint = endpoint.clone();
                    let progress = Arc::clone(&progress);
                    Arc::new(move || {
                        let transport = Arc::clone(&transport);
                        let endpoint = endpoint.clone();
                        let progress = Arc::clone(&progress);
                        Box::pin(async move { open(&*transport, &endpoint, &progress).await })
                    })
                };
                let idempotency = match &endpoint.policy().idempotency {
                    Some(idempotency) => {
                        transport
                            .kv_bucket(idempotency.bucket.clone(), idempotency.window)
                            .await
                            .map_err(|err| {
                                Error::new(
                                    ErrorKind::Broker,
                                    format!(
                                        "cannot open the idempotency bucket `{}` of registration `{}`",
                                        idempotency.bucket,
                                        endpoint.name()
                                    ),
                                )
                                .with_source(err)
                            })?;
                        Some(Arc::new(crate::idempotency::Guard::new(
                            transport.clone(),
                            idempotency,
                            endpoint.name(),
                        )))
                    }
                    None => None,
                };
                let handling =
                    Handling::new(&endpoint, &executor, &publisher, &progress, idempotency);
                let source = Source {
                    handling,
                    endpoint,
                    messages,
                    unsubscribe,
                    stop: signal.clone(),
                    reopen,
                    batch,
                    linger,
                    ahead: None,
                    spent: None,
                    looked: None,
                    supervisor: supervisor.clone(),
                };
                let name = source.endpoint.name().to_owned();
                sources.push(supervisor.spawn(Kind::Registration, &name, source.run()));
            }
            if let Some(service) = service {
                let answering = service.run(signal.clone());
                background.push(supervisor.spawn(Kind::Background, "micro service", answering));
            }
            let running: Box<dyn RunningBroker> = Box::new(WithPublisher {
                running: Box::new(RunningNatsBroker {
                    transport,
                    copies,
                    stop,
                    sources,
                    background,
                    supervisor,
                    drain_timeout: env.drain_timeout(),
                }),
                publisher,
            });
            Ok(running)
        })
    }
}

/// A running broker with the publisher `ruststream_nats::NatsClient` reaches it through.
struct WithPublisher {
    running: Box<dyn RunningBroker>,
    publisher: Arc<NatsPublisher>,
}

impl RunningBroker for WithPublisher {
    fn stop(self: Box<Self>) -> BoxFuture<'static, Result<(), Error>> {
        self.running.stop()
    }

    fn publisher(&self) -> Option<Arc<dyn ruststream::Publish>> {
        Some(Arc::clone(&self.publisher) as Arc<dyn ruststream::Publish>)
    }
}
