//! `NatsBroker`: configuration recorded at build time; everything connects at startup.

use futures::future::BoxFuture;
use ruststream::registration::{Endpoint, RegistrationInfo};
use ruststream::{Broker, Env, Error, ErrorKind, RunningBroker};

/// A NATS server (Core and JetStream over one connection).
///
/// `NatsBroker::new(url)` only records the configuration; the app connects when it starts.
#[derive(Debug, Clone)]
pub struct NatsBroker {
    url: String,
}

impl NatsBroker {
    /// A broker at `url` (`nats://localhost:4222`).
    pub fn new(url: impl Into<String>) -> Self {
        Self { url: url.into() }
    }
}

impl Broker for NatsBroker {
    fn kind(&self) -> &'static str {
        "nats"
    }

    fn address(&self) -> String {
        self.url.clone()
    }

    fn validate(&self, _registrations: &[RegistrationInfo]) -> Result<(), Error> {
        Ok(())
    }

    fn start(
        self: Box<Self>,
        _endpoints: Vec<Endpoint>,
        _env: Env,
    ) -> BoxFuture<'static, Result<Box<dyn RunningBroker>, Error>> {
        Box::pin(async {
            Err(Error::new(
                ErrorKind::Config,
                "the NATS runtime is being built",
            ))
        })
    }
}
