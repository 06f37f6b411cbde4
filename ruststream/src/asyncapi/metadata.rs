//! What the document's `info` says about the app besides its name and version: a description,
//! a contact, a license, tags and external docs. Set on the app's
//! [`AppInfo`](crate::AppInfo) (`AppInfo::new(..).description(..).contact(..)`).

use serde_json::{Map, Value, json};

/// The app's metadata for the document's `info`; empty by default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Metadata {
    /// What the app does (CommonMark).
    pub description: Option<String>,
    /// Who to ask about it.
    pub contact: Option<Contact>,
    /// Its license.
    pub license: Option<License>,
    /// Tags grouping it with other apps.
    pub tags: Vec<Tag>,
    /// Where its documentation is.
    pub external_docs: Option<ExternalDocs>,
}

/// Who to ask about the app: a name, a URL, an email address, each optional.
///
/// ```
/// use ruststream::asyncapi::Contact;
/// let contact = Contact::new("Payments team").email("payments@example.com");
/// assert_eq!(contact.name.as_deref(), Some("Payments team"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Contact {
    /// The person's or team's name.
    pub name: Option<String>,
    /// A URL of their contact page.
    pub url: Option<String>,
    /// Their email address.
    pub email: Option<String>,
}

impl Contact {
    /// A contact named `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: Some(name.into()),
            ..Self::default()
        }
    }

    /// With a URL of their contact page.
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.url = Some(url.into());
        self
    }

    /// With an email address.
    pub fn email(mut self, email: impl Into<String>) -> Self {
        self.email = Some(email.into());
        self
    }
}

/// The app's license: a name (an SPDX id such as `Apache-2.0`, say) and a URL.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct License {
    /// The license's name.
    pub name: String,
    /// Where its text is.
    pub url: Option<String>,
}

impl License {
    /// The license named `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            url: None,
        }
    }

    /// With the URL of its text.
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.url = Some(url.into());
        self
    }
}

/// A tag: a name and what it means.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Tag {
    /// The tag.
    pub name: String,
    /// What it means.
    pub description: Option<String>,
}

impl Tag {
    /// The tag `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            description: None,
        }
    }

    /// With what it means.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }
}

/// Documentation elsewhere: a URL and what is there.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExternalDocs {
    /// Where it is.
    pub url: String,
    /// What it is.
    pub description: Option<String>,
}

impl ExternalDocs {
    /// The documentation at `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            description: None,
        }
    }

    /// With what is there.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }
}

/// `"text"` converts to each of these: a license's name, a tag's name, a documentation URL.
macro_rules! from_text {
    ($($ty:ty),*) => {$(
        impl From<&str> for $ty {
            fn from(text: &str) -> Self {
                Self::new(text)
            }
        }

        impl From<String> for $ty {
            fn from(text: String) -> Self {
                Self::new(text)
            }
        }
    )*};
}

from_text!(License, Tag, ExternalDocs);

/// Sets `key` of `object` to `value` when there is one.
fn put(object: &mut Map<String, Value>, key: &str, value: Option<&String>) {
    if let Some(value) = value {
        object.insert(key.to_owned(), Value::String(value.clone()));
    }
}

fn external_docs(docs: &ExternalDocs) -> Value {
    let mut out = Map::new();
    put(&mut out, "url", Some(&docs.url));
    put(&mut out, "description", docs.description.as_ref());
    Value::Object(out)
}

impl Metadata {
    /// Writes what is set into the document's `info` object.
    pub(super) fn write(&self, info: &mut Map<String, Value>) {
        put(info, "description", self.description.as_ref());
        if let Some(contact) = &self.contact {
            let mut out = Map::new();
            put(&mut out, "name", contact.name.as_ref());
            put(&mut out, "url", contact.url.as_ref());
            put(&mut out, "email", contact.email.as_ref());
            info.insert("contact".to_owned(), Value::Object(out));
        }
        if let Some(license) = &self.license {
            let mut out = Map::new();
            put(&mut out, "name", Some(&license.name));
            put(&mut out, "url", license.url.as_ref());
            info.insert("license".to_owned(), Value::Object(out));
        }
        if !self.tags.is_empty() {
            let tags = self
                .tags
                .iter()
                .map(|tag| match &tag.description {
                    Some(about) => json!({"name": tag.name, "description": about}),
                    None => json!({"name": tag.name}),
                })
                .collect();
            info.insert("tags".to_owned(), Value::Array(tags));
        }
        if let Some(docs) = &self.external_docs {
            info.insert("externalDocs".to_owned(), external_docs(docs));
        }
    }
}
