//! `NatsBroker`: configuration recorded at build time; everything connects at startup.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use ruststream::registration::RegistrationInfo;
use ruststream::settle::DeliveryModel;
use ruststream::{Broker, Endpoint, Env, Error, ErrorKind, RunningBroker};
use tokio::sync::watch;

use crate::JetStreamSubject;
use crate::copies::Copies;
use crate::executor::Executor;
use crate::options::{Auth, ConnectionOptions, redact};
use crate::publish::NatsPublisher;
use crate::running::RunningNatsBroker;
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
    url: String,
    options: ConnectionOptions,
    streams: Vec<StreamSpec>,
}

impl fmt::Debug for NatsBroker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NatsBroker")
            .field("url", &redact(&self.url))
            .field("options", &self.options)
            .field("streams", &self.streams)
            .finish()
    }
}

impl NatsBroker {
    /// A broker at `url` (`nats://localhost:4222`; several servers separated by commas).
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            options: ConnectionOptions::default(),
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

    /// Connects to the server.
    async fn connect(&self) -> Result<NatsTransport, Error> {
        let address = redact(&self.url);
        let options = self.options.build(&address).await?;
        let client = options.connect(self.url.as_str()).await.map_err(|err| {
            Error::new(
                ErrorKind::Connect,
                format!(
                    "cannot connect to NATS at {address}; check that nats-server runs there and the URL is right"
                ),
            )
            .with_source(err)
        })?;
        tracing::info!(address = %address, "connected to NATS");
        Ok(NatsTransport::new(client))
    }
}

impl Broker for NatsBroker {
    fn kind(&self) -> &'static str {
        "nats"
    }

    fn address(&self) -> String {
        redact(&self.url)
    }

    fn validate(&self, registrations: &[RegistrationInfo]) -> Result<(), Error> {
        validate(registrations, &self.streams)
    }

    fn start(
        self: Box<Self>,
        endpoints: Vec<Endpoint>,
        env: Env,
    ) -> BoxFuture<'static, Result<Box<dyn RunningBroker>, Error>> {
        Box::pin(async move {
            validate_endpoints(&endpoints)?;
            let transport: Arc<dyn Transport> = match env.get::<TransportOverride>() {
                Some(TransportOverride(transport)) => Arc::clone(transport),
                None => Arc::new(self.connect().await?),
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

            let copies = Arc::new(Copies::new(Arc::clone(&transport)));
            let publisher = Arc::new(NatsPublisher::new(Arc::clone(&transport)));
            let (stop, signal) = watch::channel(None);
            let mut sources = Vec::with_capacity(opened.len());
            for (endpoint, (messages, unsubscribe)) in opened {
                let executor = Arc::new(Executor::new(
                    Arc::clone(&transport),
                    Arc::clone(&copies),
                    endpoint.info(),
                ));
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
                };
                sources.push(tokio::spawn(source.run()));
            }
            let running: Box<dyn RunningBroker> = Box::new(RunningNatsBroker {
                transport,
                copies,
                stop,
                sources,
                drain_timeout: env.drain_timeout(),
            });
            Ok(running)
        })
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
