//! The operations settings of the generated `main`, run as an operator runs it, on the
//! unchanged `examples/payments.rs`: `--help` lists them, a bad value names its setting, and
//! `run --metrics-addr` with JSON logs serves metrics and health a real HTTP client scrapes,
//! while every log line is a JSON object and a handler's events name their delivery; `run
//! --embedded` stops when its piped input ends.
//!
//! Each case runs this test binary again as the app's program (the test `as_the_app`), as
//! `firstrun_cli.rs` does.

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use ruststream_test_server::NatsServer;
use ruststream_test_server::client::{connect_jetstream, create_stream, publish_stored};

mod support;

use support::program::eventually;

// `examples/payments.rs`, unchanged, as the program this test runs.
example_program!(payments, "payments.rs");

fn output(command: &mut Command) -> (bool, String) {
    let out = command.output().expect("the program runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn help_lists_the_operations_settings_and_their_variables() {
    let (ok, text) = output(&mut payments(["--help"]));
    assert!(ok, "{text}");
    for needle in [
        "--url URL",
        "NATS_URL",
        "--metrics-addr HOST:PORT",
        "RUSTSTREAM_METRICS_ADDR",
        "--log-format human|json",
        "RUSTSTREAM_LOG_FORMAT",
        "--drain-timeout SECONDS",
        "RUSTSTREAM_DRAIN_TIMEOUT",
        "RUST_LOG",
    ] {
        assert!(text.contains(needle), "no `{needle}` in:\n{text}");
    }
    let (ok, text) = output(&mut payments(["run", "--help"]));
    assert!(ok, "{text}");
    assert!(text.contains("--metrics-addr <HOST:PORT>"), "{text}");
    assert!(text.contains("--log-format <FORMAT>"), "{text}");
    assert!(text.contains("--drain-timeout <SECONDS>"), "{text}");
}

#[test]
fn a_bad_setting_stops_the_app_with_an_error_naming_it() {
    let (ok, text) = output(payments(["run"]).env("RUSTSTREAM_LOG_FORMAT", "xml"));
    assert!(!ok);
    assert_eq!(
        text.matches("error: RUSTSTREAM_LOG_FORMAT is `xml`, which is not a log format; use `human` or `json`").count(),
        1,
        "{text}"
    );
    let (ok, text) = output(&mut payments(["run", "--metrics-addr", "nowhere"]));
    assert!(!ok);
    assert!(
        text.contains("error: --metrics-addr is `nowhere`, which is not an address to listen on"),
        "{text}"
    );
    let (ok, text) = output(payments(["run"]).env("RUSTSTREAM_DRAIN_TIMEOUT", "soon"));
    assert!(!ok);
    assert!(
        text.contains(
            "error: RUSTSTREAM_DRAIN_TIMEOUT is `soon`, which is not a number of seconds"
        ),
        "{text}"
    );
    let (ok, text) = output(payments(["run"]).env("RUSTSTREAM_METRICS_ADDR", "1.2.3:x"));
    assert!(!ok);
    assert!(
        text.contains("error: RUSTSTREAM_METRICS_ADDR is `1.2.3:x`"),
        "{text}"
    );
}

/// The lines a child writes to standard output, as they come.
fn lines(child: &mut std::process::Child) -> Receiver<String> {
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// Reads lines into `seen` until one satisfies `matches`; returns it.
fn wait_for(
    rx: &Receiver<String>,
    seen: &mut Vec<String>,
    what: &str,
    matches: impl Fn(&str) -> bool,
) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(line) = seen.iter().find(|l| matches(l)) {
            return line.clone();
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => seen.push(line),
            Err(_) => panic!("no line with {what}; saw:\n{}", seen.join("\n")),
        }
    }
}

/// `GET http://addr/path` with a real HTTP client: the status and the body.
fn get(addr: &str, path: &str) -> (u16, String) {
    let url = format!("http://{addr}{path}");
    match ureq::get(&url).call() {
        Ok(response) => (response.status(), response.into_string().expect("a body")),
        Err(ureq::Error::Status(status, response)) => {
            (status, response.into_string().expect("a body"))
        }
        Err(err) => panic!("GET {url} failed: {err}"),
    }
}

#[test]
fn run_serves_metrics_and_health_and_logs_json_lines() {
    let server = NatsServer::start();
    eprintln!("running against {}", NatsServer::version());
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let js = runtime.block_on(async {
        let (_client, js) = connect_jetstream(&server).await;
        create_stream(&js, "PAYMENTS", ["payments.authorized"]).await;
        js
    });
    let mut child = payments([
        "run",
        "--url",
        &server.url(),
        "--metrics-addr",
        "127.0.0.1:0",
    ])
    .env("RUSTSTREAM_LOG_FORMAT", "json")
    // The operator's drain timeout overrides the app's (the drain's log line says it).
    .env("RUSTSTREAM_DRAIN_TIMEOUT", "7.5")
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit())
    .spawn()
    .expect("the example starts");
    let rx = lines(&mut child);
    let mut seen = Vec::new();
    let line = wait_for(&rx, &mut seen, "where to scrape", |l| {
        l.contains("metrics at http://")
    });
    let at = line
        .split("metrics at http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .expect("an address")
        .to_owned();
    eventually("/readyz answers 200", || {
        (get(&at, "/readyz").0 == 200).then_some(())
    });
    assert_eq!(get(&at, "/healthz"), (200, "ok\n".to_owned()));

    runtime.block_on(async {
        publish_stored(
            &js,
            "payments.authorized",
            r#"{"id": 1, "card": "visa", "amount_cents": 100}"#.to_owned(),
        )
        .await;
        publish_stored(
            &js,
            "payments.authorized",
            r#"{"id": 2, "card": "declined", "amount_cents": 5}"#.to_owned(),
        )
        .await;
    });
    let text = eventually("both payments and the dashboard are counted", || {
        let (status, text) = get(&at, "/metrics");
        assert_eq!(status, 200);
        (text.contains(r#"ruststream_deliveries_total{handler="capture",outcome="ack"} 1"#)
            && text.contains(r#"ruststream_deliveries_total{handler="capture",outcome="drop"} 1"#)
            && text.contains(r#"ruststream_deliveries_total{handler="refresh",outcome="ack"} 1"#))
        .then_some(text)
    });
    assert!(
        text.contains(r#"ruststream_handler_duration_seconds_count{handler="capture"} 2"#),
        "{text}"
    );
    assert!(text.contains("ruststream_ready 1"), "{text}");

    // The handler's own event, naming its delivery, as one JSON object.
    let refreshed = wait_for(&rx, &mut seen, "the dashboard's event", |l| {
        l.contains("dashboard refreshed")
    });
    let event: serde_json::Value = serde_json::from_str(&refreshed).expect("a JSON line");
    assert_eq!(event["level"], "INFO");
    let delivery = &event["delivery"];
    assert_eq!(
        delivery["messaging.destination.name"], "payments.captured",
        "{event}"
    );
    assert_eq!(delivery["ruststream.registration"], "refresh", "{event}");
    // What every delivery of a registration shares is the exported span's, not the line's.
    assert!(delivery.get("messaging.system").is_none(), "{event}");

    // SIGTERM: the app drains and exits cleanly.
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    let draining = wait_for(&rx, &mut seen, "the drain's start", |l| {
        l.contains("draining NATS")
    });
    let draining: serde_json::Value = serde_json::from_str(&draining).expect("a JSON line");
    assert_eq!(draining["fields"]["drain_timeout"], "7.5s", "{draining}");
    wait_for(&rx, &mut seen, "the drain", |l| l.contains("NATS drained"));
    let status = child.wait().expect("the child exits");
    assert!(status.success(), "{}", seen.join("\n"));
    for line in seen.iter().filter(|l| !l.trim().is_empty()) {
        let parsed: Result<serde_json::Value, _> = serde_json::from_str(line);
        // The test harness's own lines are not the app's.
        if line.starts_with("running ") || line.starts_with("test result") {
            continue;
        }
        assert!(parsed.is_ok(), "not a JSON line: {line}");
    }
}

#[test]
fn asyncapi_prints_the_document_as_json_and_as_yaml() {
    let out = payments(["asyncapi"]).output().expect("the program runs");
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let json = stdout
        .lines()
        .filter(|l| !l.starts_with("running 1 test") && !l.starts_with("test result"))
        .collect::<Vec<_>>()
        .join("\n");
    let doc: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(doc["asyncapi"], "3.0.0");
    assert_eq!(doc["info"]["title"], "payments");
    let out = payments(["asyncapi", "--yaml"])
        .output()
        .expect("the program runs");
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let yaml = stdout
        .lines()
        .filter(|l| !l.starts_with("running 1 test") && !l.starts_with("test result"))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(yaml.contains("asyncapi: 3.0.0"), "{yaml}");
    let from_yaml: serde_json::Value = serde_norway::from_str(&yaml).expect("YAML");
    assert_eq!(from_yaml, doc);
}

#[test]
fn asyncapi_writes_the_document_to_a_file_and_names_a_path_it_cannot_write() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    // JSON, into the file, nothing of it on the terminal.
    let json_path = dir.path().join("payments-api.json");
    let (ok, text) = output(&mut payments([
        "asyncapi",
        "-o",
        json_path.to_str().expect("a UTF-8 path"),
    ]));
    assert!(ok, "{text}");
    assert!(!text.contains("\"asyncapi\""), "printed as well: {text}");
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).expect("the file"))
            .expect("JSON");
    assert_eq!(written["asyncapi"], "3.0.0");
    assert_eq!(written["info"]["title"], "payments");
    // `--yaml` still chooses YAML, with the long form of the flag.
    let yaml_path = dir.path().join("payments-api.yaml");
    let (ok, text) = output(&mut payments([
        "asyncapi",
        "--yaml",
        "--output",
        yaml_path.to_str().expect("a UTF-8 path"),
    ]));
    assert!(ok, "{text}");
    let yaml = std::fs::read_to_string(&yaml_path).expect("the file");
    assert!(yaml.contains("asyncapi: 3.0.0"), "{yaml}");
    let from_yaml: serde_json::Value = serde_norway::from_str(&yaml).expect("YAML");
    assert_eq!(from_yaml, written);
    // A path that cannot be written: an error naming it, a failing exit, no file.
    let missing = dir.path().join("no-such-dir").join("api.json");
    let (ok, text) = output(&mut payments([
        "asyncapi",
        "-o",
        missing.to_str().expect("a UTF-8 path"),
    ]));
    assert!(!ok, "{text}");
    assert!(
        text.contains(&format!(
            "error: cannot write the AsyncAPI document to {}",
            missing.display()
        )),
        "{text}"
    );
    assert!(!missing.exists());
}

#[test]
fn run_embedded_stops_when_its_piped_input_ends_once_every_message_is_handled() {
    let mut child = payments(["run", "--embedded"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the example starts");
    let rx = lines(&mut child);
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().expect("stdin");
        // A payment acknowledged (its capture then handled), one dropped, one retried once.
        writeln!(
            stdin,
            "publish payments.authorized {{\"id\": 1, \"card\": \"visa\", \"amount_cents\": 100}}\n\
             publish payments.authorized {{\"id\": 2, \"card\": \"declined\", \"amount_cents\": 5}}\n\
             publish payments.authorized {{\"id\": 3, \"card\": \"flaky\", \"amount_cents\": 7}}"
        )
        .expect("stdin takes the script");
    } // Dropped: standard input ends.
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("the program's status") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let seen: Vec<String> = rx.try_iter().collect();
            panic!("still running after its input ended:\n{}", seen.join("\n"));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // Every line: the reader ends with the program's standard output.
    let seen: Vec<String> = rx.iter().collect();
    let all = seen.join("\n");
    assert!(
        status.success(),
        "exits 0 at the end of its input: {status:?}\n{all}"
    );
    assert!(all.contains("standard input ended"), "{all}");
    // The flagship example starts without a warning (a declined card's, later, is the handler's).
    let startup: Vec<&String> = seen
        .iter()
        .take_while(|l| !l.contains("capture on payments.authorized"))
        .filter(|l| l.contains(" WARN "))
        .collect();
    assert!(startup.is_empty(), "warned at startup: {startup:?}");
    for handled in [
        "capture on payments.authorized (delivered 1): returned Drop; sent +TERM",
        "capture on payments.authorized (delivered 2): returned Ack; sent +ACK",
        "refresh on payments.captured: returned Ack",
    ] {
        assert!(
            all.contains(handled),
            "handled before the exit: `{handled}`\n{all}"
        );
    }
}
