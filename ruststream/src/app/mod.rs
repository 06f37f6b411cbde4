//! The app: its builder, its lifecycle, and the trait the generated `main` runs.

pub mod cli;

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;

use crate::broker::{Broker, Env, RunningBroker};
use crate::delivery::Delivery;
use crate::error::{Error, ErrorKind};
use crate::registration::{Handled, Mount, Registration, RegistrationInfo};
use crate::settle::Decision;

/// The app's name and version, as `describe` and logs show them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppInfo {
    name: String,
    version: String,
}

impl AppInfo {
    /// `AppInfo::new("payments", "0.1.0")`.
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            version: version.into(),
        }
    }

    /// The app's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The app's version.
    pub fn version(&self) -> &str {
        &self.version
    }
}

/// Told of every delivery a handler took, with what it said and what was decided. `TestApp`
/// uses it to record outcomes.
pub trait Observer: Send + Sync + 'static {
    /// One delivery was handled.
    fn handled(&self, handling: &Handling<'_>);
}

/// One handled delivery, as an [`Observer`] sees it.
#[derive(Debug)]
#[non_exhaustive]
pub struct Handling<'a> {
    /// The registration's name.
    pub registration: &'a str,
    /// The delivery, as it arrived.
    pub delivery: &'a Delivery,
    /// What the handler said.
    pub handled: &'a Handled,
    /// What the runtime decided to do.
    pub decision: &'a Decision,
}

/// Anything an app builder produces: run it until a signal, or until a future resolves.
///
/// ```no_run
/// # async fn demo(app: impl ruststream::App) -> Result<(), ruststream::Error> {
/// use ruststream::App;
/// let stop = async { tokio::time::sleep(std::time::Duration::from_secs(5)).await };
/// tokio::spawn(app.run_until(stop)).await.expect("app task")?;
/// # Ok(()) }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an app",
    label = "the app function returns this",
    note = "build the app with `RustStream::new(AppInfo::new(name, version)).with_broker(broker, |b| {{ .. }})` and return `impl App<State = MyState>`"
)]
pub trait App: Send + 'static {
    /// The state handlers read through `State<T>`.
    type State: Send + Sync + 'static;

    /// The app's name and version.
    fn info(&self) -> &AppInfo;

    /// Every registration, for `describe`.
    fn registrations(&self) -> Vec<RegistrationInfo>;

    /// The brokers, as `(kind, address)`, for `describe`.
    fn brokers(&self) -> Vec<(&'static str, String)>;

    /// The streams the brokers declare at startup, as `(name, subjects)`, for `describe`.
    fn declared_streams(&self) -> Vec<(String, Vec<String>)> {
        Vec::new()
    }

    /// Every startup check without starting anything (the `check` subcommand): the checks that
    /// need no server first, then those against each broker (streams, durable consumers). One
    /// line per check done; the first failure is the error `start` would return.
    fn check(self, env: Env) -> impl Future<Output = Result<Vec<String>, Error>> + Send
    where
        Self: Sized,
    {
        let _ = env;
        async { Ok(Vec::new()) }
    }

    /// Starts the app in `env`: checks registrations, runs the startup hooks, connects and
    /// opens every registration.
    fn start(self, env: Env) -> impl Future<Output = Result<RunningApp, Error>> + Send;

    /// Runs until SIGINT or SIGTERM, then drains.
    fn run(self) -> impl Future<Output = Result<(), Error>> + Send
    where
        Self: Sized,
    {
        self.run_until(shutdown_signal())
    }

    /// Runs until `stop` resolves, then drains.
    fn run_until(
        self,
        stop: impl Future<Output = ()> + Send,
    ) -> impl Future<Output = Result<(), Error>> + Send
    where
        Self: Sized,
    {
        async move {
            let running = self.start(Env::new()).await?;
            stop.await;
            running.stop().await
        }
    }
}

/// Resolves on SIGINT or SIGTERM (or when signals cannot be watched, never).
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(err) = tokio::signal::ctrl_c().await {
            tracing::error!(%err, "cannot watch for ctrl-c");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(err) => {
                tracing::error!(%err, "cannot watch for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::info!("SIGINT: draining"),
        () = term => tracing::info!("SIGTERM: draining"),
    }
}

/// A started app; [`RunningApp::stop`] drains it.
pub struct RunningApp {
    info: AppInfo,
    brokers: Vec<Box<dyn RunningBroker>>,
    on_shutdown: Box<dyn FnOnce() -> BoxFuture<'static, Result<(), Error>> + Send>,
    /// Told of the drain (`/readyz`), when the app started with one.
    health: Option<crate::telemetry::Health>,
}

impl fmt::Debug for RunningApp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunningApp")
            .field("info", &self.info)
            .field("brokers", &self.brokers.len())
            .finish_non_exhaustive()
    }
}

impl RunningApp {
    /// What publishes on the app's brokers from outside a handler: the first broker's
    /// publisher, if it offers one. A broker crate wraps it in its own API
    /// (`ruststream_nats::NatsClient::of(&running)`).
    pub fn publisher(&self) -> Option<Arc<dyn crate::Publish>> {
        self.brokers.iter().find_map(|b| b.publisher())
    }

    /// Drains every broker (stop pulling, finish handlers in flight, settle, flush), then runs
    /// the shutdown hooks.
    pub async fn stop(mut self) -> Result<(), Error> {
        let mut first_error = None;
        if let Some(health) = &self.health {
            health.set_draining();
        }
        let brokers = std::mem::take(&mut self.brokers);
        let on_shutdown = std::mem::replace(
            &mut self.on_shutdown,
            Box::new(|| Box::pin(std::future::ready(Ok(())))),
        );
        for broker in brokers {
            if let Err(err) = broker.stop().await {
                tracing::error!(%err, "a broker did not stop cleanly");
                first_error.get_or_insert(err);
            }
        }
        if let Err(err) = on_shutdown().await {
            tracing::error!(%err, "a shutdown hook failed");
            first_error.get_or_insert(err);
        }
        tracing::info!(app = self.info.name(), "stopped");
        first_error.map_or(Ok(()), Err)
    }
}

/// Dropped without [`stop`](RunningApp::stop) (a `select!` that cancelled `run_until`, a
/// panic): the brokers are dropped, and with them their sources, which stop at once without a
/// drain. Handlers in flight are abandoned, messages pulled and not handled are not released:
/// JetStream delivers them again after `ack_wait`, Core ones are lost. A warning says so.
impl Drop for RunningApp {
    fn drop(&mut self) {
        if !self.brokers.is_empty() {
            tracing::warn!(
                app = self.info.name(),
                "the running app was dropped without stop(): its brokers stop at once without draining (handlers in flight are abandoned; JetStream delivers their messages again after ack_wait); call `RunningApp::stop` to drain"
            );
        }
    }
}

/// The registrations of one broker, as the `with_broker` closure receives them.
pub struct Scope<S> {
    registrations: Vec<Registration<S>>,
    codec: Option<crate::codec::Format>,
    layers: Vec<Arc<dyn crate::middleware::Middleware>>,
}

impl<S> fmt::Debug for Scope<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.registrations).finish()
    }
}

impl<S> Scope<S> {
    /// Mounts a `#[subscriber]` function or a descriptor with a handler; returns the
    /// registration, to chain `.max_attempts(..)`, `.dead_letter(..)`, `.retry_to(..)`.
    // The bound is written inline: an error quotes this one line.
    pub fn include<M: Mount<S, Marker>, Marker>(&mut self, subscriber: M) -> &mut Registration<S> {
        self.registrations.push(subscriber.mount());
        let last = self.registrations.len() - 1;
        &mut self.registrations[last]
    }

    /// The payload format of this broker's registrations that choose none themselves
    /// (overrides the app's); see `docs/codecs.md`.
    pub fn codec(&mut self, format: crate::codec::Format) -> &mut Self {
        self.codec = Some(format);
        self
    }

    /// Mounts every registration of `router`, under its prefix and inside its layers; see
    /// [`Router`](crate::Router).
    pub fn include_router(&mut self, router: crate::Router<S>) -> &mut Self {
        self.registrations.extend(router.into_routed());
        self
    }

    /// Adds a middleware around every handler of this broker (mounted before or after this
    /// call), inside the app's and outside each registration's; see `docs/middleware.md`.
    pub fn layer(&mut self, middleware: impl crate::middleware::Middleware) -> &mut Self {
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
    drain_timeout: Duration,
    codec: Option<crate::codec::Format>,
    layers: Vec<Arc<dyn crate::middleware::Middleware>>,
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
            drain_timeout: Duration::from_secs(30),
            codec: None,
            layers: Vec::new(),
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
    pub fn codec(mut self, format: crate::codec::Format) -> Self {
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
    pub fn layer(mut self, middleware: impl crate::middleware::Middleware) -> Self {
        let layer: Arc<dyn crate::middleware::Middleware> = Arc::new(middleware);
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
        self.drain_timeout = timeout;
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
            let env = match env.get::<crate::telemetry::DrainTimeout>() {
                // The operator's (`run --drain-timeout`, RUSTSTREAM_DRAIN_TIMEOUT) wins.
                Some(crate::telemetry::DrainTimeout(timeout)) => {
                    let timeout = *timeout;
                    env.with_drain_timeout(timeout)
                }
                None if env.drain_timeout() == Env::default().drain_timeout() => {
                    env.with_drain_timeout(self.drain_timeout)
                }
                None => env,
            };
            self.validate()?;
            for warning in self.warnings() {
                tracing::warn!(app = self.info.name(), "{warning}");
            }
            let state = Arc::new((self.startup)().await?);
            let mut started: Vec<Box<dyn RunningBroker>> = Vec::new();
            for (broker, regs) in self.brokers {
                let endpoints = regs
                    .into_iter()
                    .map(|r| r.bind(Arc::clone(&state), env.observer().cloned()))
                    .collect();
                match broker.start(endpoints, env.clone()).await {
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
        for (_, regs) in &self.brokers {
            regs.iter().try_for_each(Registration::check_routed)?;
        }
        for (broker, regs) in &self.brokers {
            let infos: Vec<_> = regs.iter().map(Registration::info).collect();
            broker.validate(&infos)?;
        }
        Ok(())
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
