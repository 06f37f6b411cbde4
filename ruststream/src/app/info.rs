//! The app's name and version ([`AppInfo`]).

/// The app's name and version, as `describe` and logs show them, and the service the app's
/// request handlers are advertised as (see `docs/request-reply.md`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppInfo {
    name: String,
    version: String,
    description: Option<String>,
}

impl AppInfo {
    /// `AppInfo::new("payments", "0.1.0")`.
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            version: version.into(),
            description: None,
        }
    }

    /// A sentence saying what the app does: the description of its micro service
    /// (`nats micro info` shows it).
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// The app's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The app's version.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The app's description, if it has one.
    pub fn description(&self) -> Option<&str> {
        self.description.as_deref()
    }
}
