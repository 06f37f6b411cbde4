//! The AsyncAPI 3.0 document: every example's validates against the official AsyncAPI 3.0 JSON
//! Schema (vendored from the `@asyncapi/specs` npm package, 6.11.1,
//! `schemas/3.0.0-without-$id.json`, Apache-2.0: tests/asyncapi/), and an app with patterns,
//! a queue group, requests and declared payload schemas describes each as AsyncAPI says.

use std::sync::OnceLock;

use ruststream::asyncapi::{document, to_yaml};
use serde_json::{Value, json};

macro_rules! example {
    ($module:ident, $file:literal) => {
        #[allow(dead_code)]
        mod $module {
            include!(concat!("../examples/", $file));

            pub(crate) fn service() -> impl App {
                app()
            }
        }
    };
}

example!(payments, "payments.rs");
example!(nats_settlement_core, "nats_settlement_core.rs");
example!(retries_dead_letters, "retries_dead_letters.rs");
example!(batches, "batches.rs");
example!(orders_worker, "orders_worker.rs");
example!(manual_payments, "manual/payments.rs");
example!(
    manual_nats_settlement_core,
    "manual/nats_settlement_core.rs"
);
example!(
    manual_retries_dead_letters,
    "manual/retries_dead_letters.rs"
);
example!(manual_batches, "manual/batches.rs");
example!(manual_orders_worker, "manual/orders_worker.rs");

/// The official schema, compiled once.
fn validator() -> &'static jsonschema::Validator {
    static VALIDATOR: OnceLock<jsonschema::Validator> = OnceLock::new();
    VALIDATOR.get_or_init(|| {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/asyncapi/asyncapi-3.0.0.schema.json"
        );
        let schema: Value =
            serde_json::from_str(&std::fs::read_to_string(path).expect("the vendored schema"))
                .expect("the schema is JSON");
        jsonschema::draft7::new(&schema).expect("the schema compiles")
    })
}

fn assert_valid(name: &str, doc: &Value) {
    let errors: Vec<String> = validator()
        .iter_errors(doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{name}'s document is not valid AsyncAPI 3.0:\n{}\n{}",
        errors.join("\n"),
        serde_json::to_string_pretty(doc).expect("JSON")
    );
}

#[test]
fn the_official_schema_refuses_a_broken_document() {
    // The validator is not a rubber stamp: a receive operation without a channel fails.
    let mut doc = document(&payments::service());
    doc["operations"]["capture"]
        .as_object_mut()
        .expect("an operation")
        .remove("channel");
    assert!(!validator().is_valid(&doc));
    let mut doc = document(&payments::service());
    doc["asyncapi"] = json!("2.6.0");
    assert!(!validator().is_valid(&doc));
}

#[test]
fn every_examples_document_is_valid_asyncapi() {
    let documents = [
        ("payments", document(&payments::service())),
        (
            "nats_settlement_core",
            document(&nats_settlement_core::service()),
        ),
        (
            "retries_dead_letters",
            document(&retries_dead_letters::service()),
        ),
        ("batches", document(&batches::service())),
        ("orders_worker", document(&orders_worker::service())),
        ("manual/payments", document(&manual_payments::service())),
        (
            "manual/nats_settlement_core",
            document(&manual_nats_settlement_core::service()),
        ),
        (
            "manual/retries_dead_letters",
            document(&manual_retries_dead_letters::service()),
        ),
        ("manual/batches", document(&manual_batches::service())),
        (
            "manual/orders_worker",
            document(&manual_orders_worker::service()),
        ),
    ];
    for (name, doc) in &documents {
        assert_valid(name, doc);
        // Every message has a schema: the examples' types declare none, so each is traced from
        // the type's `Deserialize` impl.
        let channels = doc["channels"].as_object().expect("channels");
        for (channel, c) in channels {
            for (id, message) in c["messages"].as_object().expect("messages") {
                assert!(
                    message["payload"].is_object(),
                    "{name}: message {id} of {channel} has no schema: {message}"
                );
            }
        }
        // The YAML form says the same.
        let yaml = to_yaml(doc).expect("YAML");
        let back: Value = serde_norway::from_str(&yaml).expect("the YAML parses");
        assert_eq!(&back, doc, "{name}");
    }
    // The payments example: its servers, both subjects, the JetStream consumer, the answer.
    let doc = &documents[0].1;
    assert_eq!(doc["servers"]["nats"]["host"], "localhost:4222");
    assert_eq!(doc["servers"]["nats"]["protocol"], "nats");
    let authorized = &doc["channels"]["payments.authorized"];
    assert_eq!(authorized["address"], "payments.authorized");
    assert_eq!(
        authorized["x-ruststream-jetstream"],
        json!({"stream": "PAYMENTS", "consumer": "capture"})
    );
    assert_eq!(authorized["messages"]["capture.in"]["title"], "Payment");
    // The payment's schema, traced from its serde derive: it checks what the seeds publish.
    let payment = &authorized["messages"]["capture.in"]["payload"];
    assert_eq!(payment["type"], "object");
    let schema = jsonschema::validator_for(payment).expect("a JSON Schema");
    assert!(schema.is_valid(&json!({"id": 7, "card": "4242", "amount_cents": 1250})));
    assert!(!schema.is_valid(&json!({"id": 7, "card": "4242"})));
    assert!(!schema.is_valid(&json!({"id": "p-7", "card": "4242", "amount_cents": 1250})));
    let capture = &doc["operations"]["capture"];
    assert_eq!(capture["action"], "receive");
    assert_eq!(capture["channel"]["$ref"], "#/channels/payments.authorized");
    assert_eq!(
        doc["operations"]["capture.publish.payments.captured"]["channel"]["$ref"],
        "#/channels/payments.captured"
    );
    assert_eq!(doc["operations"]["refresh"]["action"], "receive");
    // A JetStream delivery is not a request: no reply.
    assert!(capture.get("reply").is_none());
    // What the handler publishes is named by its `#[derive(Outgoing)]` type.
    assert_eq!(
        doc["channels"]["payments.captured"]["messages"]["capture.out"]["title"],
        "Captured"
    );
    // Its output carries the message id a stream deduplicates on (the input is stored).
    let headers = &doc["channels"]["payments.captured"]["messages"]["capture.out"]["headers"];
    assert_eq!(headers["type"], "object");
    assert!(
        headers["properties"]["Nats-Msg-Id"].is_object(),
        "{headers}"
    );
    // No credentials in the code, no security scheme.
    assert!(doc["servers"]["nats"].get("security").is_none());
    assert!(doc.get("components").is_none());
}

mod custom {
    use ruststream_nats::prelude::*;
    use serde::{Deserialize, Serialize};

    #[derive(Debug, Deserialize, schemars::JsonSchema)]
    pub struct Number {
        /// The number to double.
        pub value: i64,
    }

    #[derive(Debug, Serialize, Deserialize, Outgoing, schemars::JsonSchema)]
    #[outgoing(name = "math.doubled")]
    pub struct Doubled {
        pub value: i64,
    }

    #[subscriber("math.double", reply)]
    pub async fn double(n: &Number) -> Result<Doubled, HandlerOutcome> {
        Ok(Doubled { value: n.value * 2 })
    }

    #[subscriber(CoreWildcard::new("audit.*").queue_group("auditors"))]
    pub async fn audit(_n: &Number) -> HandlerOutcome {
        HandlerOutcome::ack()
    }

    /// A reply type with its own `JsonSchema` and no declaration at the mount site: the
    /// derive takes its schema, descriptions included.
    #[derive(Debug, Serialize, Deserialize, Outgoing, schemars::JsonSchema)]
    #[outgoing(name = "math.tripled")]
    pub struct Tripled {
        /// Three times the number.
        pub value: i64,
    }

    #[subscriber("math.triple", reply)]
    pub async fn triple(n: &Number) -> Result<Tripled, HandlerOutcome> {
        Ok(Tripled { value: n.value * 3 })
    }

    /// Any JSON: a payload no schema describes.
    #[subscriber("math.loose")]
    pub async fn loose(_v: &serde_json::Value) -> HandlerOutcome {
        HandlerOutcome::ack()
    }

    #[derive(Debug, Serialize, Deserialize, Outgoing)]
    #[outgoing(name = "math.audited")]
    pub struct Audited {
        pub value: i64,
    }

    /// A manual handler publishing two types: each subject's message is named by its own.
    pub struct Fanout;

    impl Handle<Number, (Publisher<Doubled>, Publisher<Audited>)> for Fanout {
        async fn handle(
            &self,
            n: &Number,
            outs: &(Publisher<Doubled>, Publisher<Audited>),
            ctx: &mut Context<'_>,
        ) -> Result<(), HandlerOutcome> {
            let retry = |_| HandlerOutcome::retry();
            outs.0
                .publish(ctx, &Doubled { value: n.value * 2 })
                .await
                .map_err(retry)?;
            outs.1
                .publish(ctx, &Audited { value: n.value })
                .await
                .map_err(retry)
        }
    }

    pub fn app() -> impl App<State = ()> {
        RustStream::new(AppInfo::new("math", "1.2.3")).with_broker(
            NatsBroker::new("nats://math.internal:4222"),
            |b| {
                b.include(double)
                    .payload_schema::<Number>()
                    .reply_schema::<Doubled>()
                    .max_attempts(nonzero!(3))
                    .dead_letter("math.dead");
                b.include(audit);
                b.include(triple);
                b.include(loose);
                b.include(CoreSubject::new("math.fanout").handler(Fanout))
                    .name("fanout");
            },
        )
    }
}

#[test]
fn patterns_queue_groups_requests_and_schemas_are_described() {
    let doc = document(&custom::app());
    assert_valid("math", &doc);
    assert_eq!(doc["info"]["title"], "math");
    assert_eq!(doc["info"]["version"], "1.2.3");
    assert_eq!(doc["servers"]["nats"]["host"], "math.internal:4222");
    // The payload schema, from the Rust type.
    let input = &doc["channels"]["math.double"]["messages"]["double.in"];
    assert_eq!(input["payload"]["type"], "object");
    assert_eq!(input["payload"]["properties"]["value"]["type"], "integer");
    assert_eq!(
        input["payload"]["properties"]["value"]["description"],
        "The number to double."
    );
    assert_eq!(input["payload"]["required"], json!(["value"]));
    // The request's reply: to the requester's inbox (no fixed address), with the value's schema.
    let double = &doc["operations"]["double"];
    assert_eq!(
        double["reply"]["channel"]["$ref"],
        "#/channels/double.reply"
    );
    assert_eq!(doc["channels"]["double.reply"]["address"], Value::Null);
    let reply = &doc["channels"]["double.reply"]["messages"]["double.out"];
    assert_eq!(reply["payload"]["properties"]["value"]["type"], "integer");
    // The value also goes to its subject; spent requests to the dead-letter subject.
    assert_eq!(
        doc["operations"]["double.publish.math.doubled"]["action"],
        "send"
    );
    assert_eq!(
        doc["operations"]["double.dead_letter"]["channel"]["$ref"],
        "#/channels/math.dead"
    );
    assert_eq!(double["x-ruststream"]["max_attempts"], 3);
    // The pattern, with its queue group as the NATS binding.
    let audit = &doc["channels"]["audit._any_"];
    assert_eq!(audit["address"], "audit.*");
    let operation = &doc["operations"]["audit"];
    assert_eq!(operation["bindings"]["nats"]["queue"], "auditors");
    // Without a declaration, the payload's schema is traced from its `Deserialize` impl (no
    // descriptions: serde does not know the doc comments).
    let message = &audit["messages"]["audit.in"];
    assert_eq!(message["title"], "Number");
    assert_eq!(
        message["payload"],
        json!({
            "type": "object",
            "properties": {"value": {"type": "integer", "format": "int64"}},
            "required": ["value"],
        })
    );
    // A reply type's own `JsonSchema` wins over the trace, through `#[derive(Outgoing)]`.
    let tripled = &doc["channels"]["triple.reply"]["messages"]["triple.out"]["payload"];
    assert_eq!(
        tripled["properties"]["value"]["description"],
        "Three times the number."
    );
    // A payload no schema describes (any JSON) says which type it is, and why.
    let loose = &doc["channels"]["math.loose"]["messages"]["loose.in"];
    assert_eq!(loose["title"], "Value");
    assert!(loose.get("payload").is_none(), "{loose}");
    let about = loose["description"].as_str().expect("a description");
    assert!(about.contains("serde_json::value::Value"), "{about}");
    assert!(about.contains(".payload_schema::<T>()"), "{about}");
    // Replies and outputs are named by the Rust type: declared at the mount site, or the
    // `#[derive(Outgoing)]` type.
    assert_eq!(
        doc["channels"]["double.reply"]["messages"]["double.out"]["title"],
        "Doubled"
    );
    assert_eq!(
        doc["channels"]["math.tripled"]["messages"]["triple.out"]["title"],
        "Tripled"
    );
    assert_eq!(
        doc["channels"]["triple.reply"]["messages"]["triple.out"]["title"],
        "Tripled"
    );
    let text = doc.to_string();
    assert!(!text.contains("the handler's value"), "{text}");
    // A handler publishing two types: each subject's message is its own type, with its schema.
    let fanout = |channel: &str| &doc["channels"][channel]["messages"]["fanout.out"];
    assert_eq!(fanout("math.doubled")["title"], "Doubled");
    assert_eq!(fanout("math.audited")["title"], "Audited");
    assert_eq!(
        fanout("math.audited")["payload"]["properties"]["value"]["type"],
        "integer"
    );
}

mod described {
    use ruststream::asyncapi::{Contact, ExternalDocs, License, SecurityScheme, Tag};
    use ruststream_nats::prelude::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    pub struct Order {
        pub id: u64,
    }

    #[subscriber("orders.placed")]
    pub async fn placed(o: &Order) -> HandlerOutcome {
        if o.id == 0 {
            HandlerOutcome::drop()
        } else {
            HandlerOutcome::ack()
        }
    }

    pub fn info() -> AppInfo {
        AppInfo::new("orders", "2.0.0")
            .description("Takes orders **as they are placed**.")
            .contact(
                Contact::new("Orders team")
                    .url("https://example.com/teams/orders")
                    .email("orders@example.com"),
            )
            .license(License::new("Apache-2.0").url("https://www.apache.org/licenses/LICENSE-2.0"))
            .tag("orders")
            .tag(Tag::new("retail").description("What the shop sells"))
            .external_docs(
                ExternalDocs::new("https://docs.example.com/orders").description("The runbook"),
            )
    }

    /// Two brokers: one whose credentials are in its URL and who presents a client
    /// certificate, one on a client connected elsewhere whose way the app declares.
    pub fn app() -> impl App<State = ()> {
        RustStream::new(info())
            .with_broker(
                NatsBroker::new("tls://orders:s3cret-pw@nats.internal:4222")
                    .client_certificate("/etc/orders/client.pem", "/etc/orders/client.key")
                    .security_scheme(SecurityScheme::UserPassword),
                |b| {
                    b.include(placed)
                        .max_attempts(nonzero!(3))
                        .header_schema("x-tenant", "the shop the order was placed in");
                },
            )
            .with_broker(
                NatsBroker::new("nats://other.internal:4222")
                    .token("tok-SECRET-123")
                    .security_scheme(SecurityScheme::custom(
                        "sso",
                        serde_json::json!({"type": "openIdConnect",
                            "openIdConnectUrl": "https://sso.example.com/.well-known/openid-configuration"}),
                    )),
                |_| {},
            )
    }
}

#[test]
fn info_metadata_security_schemes_and_headers_are_described() {
    let doc = document(&described::app());
    assert_valid("orders", &doc);
    let info = &doc["info"];
    assert_eq!(info["title"], "orders");
    assert_eq!(info["version"], "2.0.0");
    assert_eq!(info["description"], "Takes orders **as they are placed**.");
    assert_eq!(
        info["contact"],
        json!({"name": "Orders team", "url": "https://example.com/teams/orders", "email": "orders@example.com"})
    );
    assert_eq!(
        info["license"],
        json!({"name": "Apache-2.0", "url": "https://www.apache.org/licenses/LICENSE-2.0"})
    );
    assert_eq!(
        info["tags"],
        json!([{"name": "orders"}, {"name": "retail", "description": "What the shop sells"}])
    );
    assert_eq!(
        info["externalDocs"],
        json!({"url": "https://docs.example.com/orders", "description": "The runbook"})
    );
    // Each server references the ways its client authenticates: derived from the
    // configuration, then declared, each once.
    let refs = |server: &str| -> Vec<String> {
        doc["servers"][server]["security"]
            .as_array()
            .expect("security")
            .iter()
            .map(|r| r["$ref"].as_str().expect("a reference").to_owned())
            .collect()
    };
    assert_eq!(
        refs("nats"),
        [
            "#/components/securitySchemes/nats_user_password",
            "#/components/securitySchemes/nats_tls_client_certificate",
        ]
    );
    assert_eq!(
        refs("nats1"),
        [
            "#/components/securitySchemes/nats_token",
            "#/components/securitySchemes/sso",
        ]
    );
    let schemes = &doc["components"]["securitySchemes"];
    assert_eq!(schemes["nats_user_password"]["type"], "userPassword");
    assert_eq!(schemes["nats_tls_client_certificate"]["type"], "X509");
    assert_eq!(schemes["nats_token"]["type"], "apiKey");
    assert_eq!(schemes["sso"]["type"], "openIdConnect");
    assert_eq!(schemes.as_object().expect("schemes").len(), 4);
    // Never a secret.
    let text = doc.to_string();
    for secret in ["s3cret-pw", "tok-SECRET-123", "client.key"] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
    // Headers: what the runtime reads on the input, the retry count on a capped Core
    // registration's input and its retry copies.
    let input = &doc["channels"]["orders.placed"]["messages"]["placed.in"]["headers"];
    for header in [
        "content-type",
        "x-correlation-id",
        "traceparent",
        "x-ruststream-retry-count",
    ] {
        assert_eq!(
            input["properties"][header]["type"], "string",
            "{header}: {input}"
        );
    }
    // A header declared at the mount site, on the input and on its copies as they arrived.
    assert_eq!(
        input["properties"]["x-tenant"]["description"],
        "the shop the order was placed in"
    );
    let copy = &doc["channels"]["orders.placed"]["messages"]["placed.retry_copy"]["headers"];
    assert!(
        copy["properties"]["x-ruststream-retry-count"].is_object(),
        "{copy}"
    );
    assert!(copy["properties"]["x-tenant"].is_object(), "{copy}");
    // The trace context header is checked as W3C writes it.
    let traceparent =
        jsonschema::validator_for(&input["properties"]["traceparent"]).expect("a JSON Schema");
    assert!(traceparent.is_valid(&json!(
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    )));
    assert!(!traceparent.is_valid(&json!("not a trace")));
    // The YAML form says the same.
    let back: Value = serde_norway::from_str(&to_yaml(&doc).expect("YAML")).expect("YAML parses");
    assert_eq!(back, doc);
}

#[test]
fn a_bad_security_scheme_or_tag_fails_the_official_schema() {
    // The validator checks the new parts too: a scheme AsyncAPI does not know, and a tag
    // without a name, are refused.
    let mut doc = document(&described::app());
    doc["components"]["securitySchemes"]["sso"] = json!({"type": "carrier-pigeon"});
    assert!(!validator().is_valid(&doc));
    let mut doc = document(&described::app());
    doc["info"]["tags"] = json!([{"description": "a tag without a name"}]);
    assert!(!validator().is_valid(&doc));
}
