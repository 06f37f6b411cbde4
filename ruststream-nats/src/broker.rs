//! `NatsBroker`: configuration recorded at build time; everything connects at startup.

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

use crate::JetStreamSubject;
use crate::copies::{Copies, DEFAULT_MAX_DELAYED_COPIES};
use crate::events::Events;
use crate::executor::Executor;
use crate::options::{Auth, ConnectionOptions, split_credentials};
use crate::publish::NatsPublisher;
use crate::running::RunningNatsBroker;
use crate::settings;
use crate::source::{Reopen, Source};
use crate::transport::nats::NatsTransport;
use crate::transport::{
    ConsumerSpec, StreamSpec, Subscription, Transport, TransportErrorKind, TransportOverride,
};
use crate::validate::{validate, validate_endpoints};

/// How many ready messages a batch handler on a descriptor without a batch size takes at once.
const DEFAULT_BATCH: usize = 64;

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
    streams: Vec<StreamSpec>,
}

impl fmt::Debug for NatsBroker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NatsBroker")
            .field("url", &self.url)
            .field("options", &self.options)
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

    /// Refuses to connect without TLS.
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

    /// How many Core messages the client holds for each subscription while its handlers are
    /// busy (async-nats's default: 65 536, whatever their size). Past it, new messages are
    /// dropped and a warning names the registration and how many it lost. Bounds the memory a
    /// fast publisher can take; at least 1.
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

    /// Creates stream `name` storing `subjects` at startup, or updates its subjects when it
    /// exists. Without a declaration the crate declares nothing to the server.
    pub fn declare_stream<I, S>(mut self, name: impl Into<String>, subjects: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.streams.push(StreamSpec {
            name: name.into(),
            subjects: subjects.into_iter().map(Into::into).collect(),
        });
        self
    }

    /// Connects to the server at the URL `env` gives (`--url`, `NATS_URL`), else the one in the
    /// code. async-nats is given the servers without credentials, and the credentials as
    /// options: an outside URL's credentials replace the code's, its servers without any keep
    /// the code's way of authenticating.
    async fn connect(&self, env: &Env, events: Arc<Events>) -> Result<NatsTransport, Error> {
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
        let mut built = options.build(&address).await?;
        match options.subscription_capacity {
            Some(0) => {
                return Err(Error::new(
                    ErrorKind::Config,
                    "`.subscription_capacity(0)` leaves no room for a single message; give at least 1",
                ));
            }
            Some(capacity) => built = built.subscription_capacity(capacity),
            None => {}
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
        Ok(NatsTransport::new(client).with_events(events))
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
            let events = Arc::new(Events::new(self.url.clone()));
            let transport = self.connect(env, events).await?;
            let (address, from) = match settings::given(env) {
                Some((split, from)) => (split.servers.join(","), from),
                None => (self.url.clone(), "the app's code"),
            };
            let version = transport.client().server_info().version;
            let mut done = vec![format!(
                "connected to nats-server {version} at {address} (URL from {from})"
            )];
            done.extend(check_on_server(&transport, registrations, &self.streams).await?);
            Ok(done)
        })
    }

    fn start(
        self: Box<Self>,
        endpoints: Vec<Endpoint>,
        env: Env,
    ) -> BoxFuture<'static, Result<Box<dyn RunningBroker>, Error>> {
        Box::pin(async move {
            validate_endpoints(&endpoints)?;
            let events = Arc::new(
                Events::new(self.url.clone())
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
            let (transport, reports): (Arc<dyn Transport>, bool) =
                match env.get::<TransportOverride>() {
                    Some(TransportOverride(transport)) => (Arc::clone(transport), false),
                    None => match env.get::<Embedded>() {
                        Some(embedded) => (
                            start_embedded(embedded, &endpoints, &self.streams).await?,
                            false,
                        ),
                        None => (
                            Arc::new(self.connect(&env, Arc::clone(&events)).await?),
                            true,
                        ),
                    },
                };
            for spec in &self.streams {
                transport
                    .declare_stream(spec.clone())
                    .await
                    .map_err(|err| {
                        Error::new(
                            ErrorKind::Broker,
                            format!("cannot declare stream `{}`", spec.name),
                        )
                        .with_source(err)
                    })?;
            }
            check_streams(&*transport, &endpoints).await?;
            warn_unstored_dead_letters(&*transport, &endpoints).await;
            let publisher = Arc::new(NatsPublisher::new(Arc::clone(&transport)));
            publisher.learn().await;
            log_outputs(&publisher, &endpoints);

            let mut opened: Vec<(Endpoint, Subscription)> = Vec::new();
            for endpoint in endpoints {
                match open(&*transport, &endpoint).await {
                    Ok(subscription) => opened.push((endpoint, subscription)),
                    Err(err) => {
                        for (_, (_, unsubscribe)) in opened {
                            unsubscribe.stop().await;
                        }
                        return Err(err);
                    }
                }
            }

            let copies = Arc::new(
                Copies::new(Arc::clone(&transport)).with_max_waiting(self.max_delayed_copies),
            );
            let (stop, signal) = watch::channel(None);
            if reports {
                tokio::spawn(Arc::clone(&events).report_until_stopped(signal.clone()));
            }
            let mut sources = Vec::with_capacity(opened.len());
            for (endpoint, (messages, unsubscribe)) in opened {
                let executor = Arc::new(
                    Executor::new(Arc::clone(&transport), Arc::clone(&copies), endpoint.info())
                        .with_payload_values_in_logs(self.log_payload_values),
                );
                let batch = if endpoint.is_batch() {
                    batch_size(&endpoint)
                } else {
                    1
                };
                tracing::info!(
                    registration = endpoint.name(),
                    subject = %endpoint.info().descriptor.subject,
                    model = ?endpoint.info().descriptor.model,
                    "subscribed"
                );
                let reopen: Reopen = {
                    let transport = Arc::clone(&transport);
                    let endpoint = endpoint.clone();
                    Arc::new(move |resume| {
                        let transport = Arc::clone(&transport);
                        let endpoint = endpoint.clone();
                        Box::pin(async move { open_from(&*transport, &endpoint, resume).await })
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
                            Arc::clone(&transport),
                            idempotency,
                            endpoint.name(),
                        )))
                    }
                    None => None,
                };
                let source = Source {
                    endpoint,
                    messages,
                    unsubscribe,
                    executor,
                    publisher: Arc::clone(&publisher),
                    stop: signal.clone(),
                    reopen,
                    batch,
                    progress: Arc::default(),
                    idempotency,
                };
                sources.push(tokio::spawn(source.run()));
            }
            let running: Box<dyn RunningBroker> = Box::new(WithPublisher {
                running: Box::new(RunningNatsBroker {
                    transport,
                    copies,
                    stop,
                    sources,
                    drain_timeout: env.drain_timeout(),
                }),
                publisher,
            });
            Ok(running)
        })
    }
}

/// The embedded NATS in place of a server (`run --embedded`).
#[cfg(feature = "embedded")]
async fn start_embedded(
    embedded: &Embedded,
    endpoints: &[Endpoint],
    declared: &[StreamSpec],
) -> Result<Arc<dyn Transport>, Error> {
    let infos: Vec<RegistrationInfo> = endpoints.iter().map(|e| e.info().clone()).collect();
    let nats = crate::embedded::start(embedded, &infos, declared).await?;
    Ok(Arc::new(nats))
}

#[cfg(not(feature = "embedded"))]
async fn start_embedded(
    _embedded: &Embedded,
    _endpoints: &[Endpoint],
    _declared: &[StreamSpec],
) -> Result<Arc<dyn Transport>, Error> {
    Err(Error::new(
        ErrorKind::Config,
        "this app was built without the embedded NATS; enable the `embedded` feature of ruststream-nats (a default feature) or run without --embedded",
    ))
}

/// `check` against the server, changing nothing: every stream a JetStream registration reads
/// exists or is declared, and every durable consumer that exists agrees with its descriptor.
async fn check_on_server(
    transport: &NatsTransport,
    registrations: &[RegistrationInfo],
    declared: &[StreamSpec],
) -> Result<Vec<String>, Error> {
    let mut done = Vec::new();
    for info in registrations {
        let dead_letter = info
            .policy
            .dead_letter
            .as_deref()
            .map(|dl| ("dead letters", dl, dl.to_owned()));
        // A template (`orders.{tenant}.placed`) is asked as the pattern it fills.
        let outputs = info
            .output_patterns()
            .into_iter()
            .map(|(subject, pattern)| ("outputs", subject, pattern));
        for (what, subject, asked) in dead_letter.into_iter().chain(outputs) {
            done.push(match transport.stream_by_subject(&asked).await {
                Ok(Some(stream)) => format!(
                    "{what} of registration `{}` go to `{subject}`, stored in stream `{stream}`: each publish waits for the stream's acknowledgement before the delivery is settled",
                    info.name
                ),
                Ok(None) => format!(
                    "{what} of registration `{}` go to `{subject}`, which no stream stores: each is a Core publish that only a subscriber listening at that moment gets",
                    info.name
                ),
                Err(err) => format!(
                    "{what} of registration `{}` go to `{subject}`; whether a stream stores it is unknown: {}",
                    info.name, err.message
                ),
            });
        }
        if info.descriptor.model != DeliveryModel::JetStream {
            continue;
        }
        let name = &info.name;
        let Some(stream) = info.descriptor.stream.as_deref() else {
            continue;
        };
        let exists = transport.stream_exists(stream).await.map_err(|err| {
            Error::new(
                ErrorKind::Broker,
                format!(
                    "cannot check stream `{stream}` of registration `{name}` (is JetStream enabled on the server?)"
                ),
            )
            .with_source(err)
        })?;
        if !exists {
            if declared.iter().any(|d| d.name == stream) {
                done.push(format!(
                    "stream `{stream}` of registration `{name}` does not exist yet; the broker declares it at startup"
                ));
                continue;
            }
            let subject = &info.descriptor.subject;
            return Err(Error::new(
                ErrorKind::Broker,
                format!(
                    "registration `{name}` reads stream `{stream}`, which does not exist; create it with `nats stream add {stream} --subjects \"{subject}\"`, or declare it on the broker: `NatsBroker::new(url).declare_stream(\"{stream}\", [\"{subject}\"])`"
                ),
            ));
        }
        done.push(format!("stream `{stream}` of registration `{name}` exists"));
        if let Some(durable) = info.descriptor.consumer.as_deref() {
            let state = transport
                .check_durable(stream, durable, &info.descriptor.subject)
                .await
                .map_err(|err| {
                    Error::new(
                        ErrorKind::Broker,
                        format!(
                            "registration `{name}` cannot read stream `{stream}`: {}",
                            err.message
                        ),
                    )
                })?;
            done.push(format!("registration `{name}`: {state}"));
        }
    }
    Ok(done)
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

/// Says, for every registration, which of its outputs a stream stores (confirmed and
/// deduplicated) and which are Core publishes; and warns when a Core retry copy goes to a
/// subject a stream stores (the stream stores every copy as a new message).
fn log_outputs(publisher: &NatsPublisher, endpoints: &[Endpoint]) {
    for endpoint in endpoints {
        let info = endpoint.info();
        for subject in &info.publishes {
            // A template (`orders.{tenant}.placed`): any value of each placeholder.
            let any: String = subject
                .split('.')
                .map(|t| if t.starts_with('{') { "any" } else { t })
                .collect::<Vec<_>>()
                .join(".");
            match publisher.stream_of(&any) {
                Some(stream) => tracing::info!(
                    registration = %info.name,
                    output = subject,
                    %stream,
                    "output stored by stream `{stream}`: each publish waits for the stream's acknowledgement, and a redelivered input does not store it twice"
                ),
                None => tracing::info!(
                    registration = %info.name,
                    output = subject,
                    "output stored by no stream: a Core publish, not confirmed"
                ),
            }
        }
        if info.descriptor.model == DeliveryModel::Core
            && let Some(target) = info.copy_target()
            && let Some(stream) = publisher.stream_of(target)
        {
            tracing::warn!(
                registration = %info.name,
                retry_to = target,
                %stream,
                "Core retry copies go to `{target}`, which stream `{stream}` stores: the stream keeps every copy as a new message, and every other subscriber sees it; set `.retry_to(\"a.subject.of.its.own\")` to keep copies apart (docs/at-most-once.md)"
            );
        }
    }
}

/// Every stream a JetStream registration reads must exist.
async fn check_streams(transport: &dyn Transport, endpoints: &[Endpoint]) -> Result<(), Error> {
    for endpoint in endpoints {
        let info = endpoint.info();
        if info.descriptor.model != DeliveryModel::JetStream {
            continue;
        }
        let Some(stream) = info.descriptor.stream.as_deref() else {
            continue;
        };
        let exists = transport.stream_exists(stream).await.map_err(|err| {
            Error::new(
                ErrorKind::Broker,
                format!(
                    "cannot check stream `{stream}` of registration `{}` (is JetStream enabled on the server?)",
                    info.name
                ),
            )
            .with_source(err)
        })?;
        if !exists {
            let subject = &info.descriptor.subject;
            return Err(Error::new(
                ErrorKind::Broker,
                format!(
                    "registration `{name}` reads stream `{stream}`, which does not exist; create it with `nats stream add {stream} --subjects \"{subject}\"`, or declare it on the broker: `NatsBroker::new(url).declare_stream(\"{stream}\", [\"{subject}\"])`",
                    name = info.name,
                ),
            ));
        }
    }
    Ok(())
}

/// A JetStream registration whose dead-letter subject no stream stores: the dead letter is a
/// Core publish (confirmed by a flush) that only a subscriber listening at that moment
/// receives, while the original is terminated. Said once at startup, as a warning; the app
/// still starts, since a service listening on that subject is a legitimate design.
async fn warn_unstored_dead_letters(transport: &dyn Transport, endpoints: &[Endpoint]) {
    for endpoint in endpoints {
        let info = endpoint.info();
        if info.descriptor.model != DeliveryModel::JetStream {
            continue;
        }
        let Some(dead_letter) = info.policy.dead_letter.as_deref() else {
            continue;
        };
        match transport.stream_by_subject(dead_letter).await {
            Ok(Some(_)) => {}
            Ok(None) => tracing::warn!(
                registration = %info.name,
                dead_letter,
                "no stream stores the dead-letter subject: a dead letter is a Core publish that only a subscriber listening at that moment receives, and the original is terminated all the same; store it in a stream (`nats stream add DEAD --subjects \"{dead_letter}\"`, or `.declare_stream(\"DEAD\", [\"{dead_letter}\"])` on the broker)"
            ),
            Err(err) => tracing::debug!(
                registration = %info.name,
                dead_letter,
                %err,
                "cannot ask which stream stores the dead-letter subject"
            ),
        }
    }
}

/// Subscribes (Core) or opens the pull consumer (JetStream) of `endpoint`.
async fn open(transport: &dyn Transport, endpoint: &Endpoint) -> Result<Subscription, Error> {
    open_from(transport, endpoint, None).await
}

/// [`open`]; a JetStream consumer that has to be created starts at stream sequence `resume`
/// when one is given (where the registration stood), not where the descriptor says.
async fn open_from(
    transport: &dyn Transport,
    endpoint: &Endpoint,
    resume: Option<u64>,
) -> Result<Subscription, Error> {
    let info = endpoint.info();
    let name = &info.name;
    match info.descriptor.model {
        DeliveryModel::JetStream => {
            let spec = consumer_spec(endpoint);
            let stream = spec.stream.clone();
            let consumed = match resume {
                Some(start_sequence) => transport.resume(spec, start_sequence).await,
                None => transport.consume(spec).await,
            };
            consumed.map_err(|err| {
                let kind = match err.kind {
                    TransportErrorKind::ConsumerConflict => ErrorKind::Broker,
                    TransportErrorKind::Invalid => ErrorKind::Config,
                    _ => ErrorKind::Broker,
                };
                Error::new(
                    kind,
                    format!(
                        "registration `{name}` cannot read stream `{stream}`: {}",
                        err.message
                    ),
                )
            })
        }
        DeliveryModel::Core => {
            let subject = info.descriptor.subject.clone();
            transport
                .subscribe(subject.clone(), info.descriptor.queue_group.clone())
                .await
                .map_err(|err| {
                    Error::new(
                        ErrorKind::Broker,
                        format!(
                            "registration `{name}` cannot subscribe to `{subject}`: {}",
                            err.message
                        ),
                    )
                })
        }
    }
}

/// The consumer a JetStream endpoint reads through: from its `JetStreamSubject`, or from the
/// descriptor's facts with the defaults.
///
/// `batch` is a batch handler's batch size; for a handler of single messages, no more than it
/// handles at once (`concurrency`). The async-nats transport starts its lookahead there and
/// sizes it to the handlers' measured pace (`transport/pull.rs`); the in-process NATS holds
/// that many in the client.
fn consumer_spec(endpoint: &Endpoint) -> ConsumerSpec {
    let mut spec = descriptor_consumer_spec(endpoint);
    if !endpoint.is_batch() {
        spec.batch = spec.batch.min(endpoint.policy().concurrency.get()).max(1);
    }
    spec
}

fn descriptor_consumer_spec(endpoint: &Endpoint) -> ConsumerSpec {
    let info = &endpoint.info().descriptor;
    if let Some(js) = endpoint
        .descriptor()
        .as_any()
        .downcast_ref::<JetStreamSubject>()
    {
        return ConsumerSpec {
            stream: js.stream().to_owned(),
            durable: js.durable_name().map(str::to_owned),
            filter_subject: js.filter().to_owned(),
            ack_wait: js.ack_wait_duration(),
            max_ack_pending: js.max_ack_pending_value(),
            deliver_policy: js.deliver_policy_value(),
            batch: js.batch_size().get(),
            expires: js.expires(),
        };
    }
    ConsumerSpec {
        stream: info.stream.clone().unwrap_or_default(),
        durable: info.consumer.clone(),
        filter_subject: info.subject.clone(),
        ack_wait: info.ack_wait.unwrap_or(crate::descriptor::DEFAULT_ACK_WAIT),
        max_ack_pending: None,
        deliver_policy: crate::DeliverPolicy::All,
        batch: DEFAULT_BATCH,
        expires: Duration::from_secs(30),
    }
}

fn batch_size(endpoint: &Endpoint) -> usize {
    endpoint
        .descriptor()
        .as_any()
        .downcast_ref::<JetStreamSubject>()
        .map_or(DEFAULT_BATCH, |js| js.batch_size().get())
}
