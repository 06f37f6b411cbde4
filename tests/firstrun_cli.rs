//! The generated `main`'s command line, run as a user runs it, on the unchanged
//! `examples/payments.rs`: its `--help`, `--version`, `describe`, `check`, `run --url` /
//! `NATS_URL`, and `run --embedded` with a seed file.
//!
//! Each case runs this test binary again as the app's program: the child runs only the test
//! `as_the_app`, which hands the arguments the parent gave (`tests/support/program.rs`) to
//! `ruststream::app::cli::main_from` with the example's `app` and exits with its status.

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::Stdio;

use std::time::{Duration, Instant};
use support::program::run;

use ruststream_test_server::NatsServer;
use ruststream_test_server::client::{connect_jetstream, create_stream};

mod support;

// `examples/payments.rs`, unchanged, as the program this test runs.
example_program!(payments, "payments.rs");

#[test]
fn help_and_version_name_the_app() {
    let (out, stdout, _) = run(&mut payments(["--help"]));
    assert!(out.status.success());
    assert!(
        stdout
            .trim_start()
            .starts_with("payments 0.1.0: a RustStream service"),
        "{stdout}"
    );
    for word in [
        "run",
        "check",
        "describe",
        "NATS_URL",
        "RUSTSTREAM_EMBEDDED",
    ] {
        assert!(stdout.contains(word), "--help names {word}: {stdout}");
    }
    let (out, stdout, _) = run(&mut payments(["--version"]));
    assert!(out.status.success(), "--version is accepted");
    assert!(stdout.lines().any(|l| l == "payments 0.1.0"), "{stdout}");
    let (_, stdout, _) = run(&mut payments(["run", "--help"]));
    assert!(
        stdout.contains("--url <URL>") && stdout.contains("--embedded"),
        "{stdout}"
    );
}

#[test]
fn describe_shows_concurrency_and_declared_streams_and_has_json() {
    let (out, stdout, _) = run(&mut payments(["describe"]));
    assert!(out.status.success());
    assert!(stdout.contains("concurrency"), "{stdout}");
    assert!(stdout.contains("declared streams: none"), "{stdout}");
    let (out, stdout, _) = run(&mut payments(["describe", "--json"]));
    assert!(out.status.success());
    let doc: serde_json::Value = serde_json::from_str(&stdout).expect("describe --json is JSON");
    assert_eq!(doc["name"], "payments");
    assert_eq!(doc["version"], "0.1.0");
    let capture = &doc["registrations"][0];
    assert_eq!(capture["name"], "capture");
    assert_eq!(capture["stream"], "PAYMENTS");
    assert_eq!(capture["consumer"], "capture");
    assert_eq!(capture["concurrency"], 1);
    assert_eq!(capture["queue_group"], serde_json::Value::Null);
    assert_eq!(capture["dead_letter_stored_in"], serde_json::Value::Null);
}

#[test]
fn a_url_that_does_not_parse_names_its_setting_once() {
    let (out, _, stderr) = run(payments([]).env("NATS_URL", "nats://alice:s3cret@host:port"));
    assert!(!out.status.success());
    assert!(
        stderr.contains("the NATS URL from NATS_URL does not parse"),
        "{stderr}"
    );
    assert!(!stderr.contains("s3cret"), "no credentials: {stderr}");
    assert_eq!(
        stderr.matches("does not parse").count(),
        1,
        "printed once: {stderr}"
    );

    let (out, _, stderr) =
        run(payments(["run", "--url", "nats://h:notaport"])
            .env("NATS_URL", "nats://localhost:4222"));
    assert!(!out.status.success());
    assert!(
        stderr.contains("the NATS URL from --url does not parse"),
        "--url wins: {stderr}"
    );
}

#[test]
fn a_startup_error_is_printed_once_and_the_log_says_where_the_url_came_from() {
    let (out, stdout, stderr) = run(payments([]).env("NATS_URL", "nats://bob:pw@127.0.0.1:1"));
    assert!(!out.status.success());
    let all = format!("{stdout}{stderr}");
    assert_eq!(all.matches("cannot connect to NATS").count(), 1, "{all}");
    assert!(all.contains("URL from NATS_URL"), "{all}");
    assert!(
        all.contains("nats://127.0.0.1:1") && !all.contains("bob:pw"),
        "{all}"
    );
}

#[test]
fn check_reports_what_run_would_refuse_and_passes_once_the_stream_exists() {
    let server = NatsServer::start();
    let (out, stdout, stderr) = run(&mut payments(["check", "--url", &server.url()]));
    assert!(!out.status.success(), "PAYMENTS does not exist: {stdout}");
    assert!(
        stderr.contains("registration `capture` reads stream `PAYMENTS`, which does not exist"),
        "{stderr}"
    );
    // `run` refuses with the same message.
    let (out, _, run_stderr) = run(&mut payments(["run", "--url", &server.url()]));
    assert!(!out.status.success());
    let line = |s: &str| {
        s.lines()
            .find(|l| l.starts_with("error:"))
            .map(str::to_owned)
    };
    assert_eq!(
        line(&stderr),
        line(&run_stderr),
        "check and run say the same"
    );

    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async {
        let (_client, js) = connect_jetstream(&server).await;
        create_stream(&js, "PAYMENTS", ["payments.authorized"]).await;
    });
    let (out, stdout, stderr) = run(payments(["check"]).env("NATS_URL", server.url()));
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains("stream `PAYMENTS` of registration `capture` exists"),
        "{stdout}"
    );
    assert!(
        stdout.contains("durable consumer `capture` does not exist yet"),
        "{stdout}"
    );
    assert!(stdout.contains("every startup check passed"), "{stdout}");
    // `check` changed nothing: the durable is still not there.
    runtime.block_on(async {
        let (_client, js) = connect_jetstream(&server).await;
        let stream = js.get_stream("PAYMENTS").await.expect("the stream");
        assert!(
            stream.consumer_info("capture").await.is_err(),
            "check created no consumer"
        );
    });
}

#[test]
fn check_refuses_a_durable_that_conflicts_with_its_descriptor() {
    let server = NatsServer::start();
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async {
        let (_client, js) = connect_jetstream(&server).await;
        create_stream(&js, "PAYMENTS", ["payments.>"]).await;
        let stream = js.get_stream("PAYMENTS").await.expect("the stream");
        stream
            .create_consumer(async_nats::jetstream::consumer::pull::Config {
                durable_name: Some("capture".to_owned()),
                filter_subject: "payments.other".to_owned(),
                ..Default::default()
            })
            .await
            .expect("a durable reading another subject");
    });
    let (out, stdout, stderr) = run(&mut payments(["check", "--url", &server.url()]));
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stderr.contains("durable consumer `capture` of stream `PAYMENTS` exists with filter subject `payments.other`"),
        "{stderr}"
    );
    // `run` refuses it too.
    let (out, _, run_stderr) = run(&mut payments(["run", "--url", &server.url()]));
    assert!(!out.status.success());
    assert!(
        run_stderr.contains("filter subject `payments.other`"),
        "{run_stderr}"
    );
}

#[test]
fn run_embedded_declares_the_streams_and_prints_what_each_handler_did() {
    let seed = std::env::temp_dir().join(format!("firstrun-seed-{}.txt", std::process::id()));
    std::fs::write(
        &seed,
        "# two payments\npublish payments.authorized {\"id\": 1, \"card\": \"visa\", \"amount_cents\": 100}\n\npublish payments.authorized {\"id\": 2, \"card\": \"declined\", \"amount_cents\": 5}\n",
    )
    .expect("the seed file");
    let seed_path = seed.to_string_lossy().into_owned();
    let mut child = payments(["run", "--embedded", "--seed", &seed_path])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the example starts");
    let mut stdin = child.stdin.take().expect("stdin");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut seen = Vec::new();
    let wait_for = |needle: &str, seen: &mut Vec<String>| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !seen.iter().any(|l| l.contains(needle)) {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => seen.push(line),
                Err(_) => panic!("no line with `{needle}`; saw:\n{}", seen.join("\n")),
            }
        }
    };
    wait_for("nothing is persisted", &mut seen);
    wait_for("stream PAYMENTS stores payments.authorized", &mut seen);
    wait_for(
        "capture on payments.authorized (delivered 1): returned Drop; sent +TERM",
        &mut seen,
    );
    wait_for("refresh on payments.captured: returned Ack", &mut seen);
    writeln!(
        stdin,
        "publish payments.authorized {{\"id\": 3, \"card\": \"flaky\", \"amount_cents\": 7}}"
    )
    .expect("stdin takes a line");
    wait_for(
        "capture on payments.authorized (delivered 2): returned Ack; sent +ACK",
        &mut seen,
    );
    writeln!(stdin, "publish payments.authorized not-json").expect("stdin takes a line");
    wait_for("is not JSON", &mut seen);
    child.kill().expect("the app stops");
    let _ = child.wait();
    let _ = std::fs::remove_file(&seed);
    let all = seen.join("\n");
    assert!(
        all.contains("capture on payments.authorized (delivered 1): returned Ack; sent +ACK"),
        "{all}"
    );
}

#[test]
fn check_says_whether_a_stream_stores_each_dead_letter() {
    use ruststream::{App as _, AppInfo, Env, HandlerOutcome, RustStream};
    use ruststream_nats::{CoreSubject, NatsBroker};

    struct Ack;
    impl ruststream::Handle<serde_json::Value> for Ack {
        async fn handle(
            &self,
            _value: &serde_json::Value,
            _outs: &(),
            _ctx: &mut ruststream::Context<'_>,
        ) -> Result<(), HandlerOutcome> {
            Ok(())
        }
    }

    let server = NatsServer::start();
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let done = runtime.block_on(async {
        let (_client, js) = connect_jetstream(&server).await;
        create_stream(&js, "DEAD", ["dead.>"]).await;
        let app = RustStream::new(AppInfo::new("dl", "0.1.0")).with_broker(
            NatsBroker::new(server.url()),
            |b| {
                b.include(CoreSubject::new("orders.stored").handler(Ack))
                    .name("stored")
                    .dead_letter("dead.orders");
                b.include(CoreSubject::new("orders.lost").handler(Ack))
                    .name("lost")
                    .dead_letter("nowhere.orders");
            },
        );
        app.check(Env::new()).await.expect("every check passes")
    });
    let all = done.join("\n");
    assert!(
        all.contains(
            "dead letters of registration `stored` go to `dead.orders`, stored in stream `DEAD`"
        ),
        "{all}"
    );
    assert!(
        all.contains(
            "dead letters of registration `lost` go to `nowhere.orders`, which no stream stores"
        ),
        "{all}"
    );
}

#[test]
fn the_environment_turns_on_the_embedded_nats() {
    let mut child = payments(["run"])
        .env("RUSTSTREAM_EMBEDDED", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the example starts");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    while !seen
        .iter()
        .any(|l: &String| l.contains("nothing is persisted"))
    {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => seen.push(line),
            Err(_) => break,
        }
    }
    child.kill().expect("the app stops");
    let _ = child.wait();
    assert!(
        seen.iter()
            .any(|l| l.starts_with("[embedded] NATS inside this process, for development")),
        "RUSTSTREAM_EMBEDDED=1 runs on the embedded NATS: {seen:?}"
    );
}
