//! The app's request handlers as a NATS micro service: `$SRV.PING`, `$SRV.INFO` and
//! `$SRV.STATS` asked as `nats micro ls/info/stats` ask them, each response checked against
//! the protocol's published JSON Schemas (`tests/micro/`) and the stats against what the
//! handlers did. Live on a real nats-server (the asker a plain async-nats client), and in
//! process through `TestApp`.

mod support;

use std::time::Duration;

use futures::StreamExt as _;
use ruststream::Router;
use ruststream_nats::prelude::*;
use ruststream_nats::testing::TestApp;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use support::nats::{PATIENCE, eventually, live_server};

#[derive(Debug, Serialize, Deserialize)]
struct Number {
    value: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "math.doubled")]
struct Doubled {
    value: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "calc.halved")]
struct Halved {
    value: i64,
}

#[subscriber(CoreSubject::new("math.double").queue_group("doublers"), reply)]
async fn double(n: &Number) -> Result<Doubled, HandlerOutcome> {
    Ok(Doubled { value: n.value * 2 })
}

/// Halves an even number; an odd one is refused (`drop()`): no answer, an error in the stats.
#[subscriber("halve", reply)]
async fn halve(n: &Number) -> Result<Halved, HandlerOutcome> {
    if n.value % 2 == 0 {
        Ok(Halved { value: n.value / 2 })
    } else {
        Err(HandlerOutcome::drop())
    }
}

/// Answers nothing: not an endpoint.
#[subscriber("math.seen")]
async fn seen(_n: &Number) -> HandlerOutcome {
    HandlerOutcome::ack()
}

/// The service's name: the app's, `.` made `_`.
const SERVICE: &str = "math_service";

/// Two request handlers (one in router `calc`) and a plain subscriber.
fn app(url: &str) -> impl App<State = ()> {
    let mut calc = Router::new("calc");
    calc.include(halve);
    RustStream::new(AppInfo::new("math.service", "1.2.0").description("doubles and halves numbers"))
        .with_broker(NatsBroker::new(url), |b| {
            b.include(double);
            b.include_router(calc);
            b.include(seen);
        })
}

/// Where `response` breaks the published schema `schema` (`ping_response`, `info_response`,
/// `stats_response`), formats (`date-time`) included.
fn schema_errors(schema: &str, response: &Value) -> Vec<String> {
    let path = format!("{}/tests/micro/{schema}.json", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).expect("the vendored schema");
    let schema_json: Value = serde_json::from_str(&text).expect("the schema is JSON");
    let validator = jsonschema::draft7::options()
        .should_validate_formats(true)
        .build(&schema_json)
        .expect("the schema compiles");
    validator
        .iter_errors(response)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect()
}

fn assert_valid(schema: &str, response: &Value) {
    let errors = schema_errors(schema, response);
    assert!(
        errors.is_empty(),
        "the {schema} breaks its schema: {errors:#?}\n{response:#}"
    );
}

/// Asks `subject` as `nats micro` does: one request to a fresh inbox, every response that
/// comes until none came for a moment after the first (the first within [`PATIENCE`]).
async fn ask_all(client: &async_nats::Client, subject: &str) -> Vec<Value> {
    let inbox = client.new_inbox();
    let mut responses = client.subscribe(inbox.clone()).await.expect("subscribes");
    client
        .publish_with_reply(subject.to_owned(), inbox, "".into())
        .await
        .expect("publishes");
    client.flush().await.expect("flushes");
    let first = tokio::time::timeout(PATIENCE, responses.next())
        .await
        .unwrap_or_else(|_| panic!("nobody answered `{subject}`"))
        .expect("the subscription is open");
    let mut all = vec![first];
    // Only to show that nobody else answers: a quiet moment, not a wait for something.
    while let Ok(Some(more)) =
        tokio::time::timeout(Duration::from_millis(300), responses.next()).await
    {
        all.push(more);
    }
    all.iter()
        .map(|m| serde_json::from_slice(&m.payload).expect("the response is JSON"))
        .collect()
}

/// The one response to `subject`.
async fn ask(client: &async_nats::Client, subject: &str) -> Value {
    let response = tokio::time::timeout(PATIENCE, client.request(subject.to_owned(), "".into()))
        .await
        .unwrap_or_else(|_| panic!("nobody answered `{subject}`"))
        .unwrap_or_else(|err| panic!("asking `{subject}`: {err}"));
    serde_json::from_slice(&response.payload).expect("the response is JSON")
}

/// The endpoint named `name` of a stats or info response.
fn endpoint<'a>(response: &'a Value, name: &str) -> &'a Value {
    response["endpoints"]
        .as_array()
        .expect("endpoints")
        .iter()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("no endpoint `{name}` in {response:#}"))
}

fn nanos(value: &Value) -> u64 {
    value.as_u64().expect("nanoseconds")
}

#[tokio::test]
async fn ping_info_and_stats_answer_as_the_schemas_say_with_what_the_handlers_did() {
    let (server, client) = live_server().await;
    let running = app(&server.url())
        .start(ruststream::Env::new())
        .await
        .expect("the app starts");

    // `nats micro ls`: every service answers `$SRV.PING`; this app is one instance of one.
    let pings = ask_all(&client, "$SRV.PING").await;
    assert_eq!(pings.len(), 1, "one instance answers: {pings:#?}");
    let ping = &pings[0];
    assert_valid("ping_response", ping);
    assert_eq!(ping["name"], SERVICE);
    assert_eq!(ping["version"], "1.2.0");
    let id = ping["id"].as_str().expect("an id").to_owned();
    let by_id = ask(&client, &format!("$SRV.PING.{SERVICE}.{id}")).await;
    assert_eq!(by_id["id"], id.as_str());

    // `nats micro info math_service`.
    let info = ask(&client, &format!("$SRV.INFO.{SERVICE}")).await;
    assert_valid("info_response", &info);
    let read: async_nats::service::Info =
        serde_json::from_value(info.clone()).expect("async-nats reads the info");
    assert_eq!(read.name, SERVICE);
    assert_eq!(
        (&info["id"], &info["description"]),
        (
            &Value::from(id.as_str()),
            &Value::from("doubles and halves numbers")
        )
    );
    let mut names: Vec<&str> = info["endpoints"]
        .as_array()
        .expect("endpoints")
        .iter()
        .map(|e| e["name"].as_str().expect("a name"))
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["double", "halve"],
        "the plain subscriber is no endpoint"
    );
    let halve_info = endpoint(&info, "halve");
    assert_eq!(halve_info["subject"], "calc.halve");
    assert_eq!(halve_info["metadata"]["group"], "calc");
    assert_eq!(endpoint(&info, "double")["metadata"].get("group"), None);
    assert_eq!(endpoint(&info, "double")["queue_group"], "doublers");
    assert_eq!(halve_info["queue_group"], "");
    // The metadata points into the app's AsyncAPI document.
    let document = ruststream::asyncapi::document(&app(&server.url()));
    for name in ["double", "halve"] {
        let metadata = &endpoint(&info, name)["metadata"];
        let operation = metadata["asyncapi_operation"]
            .as_str()
            .and_then(|p| p.strip_prefix("#/operations/"))
            .expect("a pointer to an operation");
        assert_eq!(
            document["operations"][operation]["channel"]["$ref"], metadata["asyncapi_channel"],
            "{name}: the operation's channel is the one named"
        );
    }

    // What the handlers do: three doubles answered; two halves answered, one refused (odd)
    // and one that does not decode.
    for value in 1..=3 {
        let response = client
            .request("math.double", format!(r#"{{"value":{value}}}"#).into())
            .await
            .expect("the handler answers");
        assert_eq!(response.payload, format!(r#"{{"value":{}}}"#, value * 2));
    }
    for (payload, answered) in [
        (r#"{"value":4}"#, true),
        (r#"{"value":3}"#, false),
        (r#"{"value":10}"#, true),
        ("not json", false),
    ] {
        if answered {
            let response = client
                .request("calc.halve", payload.into())
                .await
                .expect("an even number is answered");
            assert!(response.payload.starts_with(br#"{"value":"#));
        } else {
            client
                .publish_with_reply("calc.halve", client.new_inbox(), payload.into())
                .await
                .expect("publishes");
        }
    }

    // `nats micro stats math_service`: polled until every request is counted.
    let stats = eventually(PATIENCE, "the stats count every request", || {
        let client = client.clone();
        async move {
            let stats = ask(&client, &format!("$SRV.STATS.{SERVICE}")).await;
            let counted = |name| endpoint(&stats, name)["num_requests"].as_u64();
            (counted("double") == Some(3) && counted("halve") == Some(4)).then_some(stats)
        }
    })
    .await;
    assert_valid("stats_response", &stats);
    // An official client's service API reads it as its own.
    let read: async_nats::service::Stats =
        serde_json::from_value(stats.clone()).expect("async-nats reads the stats");
    assert_eq!(read.endpoints.len(), 2);
    assert_eq!(
        (&stats["id"], &stats["version"]),
        (&Value::from(id.as_str()), &Value::from("1.2.0"))
    );
    let double_stats = endpoint(&stats, "double");
    assert_eq!(double_stats["num_errors"], 0);
    assert_eq!(double_stats["last_error"], "");
    let halve_stats = endpoint(&stats, "halve");
    assert_eq!(
        halve_stats["num_errors"], 2,
        "the refused one and the undecodable one"
    );
    let last_error = halve_stats["last_error"].as_str().expect("text");
    assert!(
        last_error.starts_with("400:") && last_error.contains("does not decode"),
        "the last error is the undecodable request: {last_error}"
    );
    for (e, requests) in [(double_stats, 3), (halve_stats, 4)] {
        let total = nanos(&e["processing_time"]);
        assert!(total > 0, "the handler's time is counted: {e:#}");
        assert_eq!(nanos(&e["average_processing_time"]), total / requests);
    }

    running.stop().await.expect("stops");
    // Stopped: nobody answers the protocol any more.
    let err = client
        .request(format!("$SRV.PING.{SERVICE}"), "".into())
        .await
        .expect_err("nobody answers");
    assert_eq!(err.kind(), async_nats::RequestErrorKind::NoResponders);
}

/// `$SRV.PING` and `$SRV.INFO.<name>` find no responder at all.
async fn assert_no_service(client: &async_nats::Client) {
    for subject in ["$SRV.PING".to_owned(), format!("$SRV.INFO.{SERVICE}")] {
        let err = client
            .request(subject.clone(), "".into())
            .await
            .expect_err("no service answers");
        assert_eq!(
            err.kind(),
            async_nats::RequestErrorKind::NoResponders,
            "{subject}"
        );
    }
}

/// The schemas refuse what the protocol refuses, so that passing them means something.
#[test]
fn the_schemas_refuse_a_bad_name_version_or_start_time() {
    let ping = serde_json::json!({
        "type": "io.nats.micro.v1.ping_response",
        "name": "math.service",
        "id": "x",
        "version": "1.0",
    });
    // The name's pattern, the version's pattern and its length.
    assert_eq!(schema_errors("ping_response", &ping).len(), 3, "{ping}");
    let stats = serde_json::json!({
        "type": "io.nats.micro.v1.stats_response",
        "name": "math", "id": "x", "version": "1.0.0",
        "started": "yesterday", "endpoints": [],
    });
    assert_eq!(schema_errors("stats_response", &stats).len(), 1, "{stats}");
}

#[tokio::test]
async fn an_app_that_turns_the_service_off_registers_none_and_still_answers_requests() {
    let (server, client) = live_server().await;
    let running = RustStream::new(AppInfo::new("math.service", "1.2.0"))
        .micro_service(false)
        .with_broker(NatsBroker::new(server.url()), |b| {
            b.include(double);
        })
        .start(ruststream::Env::new())
        .await
        .expect("the app starts");
    let response = client
        .request("math.double", r#"{"value":21}"#.into())
        .await
        .expect("the handler answers");
    assert_eq!(&response.payload[..], br#"{"value":42}"#);
    assert_no_service(&client).await;
    running.stop().await.expect("stops");
}

#[tokio::test]
async fn an_app_without_request_handlers_registers_no_service() {
    let (server, client) = live_server().await;
    let running = RustStream::new(AppInfo::new("math.service", "1.2.0"))
        .with_broker(NatsBroker::new(server.url()), |b| {
            b.include(seen);
        })
        .start(ruststream::Env::new())
        .await
        .expect("the app starts");
    assert_no_service(&client).await;
    running.stop().await.expect("stops");
}

#[test]
fn describe_names_the_service_and_its_endpoints_unless_it_is_off() {
    let text = ruststream::app::cli::describe(&app("nats://localhost:4222"));
    assert!(
        text.contains(
            "micro service: math_service 1.2.0, endpoints double (math.double), halve (calc.halve)"
        ),
        "{text}"
    );
    let json = ruststream::app::cli::describe_json(&app("nats://localhost:4222"));
    assert_eq!(json["micro_service"]["name"], SERVICE);
    let off = RustStream::new(AppInfo::new("math", "1.0.0"))
        .micro_service(false)
        .with_broker(NatsBroker::new("nats://localhost:4222"), |b| {
            b.include(double);
        });
    assert!(!ruststream::app::cli::describe(&off).contains("micro service"));
}

#[tokio::test]
async fn a_version_the_protocol_refuses_stops_the_app_before_it_connects_and_names_the_fix() {
    // Nothing listens at this address: the refusal comes before any connection.
    let err = RustStream::new(AppInfo::new("math", "1.0"))
        .with_broker(NatsBroker::new("nats://127.0.0.1:1"), |b| {
            b.include(double);
        })
        .start(ruststream::Env::new())
        .await
        .expect_err("`1.0` is not a semantic version");
    let text = err.to_string();
    assert!(
        text.contains("`1.0`") && text.contains(".micro_service(false)"),
        "{text}"
    );
}

#[tokio::test]
async fn a_subscription_under_srv_is_refused_while_the_service_answers_there() {
    #[subscriber("$SRV.PING.mine")]
    async fn mine(_n: &Number) -> HandlerOutcome {
        HandlerOutcome::ack()
    }
    let err = RustStream::new(AppInfo::new("math", "1.0.0"))
        .with_broker(NatsBroker::new("nats://127.0.0.1:1"), |b| {
            b.include(double);
            b.include(mine);
        })
        .start(ruststream::Env::new())
        .await
        .expect_err("the runtime answers under `$SRV.`");
    assert!(err.to_string().contains("`$SRV.PING.mine`"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn in_process_the_service_answers_too() {
    let t = TestApp::start(app("nats://localhost:4222"))
        .await
        .expect("starts");
    let doubled: Doubled = t
        .request("math.double", &Number { value: 2 }, Duration::from_secs(5))
        .await
        .expect("answered");
    assert_eq!(doubled, Doubled { value: 4 });
    let info: Value = t
        .request(&format!("$SRV.INFO.{SERVICE}"), &(), Duration::from_secs(5))
        .await
        .expect("the service answers");
    assert_valid("info_response", &info);
    let stats: Value = t
        .request(
            &format!("$SRV.STATS.{SERVICE}"),
            &(),
            Duration::from_secs(5),
        )
        .await
        .expect("the service answers");
    assert_valid("stats_response", &stats);
    assert_eq!(endpoint(&stats, "double")["num_requests"], 1);
    assert_eq!(endpoint(&stats, "halve")["num_requests"], 0);
    t.shutdown().await.expect("stops");
}
