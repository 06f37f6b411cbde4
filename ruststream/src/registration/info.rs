//! A registration's facts ([`RegistrationInfo`]), for `describe`, `asyncapi` and the startup
//! checks.

use super::descriptor::DescriptorInfo;
use super::policy::Policy;
use super::schemas::Schemas;

/// A registration's facts, for `describe` and startup checks.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RegistrationInfo {
    /// The registration's name (the handler function's name by default).
    pub name: String,
    /// The descriptor's facts.
    pub descriptor: DescriptorInfo,
    /// The mount site's policy.
    pub policy: Policy,
    /// Whether the handler takes batches.
    pub batch: bool,
    /// The subjects the handler publishes to.
    pub publishes: Vec<&'static str>,
    /// The middleware around the handler, outermost first (the app's, the broker's, its own).
    pub middleware: Vec<String>,
    /// The payload's type and, when declared, its JSON Schema and its reply's (`asyncapi`).
    pub schemas: Schemas,
    /// Whether the handler answers requests (`#[subscriber(.., reply)]`): a stream storing its
    /// subject would answer a request with its storage receipt before the handler could.
    pub answers_requests: bool,
    /// The prefixes of the routers it was mounted in, outermost first, joined by `.`
    /// (`billing`); `None` when mounted on the broker.
    pub group: Option<String>,
}

impl RegistrationInfo {
    /// The subjects the handler publishes to, each with the pattern of the subjects it stands
    /// for: a template (`orders.{tenant}.placed`) as `orders.*.placed`, a subject as itself
    /// (what to ask when a stream stores it).
    pub fn output_patterns(&self) -> Vec<(&'static str, String)> {
        self.publishes
            .iter()
            .map(|subject| {
                let pattern = subject
                    .split('.')
                    .map(|t| if t.starts_with('{') { "*" } else { t })
                    .collect::<Vec<_>>()
                    .join(".");
                (*subject, pattern)
            })
            .collect()
    }

    /// Where a Core copy of this registration goes: `retry_to`, else the descriptor's own.
    pub fn copy_target(&self) -> Option<&str> {
        self.policy
            .retry_to
            .as_deref()
            .or(self.descriptor.copy_target.as_deref())
    }
}

/// The parts of a registration's policy `describe` shows under its table, when they differ
/// from the defaults: the payload format, the failure policy, middleware.
#[doc(hidden)]
pub fn policy_notes(r: &RegistrationInfo) -> Vec<String> {
    let mut notes = Vec::new();
    if let Some(codec) = r.policy.codec {
        notes.push(format!(
            "codec {}",
            crate::codec::Codec::content_type(&codec)
        ));
    }
    if !r.middleware.is_empty() {
        notes.push(format!("middleware: {}", r.middleware.join(" > ")));
    }
    let defaults = Policy::default();
    let p = &r.policy;
    if (p.undecodable, p.on_panic, p.on_error)
        != (defaults.undecodable, defaults.on_panic, defaults.on_error)
    {
        notes.push(format!(
            "undecodable: {}, panic: {}, error: {}",
            p.undecodable, p.on_panic, p.on_error
        ));
    }
    if let Some(idempotency) = &p.idempotency {
        notes.push(idempotency.to_string());
    }
    if let Some(threads) = p.threads {
        notes.push(format!("handler on {threads} threads of its own"));
    }
    notes
}
