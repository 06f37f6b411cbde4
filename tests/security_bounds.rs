//! Memory stays bounded whatever a publisher sends, against a real nats-server: a Core
//! subscription holds at most `subscription_capacity` messages for its busy handlers and reports
//! what it drops (naming the registration, with a count); delayed Core retry copies are bounded.
//! Without `subscription_capacity`, a burst past async-nats's default buffer is not dropped.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ruststream::{Context, Handle, HandlerOutcome};
use ruststream_nats::{CoreSubject, NatsBroker};
use ruststream_test_server::NatsServer;
use ruststream_test_server::client::{PATIENCE, eventually};
use support::nats::{Order, Scripted, order, start};
use support::security::capture;

/// The number after `key=` in a log line.
fn field(line: &str, key: &str) -> u64 {
    let after = &line[line.find(&format!("{key}=")).expect("the field") + key.len() + 1..];
    after
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a number")
}

#[tokio::test]
async fn a_slow_core_subscription_reports_what_it_drops() {
    const PUBLISHED: u64 = 1_000;
    let captured = capture();
    let server = NatsServer::start();
    let handler = Scripted::always(HandlerOutcome::ack()).slow(Duration::from_millis(50));
    let app = start(
        NatsBroker::new(server.url()).subscription_capacity(10),
        |b| {
            b.include(CoreSubject::new("audit.events").handler(handler.clone()))
                .name("slow_audit");
        },
    )
    .await
    .expect("the app starts");

    let client = async_nats::connect(server.url()).await.expect("connects");
    for id in 0..PUBLISHED {
        client
            .publish("audit.events", order(id).into())
            .await
            .expect("published");
    }
    client.flush().await.expect("flushed");

    // The warning names the registration and counts the dropped messages.
    let lines = eventually(PATIENCE, "a slow-consumer warning", || {
        let lines = captured.lines_with(&["WARN", "registration=slow_audit", "dropped="]);
        async move { (!lines.is_empty()).then_some(lines) }
    })
    .await;
    assert!(lines[0].contains("subscription_capacity"), "{}", lines[0]);
    assert!(lines[0].contains("subject=audit.events"), "{}", lines[0]);
    let dropped: u64 = lines.iter().map(|line| field(line, "dropped")).sum();
    assert!(dropped > 0, "{lines:?}");

    app.stop().await.expect("the app stops");
    let handled = handler.seen().len() as u64;
    // A 50 ms handler cannot take 1 000 messages in the time they arrive: with room for 10,
    // most are dropped, and each one dropped is counted at most once.
    assert!(handled < PUBLISHED / 2, "handled {handled}");
    let dropped: u64 = captured
        .lines_with(&["WARN", "registration=slow_audit", "dropped="])
        .iter()
        .map(|line| field(line, "dropped"))
        .sum();
    assert!(
        handled + dropped <= PUBLISHED,
        "handled {handled} + dropped {dropped} > {PUBLISHED}"
    );
    eprintln!("handled {handled}, reported dropped {dropped} of {PUBLISHED}");
}

/// A handler that holds its first message until the test opens the gate, and counts them all.
#[derive(Clone)]
struct Gated {
    gate: Arc<tokio::sync::Semaphore>,
    handled: Arc<AtomicU64>,
}

impl Handle<Order> for Gated {
    async fn handle(
        &self,
        order: &Order,
        _outs: &(),
        _ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        if order.id == 0 {
            let _open = self.gate.acquire().await;
        }
        self.handled.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// A handler held up while an unthrottled publisher sends more Core messages than async-nats's
/// default subscription buffer (65 536) takes: the broker's client holds them all, so none is
/// dropped and no slow consumer is reported (the peer bench's Core burst lost messages so).
#[tokio::test]
async fn a_core_burst_past_the_client_default_is_not_dropped() {
    const PUBLISHED: u64 = 70_000;
    let captured = capture();
    let server = NatsServer::start();
    let handler = Gated {
        gate: Arc::new(tokio::sync::Semaphore::new(0)),
        handled: Arc::default(),
    };
    let app = start(NatsBroker::new(server.url()), |b| {
        b.include(CoreSubject::new("burst.events").handler(handler.clone()))
            .name("burst");
    })
    .await
    .expect("the app starts");

    let client = async_nats::connect(server.url()).await.expect("connects");
    for id in 0..PUBLISHED {
        client
            .publish("burst.events", order(id).into())
            .await
            .expect("published");
    }
    client.flush().await.expect("flushed");
    // The server has them all; a moment for it to write them to the app's client, which holds
    // them while the handler waits.
    tokio::time::sleep(Duration::from_millis(500)).await;
    handler.gate.add_permits(1);

    let handled = eventually(PATIENCE, "every message handled", || {
        let handled = handler.handled.load(Ordering::Relaxed);
        async move { (handled == PUBLISHED).then_some(handled) }
    })
    .await;
    assert_eq!(handled, PUBLISHED);
    let dropped = captured.lines_with(&["registration=burst", "dropped="]);
    assert!(dropped.is_empty(), "{dropped:?}");
    app.stop().await.expect("the app stops");
}

/// 100 000 Core messages each answered `retry_after(1 h)`, in process on tokio's paused clock:
/// no more than the bound wait (10 000 by default), the rest are refused with one error line
/// (rate-limited), and the ones that waited come back after the hour.
#[tokio::test(start_paused = true)]
async fn delayed_core_copies_are_bounded() {
    use ruststream::{AppInfo, RustStream};
    use ruststream_nats::testing::TestApp;

    const MESSAGES: u64 = 100_000;
    const BOUND: u64 = 10_000;
    let captured = capture();
    let hour = Duration::from_secs(3_600);
    let handler = Scripted::first_then_ack(HandlerOutcome::retry_after(hour));
    let app = RustStream::new(AppInfo::new("bounds", "0.1.0")).with_broker(
        NatsBroker::new("nats://localhost:4222"),
        |b| {
            b.include(CoreSubject::new("reminders.due").handler(handler.clone()))
                .name("reminders");
        },
    );
    let t = TestApp::start(app).await.expect("the app starts");
    for id in 0..MESSAGES {
        t.publish_raw("reminders.due", ruststream::Headers::new(), order(id))
            .await
            .expect("published");
        if id % 1_000 == 999 {
            t.settle().await;
        }
    }
    t.settle().await;
    assert_eq!(handler.seen().len() as u64, MESSAGES);
    let refused = captured.lines_with(&["ERROR", "registration=reminders", "was refused"]);
    assert_eq!(
        refused.len(),
        1,
        "one line for the whole flood: {refused:?}"
    );
    assert!(refused[0].contains("waiting=10000"), "{}", refused[0]);
    assert!(
        refused[0].contains(".max_delayed_copies(..)"),
        "{}",
        refused[0]
    );

    t.advance(hour).await;
    let seen = handler.seen();
    let second: Vec<_> = seen.iter().filter(|s| s.attempt == 2).collect();
    assert_eq!(
        second.len() as u64,
        BOUND,
        "the copies that waited came back"
    );
    t.shutdown().await.expect("the app stops");
}

/// The same bound against a real server: 5 may wait, the other 15 are refused.
#[tokio::test]
async fn delayed_core_copies_are_bounded_live() {
    let captured = capture();
    let server = NatsServer::start();
    let handler = Scripted::first_then_ack(HandlerOutcome::retry_after(Duration::from_secs(3_600)));
    let app = start(NatsBroker::new(server.url()).max_delayed_copies(5), |b| {
        b.include(CoreSubject::new("live.reminders").handler(handler.clone()))
            .name("live_reminders");
    })
    .await
    .expect("the app starts");
    let client = async_nats::connect(server.url()).await.expect("connects");
    for id in 0..20 {
        client
            .publish("live.reminders", order(id).into())
            .await
            .expect("published");
    }
    client.flush().await.expect("flushed");
    handler.until_seen(20).await;
    let refused = eventually(PATIENCE, "the refusal logged", || {
        let lines = captured.lines_with(&["ERROR", "registration=live_reminders", "was refused"]);
        async move { (!lines.is_empty()).then_some(lines) }
    })
    .await;
    assert!(refused[0].contains("waiting=5"), "{}", refused[0]);
    app.stop().await.expect("the app stops");
    // The drain says how many copies were still waiting: the bound, not the 20.
    let dropped = captured.lines_with(&["5 pending retry copies were dropped"]);
    assert_eq!(dropped.len(), 1, "{}", captured.text());
}
