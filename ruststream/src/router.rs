//! Routers: registrations grouped under a subject prefix, with shared middleware.

use std::fmt;
use std::sync::Arc;

use crate::middleware::Middleware;
use crate::registration::{Is, Mount, Registration};

/// Registrations grouped under a subject prefix, with middleware shared by all of them, mounted
/// on a broker with `b.include_router(router)` (or into another router).
///
/// A registration of `"invoices.issued"` in `Router::new("billing")` reads
/// `billing.invoices.issued`; `describe` shows the full subject. The router's layers run inside
/// the app's and the broker's, outside the registration's own. Dead-letter and `retry_to`
/// subjects, streams and consumer names are not prefixed.
///
/// ```
/// use ruststream::{AppInfo, HandlerOutcome, Router, RustStream, subscriber};
/// # struct Nowhere;
/// # impl ruststream::Broker for Nowhere {
/// #     fn kind(&self) -> &'static str { "none" }
/// #     fn address(&self) -> String { String::new() }
/// #     fn validate(&self, _: &[ruststream::registration::RegistrationInfo]) -> Result<(), ruststream::Error> { Ok(()) }
/// #     fn start(self: Box<Self>, _: Vec<ruststream::Endpoint>, _: ruststream::Env)
/// #         -> futures::future::BoxFuture<'static, Result<Box<dyn ruststream::RunningBroker>, ruststream::Error>> {
/// #         Box::pin(async { Err(ruststream::Error::new(ruststream::ErrorKind::Config, "nowhere")) })
/// #     }
/// # }
///
/// #[derive(serde::Deserialize)]
/// struct Invoice {
///     id: u64,
/// }
///
/// #[subscriber("invoices.issued")]
/// async fn book(_invoice: &Invoice) {}
///
/// let mut billing = Router::new("billing");
/// billing.include(book).dead_letter("billing.dead");
///
/// let app = RustStream::new(AppInfo::new("erp", "0.1.0")).with_broker(Nowhere, |b| {
///     b.include_router(billing);
/// });
/// let text = ruststream::app::cli::describe(&app);
/// assert!(text.contains("billing.invoices.issued"));
/// ```
pub struct Router<S = ()> {
    prefix: String,
    registrations: Vec<Registration<S>>,
    layers: Vec<Arc<dyn Middleware>>,
}

impl<S> fmt::Debug for Router<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Router")
            .field("prefix", &self.prefix)
            .field("registrations", &self.registrations)
            .finish_non_exhaustive()
    }
}

impl<S> Router<S> {
    /// A router whose registrations read `prefix.` + their subject (`prefix` written with or
    /// without its final dot).
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into().trim_end_matches('.').to_owned(),
            registrations: Vec::new(),
            layers: Vec::new(),
        }
    }

    /// The prefix, without its final dot.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Mounts a handler in the router; returns the registration, to chain its policy.
    // As `Scope::include`, for the same errors.
    pub fn include<M: Is<H>, H: Mount<S, Marker>, Marker>(
        &mut self,
        subscriber: M,
    ) -> &mut Registration<S> {
        self.registrations.push(subscriber.itself().mount());
        let last = self.registrations.len() - 1;
        &mut self.registrations[last]
    }

    /// Adds a middleware around every handler of the router (mounted before or after this
    /// call), outside each registration's own and inside the layers of a router including this
    /// one.
    pub fn layer(&mut self, middleware: impl Middleware) -> &mut Self {
        self.layers.push(Arc::new(middleware));
        self
    }

    /// Mounts another router inside this one: its prefix comes after this one's
    /// (`outer.inner.subject`), its layers inside this one's.
    pub fn include_router(&mut self, router: Router<S>) -> &mut Self {
        self.registrations.extend(router.into_routed());
        self
    }

    /// The registrations with the prefix and layers applied.
    pub(crate) fn into_routed(self) -> Vec<Registration<S>> {
        let mut registrations = self.registrations;
        for registration in &mut registrations {
            registration.route(&self.prefix, &self.layers);
        }
        registrations
    }
}
