//! The app builder ([`RustStream`]), the registrations of one broker ([`Scope`]), and what
//! `start` and `check` do with them.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;

use super::App;
use super::info::AppInfo;
use super::lifecycle::RunningApp;
use super::service::{ServiceIdentity, service_of};
use crate::broker::{Broker, Env, RunningBroker};
use crate::codec::Format;
use crate::error::{Error, ErrorKind};
use crate::middleware::Middleware;
use crate::registration::{Is, Mount, Registration, RegistrationInfo};
use crate::router::Router;

/// The registrations of one broker, as the `with_broker` closure receives them.
pub struct Scope<S> {
    registrations: Vec<Registration<S>>,
    codec: Option<Format>,
    layers: Vec<Arc<dyn Middleware>>,
}

impl<S> fmt::Debug for Scope<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.registrations).finish()
    }
}

impl<S> Scope<S> {
    /// Mounts a `#[subscriber]` function or a descriptor with a handler; returns the
    /// registration, to chain `.max_attempts(..)`, `.dead_letter(..)`, `.retry_to(..)`.
    // The bounds are written inline: an error quotes this one line. `M: Is<H>` makes `H` the
    // argument's type under another name (see `Is`).
    pub fn include<M: Is<H>, H: Mount<S, Marker>, Marker>(
        &mut self,
        subscriber: M,
    ) -> &mut Registration<S> {
        self.registrations.push(subscriber.itself().mount());
        let last = self.registrations.len() - 1;
        &mut self.registrations[last]
    }

    /// The payload format of this broker's registrations that choose none themselves
    /// (overrides the app's); see `docs/codecs.md`.
    pub fn codec(&mut self, format: Format) -> &mut Self {
        self.codec = Some(format);
        self
    }

    /// Mounts every registration of `router`, under its prefix and inside its layers; see
    /// [`Router`].
    pub fn include_router(&mut self, router: Router<S>) -> &mut Self {
        self.registrations.extend(router.into_routed());
        self
    }

    /// Adds a middleware around every handler of this broker (mounted before or after this
    /// call), inside the app's and outside each registration's; see `docs/middleware.md`.
    pub fn layer(&mut self, middleware: impl Middleware) -> &mut Self {
        self.layers.push(Arc::new(middleware));
        self
    }
}

/// The builder's state before any broker is added: `on_startup` may still change the state type.
#[derive(Debug)]
pub enum Unmounted {}
/// The builder's state once a broker is added.
#[derive(Debug)]
pub enum Mounted {}

type StartupFn<S> = Box<dyn FnOnce() -> BoxFuture<'static, Result<S, Error>> + Send>;
type ShutdownFn<S> = Box<dyn FnOnce(Arc<S>) -> BoxFuture<'static, Result<(), Error>> + Send>;

/// The app builder.
///
/// ```
/// use ruststream::{AppInfo, RustStream};
/// use std::convert::Infallible;
/// ///
/// #[derive(Clone, Default)]
/// struct Clients;
///
/// let app = RustStream::new(AppInfo::new("payments", "0.1.0"))
///     .on_startup(async move |()| Ok::<_, Infallible>(Clients::default()));
/// # let _ = app;
/// ```
pub struct RustStream<S = (), M = Unmounted> {
    info: AppInfo,
    startup: StartupFn<S>,
    shutdown: Vec<ShutdownFn<S>>,
    brokers: Vec<BrokerScope<S>>,
    /// The app's `.drain_timeout(..)`, if it set one.
    drain_timeout: Option<Duration>,
    codec: Option<Format>,
    layers: Vec<Arc<dyn Middleware>>,
    /// Whether the request handlers are advertised as a service (`.micro_service(..)`).
    micro_service: bool,
    _mounted: PhantomData<fn() -> M>,
}

/// One broker with the registrations mounted on it.
type BrokerScope<S> = (Box<dyn Broker>, Vec<Registration<S>>);

impl<S, M> fmt::Debug for RustStream<S, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RustStream")
            .field("info", &self.info)
            .field("brokers", &self.brokers.len())
            .finish_non_exhaustive()
    }
}

impl RustStream<(), Unmounted> {
    /// An app with no state and no broker yet.
    pub fn new(info: AppInfo) -> Self {
        Self {
            info,
            startup: Box::new(|| async { Ok(()) }.boxed()),
            shutdown: Vec::new(),
            brokers: Vec::new(),
            drain_timeout: None,
            codec: None,
            layers: Vec::new(),
            micro_service: true,
            _mounted: PhantomData,
        }
    }
}

mod order {
    /// The builder has no broker yet, so `on_startup` may still change the state type.
    #[diagnostic::on_unimplemented(
        message = "`.on_startup(..)` comes before `.with_broker(..)`",
        label = "called after `.with_broker(..)`",
        note = "move `.on_startup(..)` above `.with_broker(..)`: the handlers mounted there take their `State<T>` from the state it builds"
    )]
    pub trait BeforeBroker {}

    impl BeforeBroker for super::Unmounted {}
}

impl<S: Send + Sync + 'static, M> RustStream<S, M> {
    /// Builds the state at startup from the previous one (`()` at first); a failure stops the
    /// app from starting. Call it before `with_broker`.
    pub fn on_startup<F, Fut, S2, E>(self, hook: F) -> RustStream<S2, Unmounted>
    where
        M: order::BeforeBroker,
        F: FnOnce(S) -> Fut + Send + 'static,
        Fut: Future<Output = Result<S2, E>> + Send + 'static,
        E: std::error::Error + Send + Sync + 'static,
        S2: Send + Sync + 'static,
    {
        let previous = self.startup;
        RustStream {
            info: self.info,
            startup: Box::new(move || {
                async move {
                    let state = previous().await?;
                    hook(state).await.map_err(|e| {
                        Error::new(ErrorKind::Startup, "the startup hook failed").with_source(e)
                    })
                }
                .boxed()
            }),
            shutdown: Vec::new(),
            brokers: Vec::new(),
            drain_timeout: self.drain_timeout,
            codec: self.codec,
            layers: self.layers,
            micro_service: self.micro_service,
            _mounted: PhantomData,
        }
    }
}

impl<S: Send + Sync + 'static, M> RustStream<S, M> {
    /// Adds a broker and mounts handlers on it.
    pub fn with_broker<B: Broker>(
        mut self,
        broker: B,
        mount: impl FnOnce(&mut Scope<S>),
    ) -> RustStream<S, Mounted> {
        let mut scope = Scope {
            registrations: Vec::new(),
            codec: None,
            layers: Vec::new(),
        };
        mount(&mut scope);
        for registration in &mut scope.registrations {
            registration.inherit_codec(scope.codec.or(self.codec));
            registration.broker_layers(&scope.layers);
            for layer in &self.layers {
                registration.app_layer(Arc::clone(layer));
            }
        }
        self.brokers.push((Box::new(broker), scope.registrations));
        RustStream {
            info: self.info,
            startup: self.startup,
            shutdown: self.shutdown,
            brokers: self.brokers,
            drain_timeout: self.drain_timeout,
            codec: self.codec,
            layers: self.layers,
            micro_service: self.micro_service,
            _mounted: PhantomData,
        }
    }

    /// Runs after every broker drained, with the state.
    pub fn on_shutdown<F, Fut, E>(mut self, hook: F) -> Self
    where
        F: FnOnce(Arc<S>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: std::error::Error + Send + Sync + 'static,
    {
        self.shutdown.push(Box::new(move |state| {
            async move {
                hook(state).await.map_err(|e| {
                    Error::new(ErrorKind::Shutdown, "a shutdown hook failed").with_source(e)
                })
            }
            .boxed()
        }));
        self
    }

    /// The payload format of every registration whose broker and mount site choose none,
    /// mounted before or after this call; see `docs/codecs.md`.
    pub fn codec(mut self, format: Format) -> Self {
        self.codec = Some(format);
        for (_, registrations) in &mut self.brokers {
            for registration in registrations {
                registration.inherit_codec(Some(format));
            }
        }
        self
    }

    /// Adds a middleware around every handler of every broker (mounted before or after this
    /// call), outside the brokers' and the registrations'; see `docs/middleware.md`.
    pub fn layer(mut self, middleware: impl Middleware) -> Self {
        let layer: Arc<dyn Middleware> = Arc::new(middleware);
        for (_, registrations) in &mut self.brokers {
            for registration in registrations {
                registration.app_layer(Arc::clone(&layer));
            }
        }
        self.layers.push(layer);
        self
    }

    /// How long a stop waits for handlers in flight before giving up on them (30 s by
    /// default).
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.drain_timeout = Some(timeout);
        self
    }

    /// Whether the request handlers are advertised as a NATS micro service named by the
    /// [`AppInfo`] (`nats micro ls`): `true` by default; see `docs/request-reply.md`.
    pub fn micro_service(mut self, advertise: bool) -> Self {
        self.micro_service = advertise;
        self
    }
}

impl<S: Send + Sync + 'static, M: 'static> App for RustStream<S, M> {
    type State = S;

    fn info(&self) -> &AppInfo {
        &self.info
    }

    fn registrations(&self) -> Vec<RegistrationInfo> {
        self.brokers
            .iter()
            .flat_map(|(_, regs)| regs.iter().map(Registration::info))
            .collect()
    }

    fn brokers(&self) -> Vec<(&'static str, String)> {
        self.brokers
            .iter()
            .map(|(b, _)| (b.kind(), b.address()))
            .collect()
    }

    fn declared_streams(&self) -> Vec<(String, Vec<String>)> {
        self.brokers
            .iter()
            .flat_map(|(b, _)| b.declared_streams())
            .collect()
    }

    fn service_identity(&self) -> Option<ServiceIdentity> {
        self.service().and_then(Result::ok)
    }

    fn broker_security(&self) -> Vec<Vec<crate::asyncapi::SecurityScheme>> {
        self.brokers
            .iter()
            .map(|(b, _)| b.security_schemes())
            .collect()
    }

    // Spelled as the trait spells it: the `Send` bound is the point of the signature.
    #[allow(clippy::manual_async_fn)]
    fn check(self, env: Env) -> impl Future<Output = Result<Vec<String>, Error>> + Send {
        async move {
            self.validate()?;
            let warnings = self.warnings();
            let mut done = vec![format!(
                "{} registrations: names, subjects, streams, dead letters and retry targets are valid",
                self.registrations().len()
            )];
            done.extend(warnings.into_iter().map(|w| format!("warning: {w}")));
            for (broker, regs) in self.brokers {
                let infos: Vec<_> = regs.iter().map(Registration::info).collect();
                done.extend(broker.check(&infos, &env).await?);
            }
            Ok(done)
        }
    }

    // Spelled as the trait spells it: the `Send` bound is the point of the signature.
    #[allow(clippy::manual_async_fn)]
    fn start(self, env: Env) -> impl Future<Output = Result<RunningApp, Error>> + Send {
        async move {
            // The operator's (`run --drain-timeout`, RUSTSTREAM_DRAIN_TIMEOUT) wins, then the
            // environment's (a test's), then the app's; else the default.
            let chosen = env
                .get::<crate::telemetry::DrainTimeout>()
                .map(|operator| operator.0)
                .or(env.chosen_drain_timeout())
                .or(self.drain_timeout);
            let env = match chosen {
                Some(timeout) => env.with_drain_timeout(timeout),
                None => env,
            };
            self.validate()?;
            let env = match self.service() {
                Some(identity) => env.with(identity?),
                None => env,
            };
            for warning in self.warnings() {
                tracing::warn!(app = self.info.name(), "{warning}");
            }
            let state = Arc::new((self.startup)().await?);
            let mut started: Vec<Box<dyn RunningBroker>> = Vec::new();
            for (broker, regs) in self.brokers {
                let endpoints = regs
                    .into_iter()
                    .map(|r| r.bind(Arc::clone(&state), env.observer().cloned()))
                    .collect::<Result<Vec<_>, _>>();
                let started_broker = match endpoints {
                    Ok(endpoints) => broker.start(endpoints, env.clone()).await,
                    Err(err) => Err(err),
                };
                match started_broker {
                    Ok(running) => started.push(running),
                    Err(err) => {
                        for running in started {
                            let _ = running.stop().await;
                        }
                        return Err(err);
                    }
                }
            }
            tracing::info!(
                app = self.info.name(),
                version = self.info.version(),
                "started"
            );
            let hooks = self.shutdown;
            let health = env.get::<crate::telemetry::Health>().cloned();
            if let Some(health) = &health {
                health.set_started();
            }
            Ok(RunningApp {
                info: self.info,
                brokers: started,
                health,
                on_shutdown: Box::new(move || {
                    async move {
                        for hook in hooks {
                            hook(Arc::clone(&state)).await?;
                        }
                        Ok(())
                    }
                    .boxed()
                }),
            })
        }
    }
}

impl<S: Send + Sync + 'static, M: 'static> RustStream<S, M> {
    /// The startup checks that need no server: `start` and `check` run them.
    fn validate(&self) -> Result<(), Error> {
        check_names(&self.registrations())?;
        if let Some(Err(err)) = self.service() {
            return Err(err);
        }
        for (_, regs) in &self.brokers {
            regs.iter().try_for_each(Registration::check_routed)?;
        }
        for (broker, regs) in &self.brokers {
            let infos: Vec<_> = regs.iter().map(Registration::info).collect();
            broker.validate(&infos)?;
        }
        Ok(())
    }

    /// The service the request handlers are advertised as (`service_of`).
    fn service(&self) -> Option<Result<ServiceIdentity, Error>> {
        service_of(&self.info, self.micro_service, &self.registrations())
    }

    /// What the brokers warn about: registrations they run but that may lose or loop messages.
    fn warnings(&self) -> Vec<String> {
        self.brokers
            .iter()
            .flat_map(|(broker, regs)| {
                let infos: Vec<_> = regs.iter().map(Registration::info).collect();
                broker.warnings(&infos)
            })
            .collect()
    }
}

/// Two registrations with one name would make logs and test assertions ambiguous.
fn check_names(registrations: &[RegistrationInfo]) -> Result<(), Error> {
    let mut seen = std::collections::HashSet::new();
    for r in registrations {
        if !seen.insert(r.name.as_str()) {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "two registrations are named `{}`; give one another name with `.name(\"...\")` at its mount site",
                    r.name
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
