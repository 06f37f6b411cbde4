//! After-ack hooks (`ctx.after_ack(..)`): code a handler registers runs once the delivery's
//! `+ACK` reached the server, never for a delivery that was retried or terminated, and a hook
//! that panics is logged with its registration and contained (the consumer goes on).
//!
//! Each body runs on `TestApp` (NATS in process, paused clock) and on a real nats-server. The
//! hook itself asks the server (or the in-process NATS) how many deliveries of the consumer
//! wait for a settlement: with `.confirm_acks()` it finds its own already settled.

mod support;

use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use ruststream::{App, Env};
use ruststream_nats::prelude::*;
use ruststream_nats::testing::{InProcessNats, TestApp};
use support::logs::Logs;
use support::nats::{
    Order, PATIENCE, STREAM, consumer_info, eventually, jetstream_server, order, publish_core,
    publish_stored, until_settled,
};

/// The durable consumer of the JetStream registration.
const DURABLE: &str = "hooked";
/// Retried on its first delivery, acknowledged on the second.
const RETRIED: u64 = 2;
/// Terminated (`drop()`).
const TERMINATED: u64 = 3;
/// Acknowledged; its hook panics.
const PANICS: u64 = 4;

/// How many deliveries of [`DURABLE`] wait for a settlement, as the server reports it.
type Probe = Arc<dyn Fn() -> BoxFuture<'static, usize> + Send + Sync>;

/// What one hook saw when it ran.
#[derive(Debug, Clone, PartialEq)]
struct Ran {
    id: u64,
    /// The delivery whose handler registered the hook (the server's count).
    delivered: Option<u64>,
    /// The consumer's deliveries waiting for a settlement while the hook ran.
    ack_pending: Option<usize>,
}

/// Registers a hook on every delivery, then answers as the order's id says.
#[derive(Clone)]
struct Hooked {
    probe: Option<Probe>,
    ran: Arc<Mutex<Vec<Ran>>>,
}

impl Hooked {
    fn new(probe: Option<Probe>) -> Self {
        Self {
            probe,
            ran: Arc::default(),
        }
    }

    fn ran(&self) -> Vec<Ran> {
        self.ran.lock().expect("not poisoned").clone()
    }

    fn ids(&self) -> Vec<u64> {
        self.ran().iter().map(|r| r.id).collect()
    }
}

impl Handle<Order> for Hooked {
    async fn handle(
        &self,
        order: &Order,
        _outs: &(),
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        let (id, delivered) = (order.id, ctx.delivered());
        let (probe, ran) = (self.probe.clone(), Arc::clone(&self.ran));
        ctx.after_ack(async move {
            let ack_pending = match probe {
                Some(probe) => Some(probe().await),
                None => None,
            };
            ran.lock().expect("not poisoned").push(Ran {
                id,
                delivered,
                ack_pending,
            });
            if id == PANICS {
                panic!("the hook of order {id} panics");
            }
        });
        match id {
            RETRIED if delivered.is_none_or(|d| d == 1) => Err(HandlerOutcome::retry()),
            TERMINATED => Err(HandlerOutcome::drop()),
            _ => Ok(()),
        }
    }
}

/// The app: [`DURABLE`] on `orders.created`, `noted` on Core `notes.created`, and `threaded` on
/// Core `notes.threaded`, whose handler runs on a thread of its own (`.threads(1)`): the hooks
/// its handler registers on the copy of the delivery it owns there run after the original's
/// settlement.
fn app(url: &str, jetstream: Hooked, core: [Hooked; 2], confirm: bool) -> impl App + use<> {
    RustStream::new(AppInfo::new("hooks", "0.1.0")).with_broker(NatsBroker::new(url), move |b| {
        let r = b
            .include(
                JetStreamSubject::new("orders.created", STREAM)
                    .durable(DURABLE)
                    .handler(jetstream),
            )
            .name(DURABLE);
        if confirm {
            r.confirm_acks();
        }
        let [noted, threaded] = core;
        b.include(CoreSubject::new("notes.created").handler(noted))
            .name("noted");
        b.include(CoreSubject::new("notes.threaded").handler(threaded))
            .name("threaded")
            .threads(std::num::NonZeroUsize::MIN);
    })
}

/// What every JetStream body checks once order 5's hook ran: hooks of acknowledged deliveries
/// only, the retried order's from its second delivery, none for the terminated one, and with
/// confirmation each found its delivery settled on the server.
fn assert_jetstream_hooks(hooked: &Hooked, confirm: bool, logs: &Logs) {
    let ran = hooked.ran();
    assert_eq!(hooked.ids(), [1, RETRIED, PANICS, 5], "{ran:#?}");
    let retried = ran.iter().find(|r| r.id == RETRIED).expect("ran");
    assert!(
        retried.delivered.is_none_or(|d| d == 2),
        "the retried delivery's hook does not run, the acknowledged one's does: {retried:?}"
    );
    if confirm {
        assert!(
            ran.iter().all(|r| r.ack_pending == Some(0)),
            "each hook ran after the server settled its delivery: {ran:#?}"
        );
    }
    let panicked = logs.lines_with(&["ERROR", "after-ack hook panicked", DURABLE]);
    assert_eq!(panicked.len(), 1, "{}", logs.text());
    assert!(
        panicked[0].contains("the hook of order 4 panics"),
        "{panicked:?}"
    );
}

async fn in_process_jetstream(confirm: bool) {
    let logs = Logs::default();
    let _guard = logs.install();
    let nats = InProcessNats::new();
    let server = nats.clone();
    let probe: Probe = Arc::new(move || {
        let facts = server.consumer_info(STREAM, DURABLE);
        Box::pin(async move { facts.map_or(usize::MAX, |f| f.ack_pending) })
    });
    let hooked = Hooked::new(Some(probe));
    let t = TestApp::start_on(
        app("nats://unused:4222", hooked.clone(), core_hooks(), confirm),
        nats.clone(),
    )
    .await
    .expect("the app starts");
    for id in 1..=5 {
        t.publish("orders.created", &serde_json::json!({ "id": id }))
            .await
            .expect("published");
        t.settle().await;
        let facts = nats.consumer_info(STREAM, DURABLE).expect("the consumer");
        assert_eq!(facts.ack_pending, 0, "order {id} settled: {facts:?}");
    }
    assert_eq!(
        nats.acknowledgements(STREAM, DURABLE),
        ["+ACK", "-NAK", "+ACK", "+TERM", "+ACK", "+ACK"]
    );
    assert_jetstream_hooks(&hooked, confirm, &logs);
    t.shutdown().await.expect("a clean stop");
}

#[tokio::test(start_paused = true)]
async fn in_process_hooks_run_after_a_confirmed_ack_only() {
    in_process_jetstream(true).await;
}

#[tokio::test(start_paused = true)]
async fn in_process_hooks_run_after_a_flushed_ack_only() {
    in_process_jetstream(false).await;
}

async fn live_jetstream(confirm: bool) {
    let logs = Logs::default();
    let _guard = logs.install();
    let (server, _client, js) = jetstream_server().await;
    let asked = js.clone();
    let probe: Probe = Arc::new(move || {
        let js = asked.clone();
        Box::pin(async move { consumer_info(&js, STREAM, DURABLE).await.num_ack_pending })
    });
    let hooked = Hooked::new(Some(probe));
    let running = app(&server.url(), hooked.clone(), core_hooks(), confirm)
        .start(Env::new())
        .await
        .expect("the app starts");
    // One at a time: while a hook runs, no other delivery of the consumer is pending.
    for id in 1..=5 {
        let seq = publish_stored(&js, "orders.created", order(id)).await;
        until_settled(&js, DURABLE, seq, &format!("order {id} settled")).await;
        let done = hooked.clone();
        // The hooks of acknowledged orders; a terminated one's is the one that never runs.
        if id != TERMINATED {
            eventually(PATIENCE, &format!("the hook of order {id}"), || {
                let ids = done.ids();
                async move { ids.contains(&id).then_some(()) }
            })
            .await;
        }
    }
    assert_jetstream_hooks(&hooked, confirm, &logs);
    let info = consumer_info(&js, STREAM, DURABLE).await;
    assert_eq!(info.num_ack_pending, 0, "{info:#?}");
    assert_eq!(info.delivered.consumer_sequence, 6, "{info:#?}");
    running.stop().await.expect("a clean stop");
}

#[tokio::test]
async fn live_hooks_run_after_a_confirmed_ack_only() {
    live_jetstream(true).await;
}

#[tokio::test]
async fn live_hooks_run_after_a_flushed_ack_only() {
    live_jetstream(false).await;
}

/// Core: nothing is sent to the server; the hooks run after an `ack()` outcome, not after
/// `drop()` or `retry()`.
fn assert_core_hooks(core: &[Hooked; 2], logs: &Logs) {
    for (hooked, registration) in core.iter().zip(["noted", "threaded"]) {
        assert_eq!(
            hooked.ids(),
            [1, PANICS, 5],
            "{registration}: {:#?}",
            hooked.ran()
        );
        let panicked = logs.lines_with(&[
            "ERROR",
            "after-ack hook panicked",
            &format!("registration={registration} "),
        ]);
        assert_eq!(panicked.len(), 1, "{registration}: {}", logs.text());
    }
}

/// The two Core registrations of [`app`], each with a hook on every delivery.
fn core_hooks() -> [Hooked; 2] {
    [Hooked::new(None), Hooked::new(None)]
}

#[tokio::test(start_paused = true)]
async fn in_process_core_hooks_run_after_an_ack_outcome() {
    let logs = Logs::default();
    let _guard = logs.install();
    let core = core_hooks();
    let t = TestApp::start(app(
        "nats://unused:4222",
        Hooked::new(None),
        core.clone(),
        false,
    ))
    .await
    .expect("the app starts");
    for id in 1..=5 {
        for subject in ["notes.created", "notes.threaded"] {
            t.publish(subject, &serde_json::json!({ "id": id }))
                .await
                .expect("published");
        }
    }
    // The threaded registration's handler runs on a thread of its own, outside the paused
    // clock: waited for on the wall clock.
    let deadline = std::time::Instant::now() + PATIENCE;
    while core.iter().any(|hooked| !hooked.ids().contains(&5)) {
        assert!(
            std::time::Instant::now() < deadline,
            "the hooks of order 5: {core:#?}",
            core = core.iter().map(Hooked::ran).collect::<Vec<_>>()
        );
        t.settle().await;
        tokio::task::spawn_blocking(|| std::thread::sleep(std::time::Duration::from_millis(5)))
            .await
            .expect("slept");
    }
    assert_core_hooks(&core, &logs);
    t.shutdown().await.expect("a clean stop");
}

#[tokio::test]
async fn live_core_hooks_run_after_an_ack_outcome() {
    let logs = Logs::default();
    let _guard = logs.install();
    let (server, client, _js) = jetstream_server().await;
    let core = core_hooks();
    let running = app(&server.url(), Hooked::new(None), core.clone(), false)
        .start(Env::new())
        .await
        .expect("the app starts");
    for id in 1..=5 {
        publish_core(&client, "notes.created", &[], order(id)).await;
        publish_core(&client, "notes.threaded", &[], order(id)).await;
    }
    // Handled in order, one at a time: once order 5's hook ran, every earlier one had its turn.
    for hooked in &core {
        eventually(PATIENCE, "the hook of order 5", || {
            let ids = hooked.ids();
            async move { ids.contains(&5).then_some(()) }
        })
        .await;
    }
    assert_core_hooks(&core, &logs);
    running.stop().await.expect("a clean stop");
}

/// The durable of the registration whose retries run again in their lane.
const LANED: &str = "laned";

/// Retries the first attempt and acknowledges the second; each attempt registers a hook that
/// records its attempt number.
#[derive(Clone, Default)]
struct InPlace(Arc<Mutex<Vec<u32>>>);

impl InPlace {
    fn ran(&self) -> Vec<u32> {
        self.0.lock().expect("not poisoned").clone()
    }
}

impl Handle<Order> for InPlace {
    async fn handle(
        &self,
        _order: &Order,
        _outs: &(),
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        let attempt = ctx.attempt().get();
        let ran = Arc::clone(&self.0);
        ctx.after_ack(async move { ran.lock().expect("not poisoned").push(attempt) });
        if attempt == 1 {
            Err(HandlerOutcome::retry())
        } else {
            Ok(())
        }
    }
}

/// Lanes by order id: a retry runs the handler again on the same delivery, in its lane.
fn laned(url: &str, handler: InPlace) -> impl App + use<> {
    RustStream::new(AppInfo::new("hooks", "0.1.0")).with_broker(NatsBroker::new(url), move |b| {
        b.include(
            JetStreamSubject::new("orders.created", STREAM)
                .durable(LANED)
                .handler(handler),
        )
        .name(LANED)
        .concurrency(std::num::NonZeroUsize::new(2).expect("two"))
        .by_key(|order: &Order| order.id);
    })
}

/// Only the acknowledged attempt's hook runs: the attempt that asked for the retry registered
/// its hook for an acknowledgement that never came, and the server saw one `+ACK`, no `-NAK`.
async fn a_retry_in_its_lane_drops_the_hooks_of_the_attempt_before(t: &TestApp, ran: &InPlace) {
    t.publish("orders.created", &serde_json::json!({ "id": 1 }))
        .await
        .expect("published");
    t.settle().await;
    let hooks = ran.clone();
    eventually(PATIENCE, "the acknowledged attempt's hook", || {
        let ran = hooks.ran();
        async move { (!ran.is_empty()).then_some(()) }
    })
    .await;
    assert_eq!(ran.ran(), [2]);
    let acks = t.acknowledgements(STREAM, LANED);
    assert_eq!(acks.iter().filter(|a| *a == "+ACK").count(), 1, "{acks:?}");
    assert!(!acks.iter().any(|a| a.starts_with("-NAK")), "{acks:?}");
}

#[tokio::test(start_paused = true)]
async fn in_process_a_retry_in_its_lane_drops_the_hooks_of_the_attempt_before() {
    let ran = InPlace::default();
    let t = TestApp::start(laned("nats://unused:4222", ran.clone()))
        .await
        .expect("the app starts");
    a_retry_in_its_lane_drops_the_hooks_of_the_attempt_before(&t, &ran).await;
    t.shutdown().await.expect("a clean stop");
}

#[tokio::test]
async fn live_a_retry_in_its_lane_drops_the_hooks_of_the_attempt_before() {
    let (server, _client, _js) = jetstream_server().await;
    let ran = InPlace::default();
    let t = TestApp::start_live(laned(&server.url(), ran.clone()), &server.url())
        .await
        .expect("the app starts on the server");
    a_retry_in_its_lane_drops_the_hooks_of_the_attempt_before(&t, &ran).await;
    t.shutdown().await.expect("a clean stop");
}
