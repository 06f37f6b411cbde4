//! The app's AsyncAPI 3.0 document (the `asyncapi` subcommand): its servers, a channel for
//! every subject it reads or publishes (patterns included; JetStream streams and consumers and
//! the registration's policy as `x-ruststream` extensions, queue groups as NATS operation
//! bindings), a `receive` operation per registration (with its reply, for a Core registration
//! that answers requests) and a `send` operation per subject it publishes to, dead letters and
//! retry copies included. Its `info` carries the metadata set on the app's
//! [`AppInfo`](crate::AppInfo) ([`Metadata`]: `metadata.rs`), each server the ways its client
//! authenticates ([`SecurityScheme`]: `security.rs`), each message the headers the runtime
//! reads or writes (`headers.rs`).
//!
//! Payload schemas are JSON Schemas (draft 7) generated from the Rust types: traced from the
//! payload type's serde `Deserialize` impl (see
//! [`traced_schema`](crate::registration::traced_schema)), and for what a handler publishes,
//! from its `#[derive(Outgoing)]` type (its `schemars::JsonSchema` when it has one, else traced
//! the same way). A registration can declare richer ones (descriptions from doc comments,
//! formats) with `schemars` at the mount site: `.payload_schema::<Payment>()` and
//! `.reply_schema::<Captured>()`. A type neither way describes (an untagged enum, say) gets a
//! message that names its Rust type and says its schema is not known.
//!
//! ```
//! use ruststream::registration::Registration;
//! # fn mount(registration: &mut Registration<()>) {
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct Payment {
//!     id: u64,
//!     amount_cents: u64,
//! }
//! registration.payload_schema::<Payment>();
//! # }
//! ```

mod headers;
mod html;
mod metadata;
mod security;

use serde_json::{Map, Value, json};

use self::headers::Role;

use crate::codec::Codec;
use crate::registration::RegistrationInfo;
use crate::settle::DeliveryModel;

pub use self::metadata::{Contact, ExternalDocs, License, Metadata, Tag};
pub use self::security::SecurityScheme;
pub use crate::registration::{SchemaFn, Schemas, schema_of};

/// An id AsyncAPI accepts (`^[\w\d.\-_]+$`) for `subject`: `*` is `_any_`, `>` is `_rest_`.
fn id(subject: &str) -> String {
    subject
        .chars()
        .map(|c| match c {
            '*' => "_any_".to_owned(),
            '>' => "_rest_".to_owned(),
            c if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') => c.to_string(),
            _ => "_".to_owned(),
        })
        .collect()
}

/// The id of registration `name`'s receive operation in the document (`#/operations/<id>`).
pub fn operation_id(name: &str) -> String {
    id(name)
}

/// The id of the channel of `subject` in the document (`#/channels/<id>`).
pub fn channel_id(subject: &str) -> String {
    id(subject)
}

/// The short name of a Rust type: `payments::Payment` is `Payment`.
fn short(type_name: &str) -> &str {
    let base = type_name.split('<').next().unwrap_or(type_name);
    base.rsplit("::").next().unwrap_or(base)
}

fn message(
    name: &str,
    title: &str,
    schema: Option<SchemaFn>,
    about: &str,
    content_type: &str,
    headers: Value,
) -> Value {
    let mut message = json!({
        "name": id(name),
        "title": title,
        "contentType": content_type,
        "headers": headers,
    });
    match schema.and_then(|schema| schema()) {
        Some(schema) => {
            message["payload"] = schema;
        }
        None => {
            message["description"] = Value::String(format!(
                "{about}; its schema is not known (its type's `Deserialize` impl cannot be traced: declare one with `.payload_schema::<T>()` or `.reply_schema::<T>()` at the mount site)"
            ));
        }
    }
    message
}

/// Collects channels and operations.
#[derive(Default)]
struct Doc {
    channels: Map<String, Value>,
    operations: Map<String, Value>,
}

impl Doc {
    /// The channel of `address` (added when new), with message `message_id` added; returns
    /// the references to the channel and to the message.
    fn channel(
        &mut self,
        address: Option<&str>,
        channel_id: &str,
        message_id: &str,
        message: Value,
        extra: Option<(&str, Value)>,
    ) -> (Value, Value) {
        let channel = self
            .channels
            .entry(channel_id.to_owned())
            .or_insert_with(|| {
                let mut channel = json!({
                    "address": address,
                    "messages": {},
                });
                if let Some(address) = address
                    && (address.contains('*') || address.contains('>'))
                {
                    channel["description"] = Value::String(format!(
                        "the NATS subject pattern `{address}` (`*` one token, `>` the rest)"
                    ));
                }
                channel
            });
        if let Some(messages) = channel["messages"].as_object_mut() {
            messages.entry(message_id.to_owned()).or_insert(message);
        }
        if let Some((key, value)) = extra {
            channel[key] = value;
        }
        (
            json!({"$ref": format!("#/channels/{channel_id}")}),
            json!({"$ref": format!("#/channels/{channel_id}/messages/{message_id}")}),
        )
    }
}

/// What the document is built from: an app's name, version, brokers, streams and
/// registrations. Every [`App`](crate::App) provides it (`app/mod.rs`), so that this module
/// stays below the app that prints it (the `asyncapi` subcommand) and knows no app type.
pub struct DocumentInput {
    /// The app's name.
    pub name: String,
    /// The app's version.
    pub version: String,
    /// The app's description, contact, license, tags and external docs.
    pub metadata: Metadata,
    /// The brokers, as `(kind, address)`.
    pub brokers: Vec<(&'static str, String)>,
    /// How each broker's client authenticates, in the order of `brokers`.
    pub security: Vec<Vec<SecurityScheme>>,
    /// The streams the brokers declare, as `(name, subjects)`.
    pub streams: Vec<(String, Vec<String>)>,
    /// Every registration.
    pub registrations: Vec<RegistrationInfo>,
}

/// Anything an AsyncAPI document can be built from; every [`App`](crate::App) is.
pub trait DocumentSource {
    /// The facts the document is built from.
    fn document_input(&self) -> DocumentInput;
}

/// The AsyncAPI 3.0 document of `app`.
pub fn document<A: DocumentSource + ?Sized>(app: &A) -> Value {
    let input = app.document_input();
    let streams = &input.streams;
    let mut servers = Map::new();
    let mut schemes = Map::new();
    for (i, (kind, address)) in input.brokers.iter().enumerate() {
        let first = address.split(',').next().unwrap_or(address).trim();
        let (protocol, host) = match first.split_once("://") {
            Some((scheme, host)) => (scheme, host),
            None => ("nats", first),
        };
        let protocol = if protocol == "tls" { "nats" } else { protocol };
        let name = if i == 0 {
            (*kind).to_owned()
        } else {
            format!("{kind}{i}")
        };
        let mut server = json!({
            "host": host.trim_end_matches('/'),
            "protocol": protocol,
            "description": format!("the {kind} broker the app connects to unless `run --url` or NATS_URL says otherwise"),
        });
        let security: Vec<Value> = input
            .security
            .get(i)
            .into_iter()
            .flatten()
            .map(|scheme| {
                let (scheme_id, scheme) = scheme.to_asyncapi();
                let scheme_id = id(&scheme_id);
                let reference =
                    json!({"$ref": format!("#/components/securitySchemes/{scheme_id}")});
                schemes.insert(scheme_id, scheme);
                reference
            })
            .collect();
        if !security.is_empty() {
            server["security"] = Value::Array(security);
        }
        servers.insert(name, server);
    }
    let mut doc = Doc::default();
    for r in &input.registrations {
        receive(&mut doc, r);
    }
    let mut info = Map::new();
    info.insert("title".to_owned(), json!(input.name));
    info.insert("version".to_owned(), json!(input.version));
    info.insert(
        "description".to_owned(),
        json!(format!(
            "{} {}: a RustStream service",
            input.name, input.version
        )),
    );
    input.metadata.write(&mut info);
    let mut out = json!({
        "asyncapi": "3.0.0",
        "info": info,
        "defaultContentType": "application/json",
        "servers": servers,
        "channels": doc.channels,
        "operations": doc.operations,
    });
    if !streams.is_empty() {
        out["x-ruststream-streams"] = streams
            .iter()
            .map(|(name, subjects)| json!({"name": name, "subjects": subjects}))
            .collect();
    }
    if !schemes.is_empty() {
        out["components"] = json!({"securitySchemes": schemes});
    }
    out
}

/// The operations and channels of registration `r`.
fn receive(doc: &mut Doc, r: &RegistrationInfo) {
    let d = &r.descriptor;
    let payload_type = short(r.schemas.payload_type);
    let jetstream = d.model == DeliveryModel::JetStream;
    let copy = if jetstream { None } else { r.copy_target() };
    // A Core registration that makes retry copies may be handed them: they carry the count.
    let retried = copy.is_some();
    // The registration's codec: its schemas describe the serde data model it encodes.
    let codec = r.policy.codec.unwrap_or_default().content_type();
    let content_type = if r.schemas.raw {
        crate::codec::Raw.content_type()
    } else {
        codec
    };
    let input = message(
        &format!("{}.in", r.name),
        payload_type,
        r.schemas.payload,
        &format!("a `{}` ({content_type})", r.schemas.payload_type),
        content_type,
        headers::schema(Role::Input { retried }, &r.schemas.headers),
    );
    let extra = jetstream.then(|| {
        (
            "x-ruststream-jetstream",
            match &d.bucket {
                Some(bucket) => {
                    json!({"stream": d.stream, "consumer": d.consumer, "bucket": bucket, "changes": d.bucket_changes})
                }
                None => json!({"stream": d.stream, "consumer": d.consumer}),
            },
        )
    });
    let input_id = format!("{}.in", r.name);
    let (channel, msg) = doc.channel(
        Some(&d.subject),
        &channel_id(&d.subject),
        &id(&input_id),
        input,
        extra,
    );
    let mut operation = json!({
        "action": "receive",
        "channel": channel,
        "messages": [msg],
        "summary": format!("handled by `{}`", r.name),
        "x-ruststream": {
            "model": if jetstream { "jetstream" } else { "core" },
            "stream": d.stream,
            "consumer": d.consumer,
            "queue_group": d.queue_group,
            "ack_wait_ms": d.ack_wait.map(|w| u64::try_from(w.as_millis()).unwrap_or(u64::MAX)),
            "max_attempts": r.policy.max_attempts.map(|n| n.get()),
            "concurrency": r.policy.concurrency.get(),
            "batch": r.batch,
            "dead_letter": r.policy.dead_letter,
        },
    });
    if let Some(group) = &d.queue_group {
        operation["bindings"] = json!({"nats": {"queue": group, "bindingVersion": "0.1.0"}});
    }
    // Named by the Rust type the handler returns (its `#[derive(Outgoing)]` type, or the one a
    // `.reply_schema::<T>()` declared).
    let output_type = r.schemas.reply_type.map_or("the handler's value", short);
    // Each output in its type's own codec (`#[outgoing(codec = ..)]`), else the registration's.
    let output_codec = |i: usize| {
        r.schemas
            .output_codecs
            .get(i)
            .copied()
            .flatten()
            .map_or(codec, |format| format.content_type())
    };
    for (i, subject) in r.publishes.iter().enumerate() {
        let out_id = format!("{}.out", r.name);
        // Each output by its own type; the first is what a reply handler returns, which a
        // declared `.reply_schema::<T>()` describes.
        let (title, schema) = match r.schemas.outputs.get(i) {
            Some(&(type_name, schema)) if i > 0 => (short(type_name), Some(schema)),
            _ => (output_type, r.schemas.reply),
        };
        let out = message(
            &out_id,
            title,
            schema,
            "what the handler returns",
            output_codec(i),
            headers::schema(
                Role::Output {
                    stored_input: jetstream,
                },
                &[],
            ),
        );
        let (channel, msg) = doc.channel(Some(subject), &id(subject), &id(&out_id), out, None);
        doc.operations.insert(
            id(&format!("{}.publish.{subject}", r.name)),
            json!({
                "action": "send",
                "channel": channel,
                "messages": [msg],
                "summary": format!("`{}` publishes its value", r.name),
            }),
        );
    }
    // A Core registration that publishes answers requests with the same value; one returning
    // `Response<T>` answers them and publishes nothing.
    if !jetstream && (r.answers_requests || !r.publishes.is_empty()) {
        let reply_id = format!("{}.reply", r.name);
        let out = message(
            &format!("{}.out", r.name),
            output_type,
            r.schemas.reply,
            "what the handler returns",
            output_codec(0),
            headers::schema(Role::Reply, &[]),
        );
        let (channel, msg) = doc.channel(
            None,
            &id(&reply_id),
            &id(&format!("{}.out", r.name)),
            out,
            None,
        );
        if let Some(c) = doc.channels.get_mut(&id(&reply_id)) {
            c["description"] =
                Value::String("the requester's inbox (the request's reply subject)".to_owned());
        }
        operation["reply"] = json!({"channel": channel, "messages": [msg]});
    }
    for (what, subject) in [
        ("dead_letter", r.policy.dead_letter.as_deref()),
        ("retry_copy", copy),
    ] {
        let Some(subject) = subject else { continue };
        let copy_id = format!("{}.{what}", r.name);
        let about = if what == "dead_letter" {
            "the spent delivery, as it arrived"
        } else {
            "a Core retry copy, as it arrived, with its retry count header"
        };
        let copied = message(
            &copy_id,
            payload_type,
            r.schemas.payload,
            about,
            content_type,
            headers::schema(Role::Input { retried }, &r.schemas.headers),
        );
        let (channel, msg) = doc.channel(Some(subject), &id(subject), &id(&copy_id), copied, None);
        doc.operations.insert(
            id(&copy_id),
            json!({
                "action": "send",
                "channel": channel,
                "messages": [msg],
                "summary": about,
            }),
        );
    }
    doc.operations.insert(operation_id(&r.name), operation);
}

/// The document as a standalone HTML page a person opens in a browser (`asyncapi --html`):
/// the servers, every channel with its messages and their JSON Schemas, every operation with
/// its channel, reply, bindings and RustStream policy, and the declared streams. It needs
/// nothing from the network: the style is inline, and a short inline script builds the table
/// of contents from the document, which the page carries as JSON
/// (`<script type="application/json" id="asyncapi-document">`) for tools to read back.
///
/// ```
/// # use ruststream::{AppInfo, RustStream};
/// let app = RustStream::new(AppInfo::new("payments", "0.1.0"));
/// let page = ruststream::asyncapi::to_html(&ruststream::asyncapi::document(&app));
/// assert!(page.starts_with("<!DOCTYPE html>"));
/// assert!(page.contains("<title>payments 0.1.0: AsyncAPI 3.0.0</title>"));
/// ```
pub fn to_html(document: &Value) -> String {
    html::page(document)
}

/// The document as YAML.
///
/// # Errors
///
/// Never in practice: a JSON value always has a YAML form.
pub fn to_yaml(document: &Value) -> Result<String, String> {
    serde_norway::to_string(document).map_err(|e| e.to_string())
}
