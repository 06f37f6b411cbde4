//! The app's name and version ([`AppInfo`]), and what the AsyncAPI document says about it.

use crate::asyncapi::{Contact, ExternalDocs, License, Metadata, Tag};

/// The app's name and version, as `describe` and logs show them, the metadata the AsyncAPI
/// document's `info` carries, and the service the app's request handlers are advertised as
/// (see `docs/request-reply.md`).
///
/// ```
/// use ruststream::AppInfo;
/// use ruststream::asyncapi::{Contact, ExternalDocs, License, Tag};
///
/// let info = AppInfo::new("payments", "0.1.0")
///     .description("Captures authorized payments.")
///     .contact(Contact::new("Payments team").email("payments@example.com"))
///     .license(License::new("Apache-2.0").url("https://www.apache.org/licenses/LICENSE-2.0"))
///     .tag("payments")
///     .tag(Tag::new("billing").description("Money in and out"))
///     .external_docs(ExternalDocs::new("https://docs.example.com/payments"));
/// assert_eq!(info.metadata().tags.len(), 2);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppInfo {
    name: String,
    version: String,
    /// Boxed: an `AppInfo` travels inside apps and test harnesses, most without metadata.
    metadata: Box<Metadata>,
}

impl AppInfo {
    /// `AppInfo::new("payments", "0.1.0")`.
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            version: version.into(),
            metadata: Box::default(),
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

    /// What the AsyncAPI document's `info` says besides the name and version.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// What the app does (CommonMark), for the AsyncAPI document.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.metadata.description = Some(description.into());
        self
    }

    /// Who to ask about the app, for the AsyncAPI document.
    pub fn contact(mut self, contact: Contact) -> Self {
        self.metadata.contact = Some(contact);
        self
    }

    /// The app's license (`"Apache-2.0"`, or a [`License`] with its URL), for the AsyncAPI
    /// document.
    pub fn license(mut self, license: impl Into<License>) -> Self {
        self.metadata.license = Some(license.into());
        self
    }

    /// Adds a tag (`"payments"`, or a [`Tag`] with what it means), for the AsyncAPI document.
    pub fn tag(mut self, tag: impl Into<Tag>) -> Self {
        self.metadata.tags.push(tag.into());
        self
    }

    /// Where the app's documentation is (a URL, or [`ExternalDocs`] with what is there), for
    /// the AsyncAPI document.
    pub fn external_docs(mut self, docs: impl Into<ExternalDocs>) -> Self {
        self.metadata.external_docs = Some(docs.into());
        self
    }
}
