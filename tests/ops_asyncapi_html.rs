//! `asyncapi --html`: the AsyncAPI document as a standalone page, opened in a real headless
//! Chromium (`--dump-dom` prints the page as the browser built it, after its script ran).
//!
//! The page of the unchanged `examples/payments.rs`, printed by its generated `main`, shows
//! every channel and operation of its document, and the table of contents its script builds
//! links each one; an app with patterns, a queue group, a reply, declared schemas and a name
//! full of markup shows them as text, and the document embedded in the page reads back equal.
//!
//! A machine without Chromium fails these tests, saying how to install it (`.ci/run` installs
//! `chromium-headless-shell` with apt-get when no browser is found).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ruststream::asyncapi::{document, to_html};
use serde_json::Value;

mod support;

use support::program::run;

example_program!(payments, "payments.rs");

/// The page `payments asyncapi --html` prints.
fn payments_page() -> String {
    let (out, stdout, stderr) = run(&mut payments(["asyncapi", "--html"]));
    assert!(out.status.success(), "asyncapi --html failed: {stderr}");
    let start = stdout.find("<!DOCTYPE html>").expect("a page");
    let end = stdout.find("</html>").expect("the end of the page") + "</html>".len();
    stdout[start..end].to_owned()
}

/// A headless Chromium: `CHROMIUM_BIN`, else the first of the usual names on `PATH`.
fn browser() -> PathBuf {
    if let Some(path) = std::env::var_os("CHROMIUM_BIN") {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "CHROMIUM_BIN={} is not a file",
            path.display()
        );
        return path;
    }
    let names = [
        "chromium-headless-shell",
        "chromium",
        "chromium-browser",
        "google-chrome",
        "google-chrome-stable",
    ];
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        for name in names {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    panic!(
        "no headless Chromium found (looked for {} on PATH, and CHROMIUM_BIN): these tests open the \
         `asyncapi --html` page in a real browser. Install one with \
         `apt-get install -y chromium-headless-shell` (or `chromium`), or set CHROMIUM_BIN",
        names.join(", ")
    );
}

/// The page as the browser built it, once loaded and its script ran.
fn rendered(html: &str) -> String {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let page = dir.path().join("asyncapi.html");
    std::fs::write(&page, html).expect("the page is written");
    dump_dom(&browser(), &page, dir.path())
}

fn dump_dom(browser: &Path, page: &Path, dir: &Path) -> String {
    let stdout = dir.join("dom.html");
    let stderr = dir.join("browser.log");
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
        ])
        // Its own profile: tests run in parallel.
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout).expect("a file"))
        .stderr(std::fs::File::create(&stderr).expect("a file"))
        .spawn()
        .unwrap_or_else(|e| panic!("{} does not start: {e}", browser.display()));
    // A browser that never exits is a failure, not a hung test (generous: a loaded machine).
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().expect("the browser's status") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{} did not finish loading the page within 120 s:\n{}",
                browser.display(),
                std::fs::read_to_string(&stderr).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let dom = std::fs::read_to_string(&stdout).expect("the DOM");
    assert!(
        status.success() && dom.contains("</html>"),
        "{} did not render the page ({status}):\n{}",
        browser.display(),
        std::fs::read_to_string(&stderr).unwrap_or_default()
    );
    dom
}

/// The document the page carries, read back from the DOM.
fn embedded(dom: &str) -> Value {
    let marker = r#"<script type="application/json" id="asyncapi-document">"#;
    let start = dom.find(marker).expect("the embedded document") + marker.len();
    let end = start + dom[start..].find("</script>").expect("its end");
    serde_json::from_str(&dom[start..end]).expect("the embedded document is JSON")
}

/// What every page shows of its document, as the browser built it.
fn assert_shows(dom: &str, doc: &Value) {
    assert!(
        dom.contains(r#"data-rendered="true""#),
        "the page's script did not run to its end:\n{dom}"
    );
    assert_eq!(
        &embedded(dom),
        doc,
        "the embedded document reads back equal"
    );
    let channels = doc["channels"].as_object().expect("channels");
    let operations = doc["operations"].as_object().expect("operations");
    assert!(!channels.is_empty() && !operations.is_empty());
    for (id, channel) in channels {
        assert!(
            dom.contains(&format!(r#"<article class="channel" id="channel-{id}">"#)),
            "channel {id} has no section"
        );
        // The table of contents the script built links it.
        assert!(
            dom.contains(&format!(r##"<a href="#channel-{id}">"##)),
            "channel {id} is not in the contents"
        );
        for message in channel["messages"].as_object().expect("messages").keys() {
            assert!(
                dom.contains(&format!(r#"id="message-{id}-{message}""#)),
                "message {message} of channel {id} is not shown"
            );
        }
    }
    for (id, operation) in operations {
        assert!(
            dom.contains(&format!(
                r#"<article class="operation" id="operation-{id}">"#
            )),
            "operation {id} has no section"
        );
        assert!(
            dom.contains(&format!(r##"<a href="#operation-{id}">{id}</a>"##)),
            "operation {id} is not in the contents"
        );
        let action = operation["action"].as_str().expect("an action");
        assert!(
            dom.contains(&format!(
                r#"<span class="action {action}">{action}</span> <code>{id}</code>"#
            )),
            "operation {id} does not say it is a {action}"
        );
    }
    assert_eq!(
        dom.matches(r#"<article class="channel""#).count(),
        channels.len()
    );
    assert_eq!(
        dom.matches(r#"<article class="operation""#).count(),
        operations.len()
    );
}

#[test]
fn the_payments_page_opens_in_a_browser_with_every_channel_and_operation() {
    let page = payments_page();
    let doc = document(&payments::service());
    assert_eq!(
        page.trim_end(),
        to_html(&doc).trim_end(),
        "the CLI prints the page of the document"
    );
    let dom = rendered(&page);
    assert!(
        dom.contains("<title>payments 0.1.0: AsyncAPI 3.0.0</title>"),
        "{dom}"
    );
    assert_shows(&dom, &doc);
    // The JetStream consumer and the server, as text.
    assert!(dom.contains("<dt>stream</dt><dd>PAYMENTS</dd>"), "{dom}");
    assert!(dom.contains("<dt>consumer</dt><dd>capture</dd>"), "{dom}");
    assert!(dom.contains("<code>localhost:4222</code>"), "{dom}");
}

mod shapes {
    use ruststream_nats::prelude::*;
    use serde::{Deserialize, Serialize};

    #[derive(Deserialize, schemars::JsonSchema)]
    pub struct Number {
        pub value: i64,
    }

    #[derive(Serialize, Outgoing, schemars::JsonSchema)]
    #[outgoing(name = "math.doubled")]
    pub struct Doubled {
        pub value: i64,
    }

    #[subscriber("math.double", reply)]
    pub async fn double(n: &Number) -> Result<Doubled, HandlerOutcome> {
        Ok(Doubled { value: n.value * 2 })
    }

    #[subscriber(CoreWildcard::new("orders.>"))]
    pub async fn audit(_n: &Number) -> HandlerOutcome {
        HandlerOutcome::ack()
    }

    /// Any JSON: a payload no schema describes (the others' are declared or traced).
    #[subscriber(JetStreamSubject::new("ledger.*", "LEDGER").durable("book"))]
    pub async fn book(_entry: &serde_json::Value) -> HandlerOutcome {
        HandlerOutcome::ack()
    }

    /// A name full of markup: the page shows it, and it breaks nothing.
    pub const NAME: &str = r#"math <b>"&"</b> </script><script>document.body.setAttribute("data-rendered","broken")</script>"#;

    pub fn app() -> impl App<State = ()> {
        RustStream::new(AppInfo::new(NAME, "1.0.0")).with_broker(
            NatsBroker::new("nats://localhost:4222"),
            |b| {
                b.include(double)
                    .payload_schema::<Number>()
                    .reply_schema::<Doubled>();
                b.include(audit)
                    .retry_to("orders.audit.retry")
                    .dead_letter("dead.audit");
                b.include(book).max_attempts(nonzero!(3));
            },
        )
    }
}

#[test]
fn patterns_schemas_and_markup_are_shown_as_text() {
    let doc = document(&shapes::app());
    let dom = rendered(&to_html(&doc));
    assert_shows(&dom, &doc);
    // The pattern's `>` is text, not markup.
    assert!(
        dom.contains(r#"<h3><code class="address">orders.&gt;</code></h3>"#),
        "{dom}"
    );
    // The name is shown as written, and its `</script>` ended no script early.
    assert!(
        dom.contains(
            "math &lt;b&gt;\"&amp;\"&lt;/b&gt; &lt;/script&gt;&lt;script&gt;document.body.setAttribute(\"data-rendered\",\"broken\")&lt;/script&gt;"
        ),
        "{dom}"
    );
    assert!(!dom.contains(r#"data-rendered="broken""#));
    // The declared schemas, readable: the payload's property and its type (the browser
    // writes a text's quotes as they are).
    let double_in = dom
        .split(r#"id="message-math.double-double.in""#)
        .nth(1)
        .expect("the request's message");
    let schema = &double_in[..double_in.find("</div>").expect("its end")];
    assert!(
        schema.contains(r#"<pre class="schema">"#)
            && schema.contains(r#""value""#)
            && schema.contains(r#""integer""#),
        "{schema}"
    );
    // The reply to the requester's inbox, a message without a schema, the policy.
    assert!(
        dom.contains(r##"<p class="reply">replies on <a href="#channel-double.reply">"##),
        "{dom}"
    );
    assert!(dom.contains("its schema is not known"), "{dom}");
    // A payload without a declaration shows its schema traced from serde: `audit`'s dead
    // letter is a `Number`.
    let dead = dom
        .split(r#"id="message-dead.audit-audit.dead_letter""#)
        .nth(1)
        .expect("the dead letter's message");
    let dead = &dead[..dead.find("</div>").expect("its end")];
    assert!(
        dead.contains(r#"<pre class="schema">"#) && dead.contains(r#""int64""#),
        "{dead}"
    );
    assert!(dom.contains("<dt>max_attempts</dt><dd>3</dd>"), "{dom}");
    assert!(
        dom.contains("<dt>dead_letter</dt><dd>dead.audit</dd>"),
        "{dom}"
    );
}
