//! The app: its builder, its lifecycle, and the trait the generated `main` runs.
//!
//! `info.rs` ([`AppInfo`]) ← `lifecycle.rs` ([`RunningApp`]) ← this file ([`App`]) ←
//! `builder.rs` ([`RustStream`], [`Scope`]) and `cli.rs` (the generated `main`), which prints
//! `describe.rs`'s table.

mod builder;
pub mod cli;
mod describe;
mod info;
mod lifecycle;
mod log_fields;
mod log_filter;
mod otlp;
mod print_handled;
mod service;
mod subscriber;

use std::future::Future;

use crate::asyncapi::{DocumentInput, DocumentSource};
use crate::broker::Env;
use crate::error::Error;
use crate::registration::RegistrationInfo;

pub use self::builder::{Mounted, RustStream, Scope, Unmounted};
pub use self::info::AppInfo;
pub use self::lifecycle::{RunningApp, shutdown_signal};
pub use self::service::{SERVICE_SUBJECT_PREFIX, ServiceIdentity, is_endpoint, service_name};
pub use crate::observer::{Handling, Observer};

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

    /// How each broker's client authenticates, in the order of [`brokers`](Self::brokers), for
    /// the AsyncAPI document's security schemes.
    fn broker_security(&self) -> Vec<Vec<crate::asyncapi::SecurityScheme>> {
        Vec::new()
    }

    /// The streams the brokers declare at startup, as `(name, subjects)`, for `describe`.
    fn declared_streams(&self) -> Vec<(String, Vec<String>)> {
        Vec::new()
    }

    /// The service the app's request handlers are advertised as, when it has some and did not
    /// turn it off (`.micro_service(false)`), for `describe`. `None` by default.
    fn service_identity(&self) -> Option<ServiceIdentity> {
        None
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

/// The AsyncAPI document of any app is built from what the app says of itself.
impl<A: App> DocumentSource for A {
    fn document_input(&self) -> DocumentInput {
        DocumentInput {
            name: self.info().name().to_owned(),
            version: self.info().version().to_owned(),
            metadata: self.info().metadata().clone(),
            brokers: self.brokers(),
            security: self.broker_security(),
            streams: self.declared_streams(),
            registrations: self.registrations(),
        }
    }
}
