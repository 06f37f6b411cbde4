//! The app's name and version ([`AppInfo`]).

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
