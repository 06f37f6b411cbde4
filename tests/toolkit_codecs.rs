//! Codecs (issue 15): JSON by default, MessagePack and CBOR chosen per registration, broker or
//! app; the `content-type` header written on outputs and checked on inputs (a mismatch is
//! undecodable and goes to the dead letter); raw `&[u8]` / `&Bytes` payloads never decoded; a
//! codec of the service's own (issue 42, `mod custom`).
//! In process under a paused clock, and live on a real nats-server.

mod support;

use std::sync::Mutex;

use bytes::Bytes;
use ruststream::codec::{CONTENT_TYPE, Codec, Format, Proto};
use ruststream::{AppInfo, HandlerOutcome, Headers, Outgoing, RustStream, subscriber};
use ruststream_nats::NatsBroker;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Order {
    id: u64,
    note: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "receipts.made")]
struct Receipt {
    id: u64,
    note: String,
}

#[subscriber("orders.json", reply)]
async fn json_receipt(order: &Order) -> Result<Receipt, HandlerOutcome> {
    Ok(Receipt {
        id: order.id,
        note: order.note.clone(),
    })
}

#[subscriber("orders.msgpack", reply)]
async fn msgpack_receipt(order: &Order) -> Result<Receipt, HandlerOutcome> {
    Ok(Receipt {
        id: order.id,
        note: order.note.clone(),
    })
}

#[subscriber("orders.cbor", reply)]
async fn cbor_receipt(order: &Order) -> Result<Receipt, HandlerOutcome> {
    Ok(Receipt {
        id: order.id,
        note: order.note.clone(),
    })
}

#[derive(Clone, PartialEq, prost::Message)]
struct PbOrder {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(string, tag = "2")]
    note: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct PbReceipt {
    #[prost(uint64, tag = "1")]
    id: u64,
}

/// Protocol Buffers in and out; the publish error is the handler's own error type.
#[subscriber("orders.proto")]
async fn proto_receipt(
    order: &Proto<PbOrder>,
    ctx: &mut ruststream::Context<'_>,
) -> Result<(), ruststream::PublishError> {
    ctx.publish_to("receipts.proto", &Proto(PbReceipt { id: order.id }))
        .await
}

fn pb_order(id: u64) -> Bytes {
    Format::Protobuf
        .encode(&Proto(PbOrder {
            id,
            note: "ü".into(),
        }))
        .unwrap()
}

fn pb_receipt(payload: &[u8]) -> u64 {
    Format::Protobuf
        .decode::<Proto<PbReceipt>>(payload)
        .unwrap()
        .id
}

static RAW: Mutex<Vec<(String, Vec<u8>)>> = Mutex::new(Vec::new());

#[subscriber("raw.slice")]
async fn raw_slice(payload: &[u8]) -> HandlerOutcome {
    RAW.lock().unwrap().push(("slice".into(), payload.to_vec()));
    HandlerOutcome::ack()
}

#[subscriber("raw.bytes")]
async fn raw_bytes(payload: &Bytes) -> HandlerOutcome {
    RAW.lock().unwrap().push(("bytes".into(), payload.to_vec()));
    HandlerOutcome::ack()
}

fn raw_seen(kind: &str) -> Vec<Vec<u8>> {
    RAW.lock()
        .unwrap()
        .iter()
        .filter(|(k, _)| k == kind)
        .map(|(_, p)| p.clone())
        .collect()
}

/// JSON by default; MessagePack chosen at the mount site; CBOR for the whole broker.
fn app<B: ruststream::Broker>(broker: B) -> impl ruststream::App<State = ()> {
    RustStream::new(AppInfo::new("codecs", "0.1.0")).with_broker(broker, |b| {
        b.codec(Format::Cbor);
        b.include(json_receipt)
            .codec(Format::Json)
            .dead_letter("dead.orders");
        b.include(msgpack_receipt)
            .codec(Format::MessagePack)
            .dead_letter("dead.orders");
        b.include(cbor_receipt).dead_letter("dead.orders");
        b.include(raw_slice);
        b.include(raw_bytes);
        b.include(proto_receipt)
            .codec(Format::Protobuf)
            .dead_letter("dead.orders");
    })
}

fn order(id: u64) -> Order {
    Order {
        id,
        note: "ünïcode & more".into(),
    }
}

fn typed(format: Format) -> Headers {
    let mut h = Headers::new();
    h.insert(CONTENT_TYPE, format.content_type());
    h
}

/// What came out on `receipts.made`, decoded by the format its header names.
fn receipts(messages: &[(Headers, Bytes)]) -> Vec<(Format, Receipt)> {
    messages
        .iter()
        .map(|(headers, payload)| {
            let format = headers
                .get(CONTENT_TYPE)
                .and_then(Format::from_content_type)
                .expect("every output names its content-type");
            (format, format.decode(payload).expect("the output decodes"))
        })
        .collect()
}

fn receipt(id: u64) -> Receipt {
    Receipt {
        id,
        note: order(id).note,
    }
}

#[test]
fn content_types_name_the_formats() {
    for f in [Format::Json, Format::MessagePack, Format::Cbor] {
        assert_eq!(Format::from_content_type(f.content_type()), Some(f));
        let bytes = f.encode(&order(3)).unwrap();
        assert_eq!(f.decode::<Order>(&bytes).unwrap(), order(3));
    }
    assert_eq!(
        Format::from_content_type("Application/JSON; charset=utf-8"),
        Some(Format::Json)
    );
    assert_eq!(Format::from_content_type("text/plain"), None);
    // Protocol Buffers: `Proto<T>` only; a serde struct is refused with the fix.
    let pb = Format::Protobuf
        .encode(&Proto(PbOrder {
            id: 3,
            note: "x".into(),
        }))
        .unwrap();
    assert_eq!(
        Format::Protobuf.decode::<Proto<PbOrder>>(&pb).unwrap().0,
        PbOrder {
            id: 3,
            note: "x".into()
        }
    );
    let refused = Format::Protobuf.encode(&order(3)).unwrap_err().to_string();
    assert!(refused.contains("`Proto(message)`"), "{refused}");
    let refused = Format::Protobuf
        .decode::<Order>(&pb)
        .unwrap_err()
        .to_string();
    assert!(refused.contains("`Proto<T>`"), "{refused}");
    assert_eq!(
        Format::from_content_type("application/protobuf"),
        Some(Format::Protobuf)
    );
    assert!(Format::Json.accepts(None).is_ok());
    let err = Format::Cbor
        .accepts(Some("application/json"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("application/json") && err.contains("application/cbor"),
        "{err}"
    );
}

#[test]
fn describe_shows_each_registrations_codec() {
    let app = app(NatsBroker::new("nats://127.0.0.1:4222"));
    let text = ruststream::app::cli::describe(&app);
    assert!(
        text.contains("json_receipt: codec application/json"),
        "{text}"
    );
    assert!(
        text.contains("msgpack_receipt: codec application/msgpack"),
        "{text}"
    );
    assert!(
        text.contains("cbor_receipt: codec application/cbor"),
        "{text}"
    );
    assert!(
        !text.contains("raw_slice: codec application/json"),
        "{text}"
    );
}

#[test]
fn the_asyncapi_document_names_each_registrations_content_type() {
    let doc = ruststream::asyncapi::document(&app(NatsBroker::new("nats://127.0.0.1:4222")));
    let content_type = |registration: &str| {
        let operation = &doc["operations"][registration];
        let reference = operation["messages"][0]["$ref"]
            .as_str()
            .expect("a message");
        let path: Vec<&str> = reference.trim_start_matches("#/").split('/').collect();
        let message = path.iter().fold(&doc, |v, key| &v[*key]);
        message["contentType"].as_str().map(str::to_owned)
    };
    assert_eq!(
        content_type("json_receipt").as_deref(),
        Some("application/json")
    );
    assert_eq!(
        content_type("msgpack_receipt").as_deref(),
        Some("application/msgpack")
    );
    assert_eq!(
        content_type("cbor_receipt").as_deref(),
        Some("application/cbor")
    );
    assert_eq!(
        content_type("raw_slice").as_deref(),
        Some("application/octet-stream")
    );
    assert_eq!(
        content_type("raw_bytes").as_deref(),
        Some("application/octet-stream")
    );
}

#[test]
fn the_app_codec_applies_where_broker_and_mount_site_chose_none() {
    use ruststream::App as _;
    let app = RustStream::new(AppInfo::new("codecs", "0.1.0"))
        .with_broker(NatsBroker::new("nats://127.0.0.1:4222"), |b| {
            b.include(json_receipt);
            b.include(msgpack_receipt).codec(Format::MessagePack);
        })
        .codec(Format::Cbor);
    let codecs: Vec<_> = app
        .registrations()
        .into_iter()
        .map(|r| (r.name, r.policy.codec))
        .collect();
    assert_eq!(
        codecs,
        [
            ("json_receipt".to_owned(), Some(Format::Cbor)),
            ("msgpack_receipt".to_owned(), Some(Format::MessagePack)),
        ]
    );
}

mod in_process {
    use super::*;
    use ruststream_nats::testing::TestApp;

    fn outputs(t: &TestApp, subject: &str) -> Vec<(Headers, Bytes)> {
        t.nats()
            .published(subject)
            .into_iter()
            .map(|m| (m.headers, m.payload))
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn each_registration_decodes_and_replies_in_its_format() {
        let t = TestApp::start(app(NatsBroker::new("nats://unused:4222")))
            .await
            .expect("the app starts");
        for (i, (subject, format)) in [
            ("orders.json", Format::Json),
            ("orders.msgpack", Format::MessagePack),
            ("orders.cbor", Format::Cbor),
        ]
        .into_iter()
        .enumerate()
        {
            let payload = format.encode(&order(i as u64)).unwrap();
            t.publish_raw(subject, typed(format), payload)
                .await
                .unwrap();
        }
        // A message that names no content-type is taken as the registration's format.
        let untyped = Format::MessagePack.encode(&order(7)).unwrap();
        t.publish_raw("orders.msgpack", Headers::new(), untyped)
            .await
            .unwrap();
        t.settle().await;
        let mut got = receipts(&outputs(&t, "receipts.made"));
        got.sort_by_key(|(_, r)| r.id);
        assert_eq!(
            got,
            [
                (Format::Json, receipt(0)),
                (Format::MessagePack, receipt(1)),
                (Format::Cbor, receipt(2)),
                (Format::MessagePack, receipt(7)),
            ]
        );
        assert!(t.dead_letters("dead.orders").is_empty());
        t.shutdown().await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn protocol_buffers_in_and_out() {
        let t = TestApp::start(app(NatsBroker::new("nats://unused:4222")))
            .await
            .expect("the app starts");
        t.publish_raw("orders.proto", typed(Format::Protobuf), pb_order(5))
            .await
            .unwrap();
        t.settle().await;
        let out = outputs(&t, "receipts.proto");
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0.get(CONTENT_TYPE), Some("application/protobuf"));
        assert_eq!(pb_receipt(&out[0].1), 5);
        t.shutdown().await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_content_type_mismatch_is_undecodable_and_dead_lettered_as_it_arrived() {
        let t = TestApp::start(app(NatsBroker::new("nats://unused:4222")))
            .await
            .expect("the app starts");
        let json = Format::Json.encode(&order(4)).unwrap();
        t.publish_raw("orders.msgpack", typed(Format::Json), json.clone())
            .await
            .unwrap();
        t.settle().await;
        let failures = t.decode_failures("msgpack_receipt");
        assert_eq!(failures.len(), 1);
        assert!(
            failures[0]
                .error
                .contains("content-type `application/json`"),
            "{}",
            failures[0].error
        );
        let dead = t.dead_letters("dead.orders");
        assert_eq!(dead.len(), 1);
        assert_eq!(dead[0].payload, json);
        assert_eq!(dead[0].headers.get(CONTENT_TYPE), Some("application/json"));
        assert!(t.nats().published("receipts.made").is_empty());
        t.shutdown().await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn raw_payloads_reach_the_handler_undecoded() {
        let t = TestApp::start(app(NatsBroker::new("nats://unused:4222")))
            .await
            .expect("the app starts");
        let bytes = vec![0xff, 0x00, b'{', 0x80];
        t.publish_raw("raw.slice", typed(Format::Json), bytes.clone())
            .await
            .unwrap();
        t.publish_raw("raw.bytes", Headers::new(), bytes.clone())
            .await
            .unwrap();
        t.settle().await;
        assert_eq!(t.outcomes("raw_slice"), [HandlerOutcome::Ack]);
        assert_eq!(t.outcomes("raw_bytes"), [HandlerOutcome::Ack]);
        assert!(raw_seen("slice").contains(&bytes));
        assert!(raw_seen("bytes").contains(&bytes));
        t.shutdown().await.unwrap();
    }
}

mod live {
    use super::support::nats::{PATIENCE, Recorder, live_server};
    use super::*;
    use ruststream::App as _;
    use ruststream_test_server::client::wait_until;

    fn headers_of(m: &async_nats::Message) -> Headers {
        let mut h = Headers::new();
        if let Some(map) = &m.headers {
            for (name, values) in map.iter() {
                for v in values {
                    h.append(name.to_string(), v.as_str());
                }
            }
        }
        h
    }

    async fn publish(
        client: &async_nats::Client,
        subject: &str,
        format: Option<Format>,
        payload: Bytes,
    ) {
        let mut headers = async_nats::HeaderMap::new();
        if let Some(f) = format {
            headers.insert(CONTENT_TYPE, f.content_type());
        }
        client
            .publish_with_headers(subject.to_owned(), headers, payload)
            .await
            .expect("the test publishes");
        client.flush().await.expect("the test flushes");
    }

    #[tokio::test]
    async fn each_registration_decodes_and_replies_in_its_format_on_the_wire() {
        let (server, client) = live_server().await;
        let wire = Recorder::start(&client, ["receipts.made", "dead.orders"]).await;
        let running = app(NatsBroker::new(server.url()))
            .start(ruststream::Env::new())
            .await
            .expect("the app starts");
        for (i, (subject, format)) in [
            ("orders.json", Format::Json),
            ("orders.msgpack", Format::MessagePack),
            ("orders.cbor", Format::Cbor),
        ]
        .into_iter()
        .enumerate()
        {
            let payload = format.encode(&order(i as u64)).unwrap();
            publish(&client, subject, Some(format), payload).await;
        }
        // A mismatch: JSON said, to the MessagePack registration.
        let json = Format::Json.encode(&order(9)).unwrap();
        publish(&client, "orders.msgpack", Some(Format::Json), json.clone()).await;
        let seen = wire.until(4).await;
        let outs: Vec<_> = seen
            .iter()
            .filter(|m| m.subject.as_str() == "receipts.made")
            .map(|m| (headers_of(m), m.payload.clone()))
            .collect();
        let mut got = receipts(&outs);
        got.sort_by_key(|(_, r)| r.id);
        assert_eq!(
            got,
            [
                (Format::Json, receipt(0)),
                (Format::MessagePack, receipt(1)),
                (Format::Cbor, receipt(2)),
            ]
        );
        let dead: Vec<_> = seen
            .iter()
            .filter(|m| m.subject.as_str() == "dead.orders")
            .collect();
        assert_eq!(dead.len(), 1, "the mismatch went to the dead letter");
        assert_eq!(dead[0].payload, json);
        assert_eq!(
            headers_of(dead[0]).get(CONTENT_TYPE),
            Some("application/json")
        );
        running.stop().await.expect("a clean stop");
    }

    #[tokio::test]
    async fn protocol_buffers_in_and_out_on_the_wire() {
        let (server, client) = live_server().await;
        let wire = Recorder::start(&client, ["receipts.proto"]).await;
        let running = app(NatsBroker::new(server.url()))
            .start(ruststream::Env::new())
            .await
            .expect("the app starts");
        publish(&client, "orders.proto", Some(Format::Protobuf), pb_order(6)).await;
        let seen = wire.until(1).await;
        assert_eq!(
            headers_of(&seen[0]).get(CONTENT_TYPE),
            Some("application/protobuf")
        );
        assert_eq!(pb_receipt(&seen[0].payload), 6);
        running.stop().await.expect("a clean stop");
    }

    #[tokio::test]
    async fn raw_payloads_reach_the_handler_undecoded_on_the_wire() {
        let (server, client) = live_server().await;
        let running = app(NatsBroker::new(server.url()))
            .start(ruststream::Env::new())
            .await
            .expect("the app starts");
        let bytes = Bytes::from_static(&[0xfe, 0x01, b'}', 0x7f, 0x00]);
        publish(&client, "raw.slice", Some(Format::Cbor), bytes.clone()).await;
        publish(&client, "raw.bytes", None, bytes.clone()).await;
        let expected = bytes.to_vec();
        wait_until(PATIENCE, "both raw handlers saw the bytes", || {
            raw_seen("slice").contains(&expected) && raw_seen("bytes").contains(&expected)
        })
        .await;
        running.stop().await.expect("a clean stop");
    }
}

/// A codec of the service's own (issue 42): a company envelope (a version byte, then JSON, named
/// `application/vnd.acme+json`) chosen for one registration with `.codec(ACME)` and for one
/// outgoing type with `#[outgoing(codec = ACME)]`. Its bytes and `content-type` on what the
/// server stores, its content type checked on inputs, an undecodable envelope dead-lettered as
/// it arrived and never retried, and the AsyncAPI document naming its content type.
mod custom {
    use super::*;
    use ruststream::codec::{DecodeError, EncodeError, Json};
    use ruststream_nats::JetStreamSubject;
    use serde::de::DeserializeOwned;

    /// The company envelope: version byte 1, then the value as JSON.
    struct Acme;

    impl Codec for Acme {
        fn decode<T: DeserializeOwned + 'static>(&self, bytes: &[u8]) -> Result<T, DecodeError> {
            match bytes.split_first() {
                Some((1, json)) => Json.decode(json),
                Some((version, _)) => Err(DecodeError::new(
                    std::any::type_name::<T>(),
                    format!("an acme envelope of version {version}; this service reads version 1"),
                )),
                None => Err(DecodeError::new(
                    std::any::type_name::<T>(),
                    "an empty payload is no acme envelope",
                )),
            }
        }

        fn encode<T: Serialize + ?Sized>(&self, value: &T) -> Result<Bytes, EncodeError> {
            let mut out = vec![1];
            out.extend_from_slice(&Json.encode(value)?);
            Ok(Bytes::from(out))
        }

        fn content_type(&self) -> &'static str {
            "application/vnd.acme+json"
        }
    }

    const ACME: Format = Format::custom(&Acme);
    const ACME_TYPE: &str = "application/vnd.acme+json";

    /// Always published in the envelope, whatever registration publishes it.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Outgoing)]
    #[outgoing(name = "receipts.audited", codec = ACME)]
    struct Audited {
        id: u64,
    }

    /// Reads envelopes (chosen at the mount site) and replies in the envelope.
    #[subscriber(JetStreamSubject::new("orders.placed", "ORDERS").durable("placed"), reply)]
    async fn placed(order: &Order) -> Result<Receipt, HandlerOutcome> {
        Ok(receipt(order.id))
    }

    /// Reads JSON (the default); its output type says the envelope.
    #[subscriber("audits.requested", reply)]
    async fn audit(order: &Order) -> Result<Audited, HandlerOutcome> {
        Ok(Audited { id: order.id })
    }

    /// Raw bytes, the built-in `Raw` codec going through the same trait.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Outgoing)]
    #[outgoing(name = "receipts.thumbnail", codec = Format::Raw)]
    struct Thumbnail(Vec<u8>);

    #[derive(Debug, Deserialize)]
    struct Image(Vec<u8>);

    /// Takes the payload's bytes (the registration's `Raw`), answers bytes (the type's).
    #[subscriber("images.uploaded", reply)]
    async fn thumbnail(image: &Image) -> Result<Thumbnail, HandlerOutcome> {
        Ok(Thumbnail(image.0.iter().rev().copied().collect()))
    }

    const IMAGE: &[u8] = &[0xff, 0x00, b'{', 0x80];

    fn acme_app<B: ruststream::Broker>(broker: B) -> impl ruststream::App<State = ()> {
        RustStream::new(AppInfo::new("acme", "0.1.0")).with_broker(broker, |b| {
            b.include(placed).codec(ACME).dead_letter("dead.orders");
            b.include(audit);
            b.include(thumbnail).codec(Format::Raw);
        })
    }

    /// `value` in the envelope, as the wire carries it.
    fn envelope<T: Serialize>(value: &T) -> Vec<u8> {
        let mut out = vec![1];
        out.extend(serde_json::to_vec(value).unwrap());
        out
    }

    #[test]
    fn the_codec_is_the_registrations_format_everywhere_it_is_read() {
        use ruststream::App as _;
        let app = acme_app(NatsBroker::new("nats://127.0.0.1:4222"));
        let registrations = app.registrations();
        let codec_of = |name: &str| {
            registrations
                .iter()
                .find(|r| r.name == name)
                .map(|r| r.policy.codec)
        };
        assert_eq!(codec_of("placed"), Some(Some(ACME)));
        assert_eq!(codec_of("audit"), Some(None));
        let text = ruststream::app::cli::describe(&app);
        assert!(
            text.contains("placed: codec application/vnd.acme+json"),
            "{text}"
        );
        assert_eq!(Audited::codec(), Some(ACME));
        assert_eq!(
            &Audited { id: 3 }.encode().unwrap()[..],
            envelope(&Audited { id: 3 })
        );
        assert_eq!(Receipt::codec(), None);
        // Chosen, never guessed from a header.
        assert_eq!(Format::from_content_type(ACME_TYPE), None);
        let err = ACME
            .accepts(Some("application/json"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("application/json") && err.contains(ACME_TYPE),
            "{err}"
        );
        assert!(ACME.accepts(Some("Application/VND.acme+JSON; v=1")).is_ok());
    }

    #[test]
    fn the_asyncapi_document_names_the_codecs_content_type() {
        let doc =
            ruststream::asyncapi::document(&acme_app(NatsBroker::new("nats://127.0.0.1:4222")));
        let resolve = |reference: &serde_json::Value| {
            let path: Vec<&str> = reference
                .as_str()
                .expect("a reference")
                .trim_start_matches("#/")
                .split('/')
                .collect();
            path.iter().fold(&doc, |v, key| &v[*key]).clone()
        };
        let content_type = |operation: &str| {
            let message = resolve(&doc["operations"][operation]["messages"][0]["$ref"]);
            message["contentType"].as_str().map(str::to_owned)
        };
        assert_eq!(content_type("placed").as_deref(), Some(ACME_TYPE));
        assert_eq!(
            content_type("placed.publish.receipts.made").as_deref(),
            Some(ACME_TYPE)
        );
        assert_eq!(
            content_type("placed.dead_letter").as_deref(),
            Some(ACME_TYPE)
        );
        // A JSON registration whose output type names the envelope.
        assert_eq!(content_type("audit").as_deref(), Some("application/json"));
        assert_eq!(
            content_type("audit.publish.receipts.audited").as_deref(),
            Some(ACME_TYPE)
        );
        let reply = resolve(&doc["operations"]["audit"]["reply"]["messages"][0]["$ref"]);
        assert_eq!(reply["contentType"], ACME_TYPE);
        // Raw bytes in and out.
        for operation in ["thumbnail", "thumbnail.publish.receipts.thumbnail"] {
            assert_eq!(
                content_type(operation).as_deref(),
                Some("application/octet-stream"),
                "{operation}"
            );
        }
    }

    mod in_process {
        use super::*;
        use ruststream_nats::testing::TestApp;

        async fn started() -> TestApp {
            TestApp::start(acme_app(NatsBroker::new("nats://unused:4222")))
                .await
                .expect("the app starts")
        }

        #[tokio::test(start_paused = true)]
        async fn envelopes_in_and_out_with_their_content_type() {
            let t = started().await;
            t.publish_raw("orders.placed", typed(ACME), envelope(&order(1)))
                .await
                .unwrap();
            // No content-type: taken as the registration's format.
            t.publish_raw("orders.placed", Headers::new(), envelope(&order(2)))
                .await
                .unwrap();
            t.publish_raw(
                "audits.requested",
                typed(Format::Json),
                serde_json::to_vec(&order(3)).unwrap(),
            )
            .await
            .unwrap();
            t.publish_raw("images.uploaded", Headers::new(), IMAGE)
                .await
                .unwrap();
            t.settle().await;
            let thumbnails = t.nats().published("receipts.thumbnail");
            assert_eq!(thumbnails.len(), 1);
            assert_eq!(
                thumbnails[0].headers.get(CONTENT_TYPE),
                Some("application/octet-stream")
            );
            assert_eq!(&thumbnails[0].payload[..], [0x80, b'{', 0x00, 0xff]);
            let made = t.nats().published("receipts.made");
            assert_eq!(made.len(), 2);
            for (m, id) in made.iter().zip([1, 2]) {
                assert_eq!(m.headers.get(CONTENT_TYPE), Some(ACME_TYPE));
                assert_eq!(&m.payload[..], envelope(&receipt(id)));
            }
            let audited = t.nats().published("receipts.audited");
            assert_eq!(audited.len(), 1);
            assert_eq!(audited[0].headers.get(CONTENT_TYPE), Some(ACME_TYPE));
            assert_eq!(&audited[0].payload[..], envelope(&Audited { id: 3 }));
            assert_eq!(
                t.nats().acknowledgements("ORDERS", "placed"),
                ["+ACK", "+ACK"]
            );
            t.shutdown().await.unwrap();
        }

        #[tokio::test(start_paused = true)]
        async fn an_undecodable_envelope_is_dead_lettered_as_it_arrived_and_never_retried() {
            let t = started().await;
            let version_2 = [&[2u8][..], &serde_json::to_vec(&order(4)).unwrap()].concat();
            t.publish_raw("orders.placed", typed(ACME), version_2.clone())
                .await
                .unwrap();
            let json = serde_json::to_vec(&order(5)).unwrap();
            t.publish_raw("orders.placed", typed(Format::Json), json.clone())
                .await
                .unwrap();
            t.settle().await;
            let failures = t.decode_failures("placed");
            assert_eq!(failures.len(), 2);
            assert!(
                failures[0].error.contains("version 2")
                    && failures[0].error.contains(std::any::type_name::<Order>()),
                "{}",
                failures[0].error
            );
            assert!(
                failures[1]
                    .error
                    .contains("content-type `application/json`")
                    && failures[1].error.contains(ACME_TYPE),
                "{}",
                failures[1].error
            );
            let dead = t.dead_letters("dead.orders");
            assert_eq!(dead.len(), 2);
            assert_eq!(&dead[0].payload[..], version_2);
            assert_eq!(dead[0].headers.get(CONTENT_TYPE), Some(ACME_TYPE));
            assert_eq!(&dead[1].payload[..], json);
            assert_eq!(dead[1].headers.get(CONTENT_TYPE), Some("application/json"));
            assert_eq!(
                t.nats().acknowledgements("ORDERS", "placed"),
                ["+TERM", "+TERM"]
            );
            assert!(t.nats().published("receipts.made").is_empty());
            assert!(t.outcomes("placed").is_empty(), "the handler never ran");
            t.shutdown().await.unwrap();
        }
    }

    mod live {
        use super::*;
        use crate::support::nats::{
            PATIENCE, consumer_until, create_stream, jetstream_server, publish_core,
            publish_stored_with,
        };
        use ruststream::App as _;
        use ruststream_test_server::client::{eventually, stream_messages};

        #[tokio::test]
        async fn envelopes_are_stored_with_their_content_type_and_bad_ones_dead_lettered() {
            let (server, client, js) = jetstream_server().await;
            create_stream(&js, "RECEIPTS", ["receipts.>"]).await;
            create_stream(&js, "DEAD", ["dead.>"]).await;
            let running = acme_app(NatsBroker::new(server.url()))
                .start(ruststream::Env::new())
                .await
                .expect("the app starts");

            publish_stored_with(
                &js,
                "orders.placed",
                &[(CONTENT_TYPE, ACME_TYPE)],
                envelope(&order(1)),
            )
            .await;
            publish_core(
                &client,
                "audits.requested",
                &[],
                serde_json::to_vec(&order(2)).unwrap(),
            )
            .await;
            publish_core(&client, "images.uploaded", &[], IMAGE).await;
            // Outside a handler: the type's codec and its content type too.
            ruststream_nats::NatsClient::of(&running)
                .expect("a NATS app")
                .publish(&Audited { id: 7 })
                .await
                .expect("stored");
            let version_2 = [&[2u8][..], &serde_json::to_vec(&order(3)).unwrap()].concat();
            let bad = publish_stored_with(
                &js,
                "orders.placed",
                &[(CONTENT_TYPE, ACME_TYPE)],
                &version_2,
            )
            .await;

            // What the server stored: the envelope's bytes, its content type in the header.
            let receipts = eventually(PATIENCE, "the four outputs stored", || async {
                let stored = stream_messages(&js, "RECEIPTS").await;
                (stored.len() >= 4).then_some(stored)
            })
            .await;
            let mut by_subject: Vec<_> = receipts
                .iter()
                .map(|m| {
                    (
                        m.subject.to_string(),
                        m.headers.get(CONTENT_TYPE).map(|v| v.as_str().to_owned()),
                        m.payload.to_vec(),
                    )
                })
                .collect();
            by_subject.sort();
            assert_eq!(
                by_subject,
                [
                    (
                        "receipts.audited".to_owned(),
                        Some(ACME_TYPE.to_owned()),
                        envelope(&Audited { id: 2 })
                    ),
                    (
                        "receipts.audited".to_owned(),
                        Some(ACME_TYPE.to_owned()),
                        envelope(&Audited { id: 7 })
                    ),
                    (
                        "receipts.made".to_owned(),
                        Some(ACME_TYPE.to_owned()),
                        envelope(&receipt(1))
                    ),
                    (
                        "receipts.thumbnail".to_owned(),
                        Some("application/octet-stream".to_owned()),
                        vec![0x80, b'{', 0x00, 0xff]
                    ),
                ]
            );

            // The undecodable envelope: stored on the dead-letter subject as it arrived, and the
            // original ended (+TERM), not redelivered.
            let dead = eventually(PATIENCE, "the dead letter stored", || async {
                let stored = stream_messages(&js, "DEAD").await;
                (!stored.is_empty()).then_some(stored)
            })
            .await;
            assert_eq!(dead.len(), 1);
            assert_eq!(&dead[0].payload[..], &version_2[..]);
            assert_eq!(
                dead[0].headers.get(CONTENT_TYPE).map(|v| v.as_str()),
                Some(ACME_TYPE)
            );
            let info = consumer_until(&js, "ORDERS", "placed", "both settled", |i| {
                i.ack_floor.stream_sequence >= bad && i.num_ack_pending == 0
            })
            .await;
            assert_eq!(info.num_redelivered, 0, "never retried");
            running.stop().await.expect("a clean stop");
        }
    }
}
