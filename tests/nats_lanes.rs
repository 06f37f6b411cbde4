//! Ordering lanes (`.concurrency(16).by_key(..)`), run with the same bodies on `TestApp` (NATS in
//! process, paused clock) and on a real nats-server: the messages of one key are handled one at
//! a time in the order they were published, different keys at once, and a `retry()` runs again
//! in its place, before the next message of its key, without going back to the server (which
//! saw one `+ACK` per message and nothing else). Also: what the startup checks refuse, and what
//! `describe` shows.

mod support;

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ruststream::{
    App, AppInfo, BatchContext, BatchOutcome, Context, Handle, HandleBatch, HandlerOutcome,
    RustStream,
};
use ruststream_nats::testing::ConsumerFacts;
use ruststream_nats::{CoreSubject, JetStreamSubject, NatsBroker};
use serde::{Deserialize, Serialize};
use support::fidelity::app::AppWire;

const STREAM: &str = "PAYMENTS";
const ACCOUNTS: u32 = 40;
const PER_ACCOUNT: u32 = 25;
const TOTAL: u64 = (ACCOUNTS * PER_ACCOUNT) as u64;

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Payment {
    account: u32,
    seq: u32,
}

impl Payment {
    /// Every 7th payment asks for a retry on its first attempt.
    fn retried(self) -> bool {
        (self.account * PER_ACCOUNT + self.seq).is_multiple_of(7)
    }
}

/// What the handler saw: each call's (account, seq, attempt) in the order the calls started,
/// the calls in flight (most of them at once, overall), and any call that started while
/// another of its account ran.
#[derive(Clone, Default)]
struct Ledger {
    calls: Arc<Mutex<Vec<(u32, u32, u32)>>>,
    busy: Arc<Mutex<HashMap<u32, bool>>>,
    overlaps: Arc<AtomicUsize>,
    in_flight: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
}

impl Ledger {
    fn calls(&self) -> Vec<(u32, u32, u32)> {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

struct Post(Ledger);

impl Handle<Payment> for Post {
    async fn handle(
        &self,
        payment: &Payment,
        _outs: &(),
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        let ledger = &self.0;
        let attempt = ctx.attempt().get();
        {
            let mut busy = ledger.busy.lock().unwrap_or_else(PoisonError::into_inner);
            if std::mem::replace(busy.entry(payment.account).or_default(), true) {
                ledger.overlaps.fetch_add(1, Ordering::SeqCst);
            }
            ledger
                .calls
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((payment.account, payment.seq, attempt));
        }
        let now = ledger.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        ledger.most.fetch_max(now, Ordering::SeqCst);
        // Some I/O: the other lanes run meanwhile.
        tokio::time::sleep(Duration::from_millis(1)).await;
        ledger.in_flight.fetch_sub(1, Ordering::SeqCst);
        ledger
            .busy
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(payment.account, false);
        if attempt == 1 && payment.retried() {
            return Err(HandlerOutcome::retry());
        }
        Ok(())
    }
}

fn sixteen() -> NonZeroUsize {
    NonZeroUsize::new(16).unwrap_or(NonZeroUsize::MIN)
}

fn ledger_app(ledger: &Ledger, url: &str) -> impl App + use<> {
    let ledger = ledger.clone();
    RustStream::new(AppInfo::new("ledger", "0.1.0")).with_broker(NatsBroker::new(url), |b| {
        b.include(
            JetStreamSubject::new("payments.posted", STREAM)
                .durable("ledger")
                .handler(Post(ledger.clone())),
        )
        .name("ledger")
        .concurrency(sixteen())
        .by_key(|payment: &Payment| payment.account);
    })
}

/// Runs scenario `$body` on the app `$app` makes, in process (paused clock) and on a real
/// nats-server; the scenario stops the app.
macro_rules! in_process_and_live {
    ($body:ident, $state:ty, $app:ident) => {
        mod $body {
            use super::*;

            #[tokio::test(start_paused = true)]
            async fn in_process() {
                let state = <$state>::default();
                let wire = AppWire::in_process(|url| $app(&state, url)).await;
                super::$body(&wire, &state).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn live() {
                let state = <$state>::default();
                let wire = AppWire::live(|url| $app(&state, url)).await;
                super::$body(&wire, &state).await;
            }
        }
    };
}

in_process_and_live!(
    each_account_is_posted_in_order_with_retries_in_place,
    Ledger,
    ledger_app
);
in_process_and_live!(retries_run_in_place_up_to_the_cap, Steps, steps_app);
in_process_and_live!(a_stop_runs_what_waits_in_a_lane, Steps, steps_app);

async fn each_account_is_posted_in_order_with_retries_in_place(wire: &AppWire, ledger: &Ledger) {
    // Interleaved: seq 0 of every account, then seq 1 of every account, ...
    for seq in 0..PER_ACCOUNT {
        for account in 0..ACCOUNTS {
            wire.publish("payments.posted", &Payment { account, seq })
                .await;
        }
    }
    let acked = |w: &AppWire| {
        w.acks(STREAM, "ledger")
            .iter()
            .filter(|a| *a == "+ACK")
            .count() as u64
    };
    wire.wait_until(|w| acked(w) >= TOTAL).await;
    wire.quiet().await;

    let calls = ledger.calls();
    let retried = (0..ACCOUNTS)
        .flat_map(|account| (0..PER_ACCOUNT).map(move |seq| Payment { account, seq }))
        .filter(|p| p.retried())
        .count();
    assert_eq!(
        calls.len() as u64,
        TOTAL + retried as u64,
        "each retried once"
    );
    for account in 0..ACCOUNTS {
        // Each payment in publishing order; a retried one twice in a row (attempts 1, 2).
        let expected: Vec<(u32, u32)> = (0..PER_ACCOUNT)
            .flat_map(|seq| {
                let p = Payment { account, seq };
                if p.retried() {
                    vec![(seq, 1), (seq, 2)]
                } else {
                    vec![(seq, 1)]
                }
            })
            .collect();
        let handled: Vec<(u32, u32)> = calls
            .iter()
            .filter(|(a, _, _)| *a == account)
            .map(|&(_, seq, attempt)| (seq, attempt))
            .collect();
        assert_eq!(handled, expected, "account {account}, in publishing order");
    }
    assert_eq!(
        ledger.overlaps.load(Ordering::SeqCst),
        0,
        "never two payments of one account at once"
    );
    let most = ledger.most.load(Ordering::SeqCst);
    println!("at most {most} payments posted at once");
    assert!(most > 1, "different accounts ran in parallel");
    assert!(most <= 16, "never more than the concurrency: {most}");

    // The server saw one `+ACK` per message, and a `+WPI` (its `ack_wait` starts again) before
    // each retry in place: no `-NAK`, the retries never went back to it, and nothing was
    // delivered twice.
    let acks = wire.acks(STREAM, "ledger");
    let count = |wire: &str| acks.iter().filter(|a| *a == wire).count();
    assert_eq!(
        (count("+ACK") as u64, count("+WPI"), acks.len()),
        (TOTAL, retried, TOTAL as usize + retried),
        "one +ACK per message, one +WPI per retry, nothing else"
    );
    assert_eq!(
        wire.consumer_info(STREAM, "ledger").await,
        ConsumerFacts::new(TOTAL, TOTAL, 0, 0, 0),
        "each delivered once, all acknowledged"
    );
    wire.shutdown().await;
}

/// A batch handler, for the startup check.
struct Batched;

impl HandleBatch<Payment> for Batched {
    async fn handle_batch(
        &self,
        payments: &[Payment],
        _outs: &(),
        _ctx: &mut BatchContext<'_>,
    ) -> BatchOutcome {
        vec![HandlerOutcome::ack(); payments.len()].into()
    }
}

/// The startup error of an app with the one registration `mount` makes.
async fn refused(mount: impl FnOnce(&mut ruststream::Scope<()>)) -> String {
    // Nothing listens there: the checks run before anything connects.
    let app = RustStream::new(AppInfo::new("ledger", "0.1.0"))
        .with_broker(NatsBroker::new("nats://127.0.0.1:1"), mount);
    match app.start(ruststream::Env::new()).await {
        Ok(_) => panic!("the app started"),
        Err(err) => err.to_string(),
    }
}

#[tokio::test]
async fn lanes_are_refused_where_they_cannot_keep_the_order() {
    let ledger = Ledger::default();
    let one = refused(|b| {
        b.include(
            JetStreamSubject::new("payments.posted", STREAM)
                .durable("ledger")
                .handler(Post(ledger.clone())),
        )
        .by_key(|payment: &Payment| payment.account);
    })
    .await;
    assert!(one.contains("concurrency is 1"), "{one}");

    let batch = refused(|b| {
        b.include(
            JetStreamSubject::new("payments.posted", STREAM)
                .durable("ledger")
                .batch(ruststream::nonzero!(10))
                .handler(Batched),
        )
        .concurrency(sixteen())
        .by_key_header("account");
    })
    .await;
    assert!(batch.contains("batch handler"), "{batch}");

    let core = refused(|b| {
        b.include(CoreSubject::new("payments.posted").handler(Post(ledger.clone())))
            .concurrency(sixteen())
            .by_key(|payment: &Payment| payment.account);
    })
    .await;
    assert!(core.contains("JetStream only"), "{core}");
}

#[test]
fn describe_shows_the_lane_key() {
    let app = ledger_app(&Ledger::default(), "nats://127.0.0.1:1");
    let table = ruststream::app::cli::describe(&app);
    assert!(table.contains("16 by key (payload)"), "{table}");
    let json = ruststream::app::cli::describe_json(&app);
    assert_eq!(json["registrations"][0]["lane_key"], "payload");
    assert_eq!(json["registrations"][0]["concurrency"], 16);
}

/// A step of account `account` (the `account` header): its handler fails its first `fails`
/// attempts (a `retry_after(delay_ms)`, or `retry()` without a delay), and a held step waits for
/// the test's pass first.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
struct Step {
    seq: u32,
    fails: u32,
    delay_ms: u64,
    held: bool,
}

/// What the steps' handler saw, each call's (seq, attempt) in order, and the pass held steps wait
/// for.
#[derive(Clone)]
struct Steps {
    calls: Arc<Mutex<Vec<(u32, u32)>>>,
    gate: Arc<tokio::sync::Semaphore>,
}

impl Default for Steps {
    fn default() -> Self {
        Self {
            calls: Arc::default(),
            gate: Arc::new(tokio::sync::Semaphore::new(0)),
        }
    }
}

impl Steps {
    fn calls(&self) -> Vec<(u32, u32)> {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Handle<Step> for Steps {
    async fn handle(
        &self,
        step: &Step,
        _outs: &(),
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        let attempt = ctx.attempt().get();
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((step.seq, attempt));
        if step.held {
            self.gate
                .acquire()
                .await
                .map_err(|_| HandlerOutcome::retry())?
                .forget();
        }
        if attempt <= step.fails {
            return Err(match step.delay_ms {
                0 => HandlerOutcome::retry(),
                ms => HandlerOutcome::retry_after(Duration::from_millis(ms)),
            });
        }
        Ok(())
    }
}

fn steps_app(steps: &Steps, url: &str) -> impl App + use<> {
    let steps = steps.clone();
    let ack_wait = ruststream::NonZeroDuration::new(support::fidelity::ACK_WAIT)
        .unwrap_or_else(|| unreachable!());
    RustStream::new(AppInfo::new("steps", "0.1.0")).with_broker(NatsBroker::new(url), |b| {
        b.include(
            JetStreamSubject::new("steps.run", "STEPS")
                .durable("steps")
                .ack_wait(ack_wait)
                .handler(steps.clone()),
        )
        .name("steps")
        .concurrency(NonZeroUsize::new(4).unwrap_or(NonZeroUsize::MIN))
        .max_attempts(ruststream::nonzero!(3))
        .dead_letter("steps.dead")
        .by_key_header("account");
    })
}

async fn publish_step(wire: &AppWire, account: Option<&str>, step: Step) {
    let headers: ruststream::Headers = account.map(|a| ("account", a)).into_iter().collect();
    let payload = serde_json::to_vec(&step).unwrap_or_default();
    wire.publish_raw("steps.run", headers, payload).await;
}

fn count(acks: &[String], wire: &str) -> usize {
    acks.iter().filter(|a| *a == wire).count()
}

/// A step that always fails is retried in place up to the cap and dead-lettered; the next step
/// of its account runs only then. A `retry_after` longer than `ack_wait` waits in place, kept
/// alive with `+WPI`, and so is the step waiting behind it (1.5 s, past its `ack_wait` too): the
/// server delivers neither again. A step without the header runs on its own.
async fn retries_run_in_place_up_to_the_cap(wire: &AppWire, steps: &Steps) {
    let spent = Step {
        seq: 0,
        fails: 9,
        ..Step::default()
    };
    let slow = Step {
        seq: 1,
        fails: 1,
        delay_ms: 1_500,
        ..Step::default()
    };
    publish_step(wire, Some("a"), spent).await;
    publish_step(wire, Some("a"), slow).await;
    publish_step(
        wire,
        Some("a"),
        Step {
            seq: 2,
            ..Step::default()
        },
    )
    .await;
    publish_step(
        wire,
        None,
        Step {
            seq: 9,
            ..Step::default()
        },
    )
    .await;
    let settled = |w: &AppWire| {
        let acks = w.acks("STEPS", "steps");
        count(&acks, "+ACK") + count(&acks, "+TERM")
    };
    wire.wait_until(|w| settled(w) >= 4).await;
    wire.quiet().await;

    let of_a: Vec<(u32, u32)> = steps.calls().into_iter().filter(|c| c.0 != 9).collect();
    assert_eq!(
        of_a,
        [(0, 1), (0, 2), (0, 3), (1, 1), (1, 2), (2, 1)],
        "in order, each retry in place, up to the cap"
    );
    assert!(
        steps.calls().contains(&(9, 1)),
        "the step without a key ran"
    );
    let dead: Vec<Step> = wire.published("steps.dead");
    assert_eq!(dead.len(), 1, "the spent step was dead-lettered");
    assert_eq!(dead[0].seq, 0);
    let acks = wire.acks("STEPS", "steps");
    assert_eq!(count(&acks, "-NAK"), 0, "no retry went back: {acks:?}");
    assert!(
        count(&acks, "+WPI") > 3,
        "a +WPI before each retry, and while the 1.5 s delay ran: {acks:?}"
    );
    assert_eq!(
        wire.consumer_info("STEPS", "steps").await,
        ConsumerFacts::new(4, 4, 0, 0, 0),
        "each delivered once (the 1.5 s wait outlived the 1 s ack_wait), all settled"
    );
    wire.shutdown().await;
}

/// On stop, the steps waiting behind a running one are not given back to the server (a `-NAK`
/// would spend a delivery of each without the handler running): the lane runs them after it,
/// in order, within the drain, and each is acknowledged at its first delivery.
async fn a_stop_runs_what_waits_in_a_lane(wire: &AppWire, steps: &Steps) {
    let held = Step {
        held: true,
        ..Step::default()
    };
    for seq in 0..3 {
        publish_step(wire, Some("b"), Step { seq, ..held }).await;
    }
    wire.wait_until(|_| steps.calls() == [(0, 1)]).await;
    // The gate opens once the stop began.
    tokio::join!(wire.shutdown(), async { steps.gate.add_permits(3) });
    wire.wait_until(|w| count(&w.acks("STEPS", "steps"), "+ACK") == 3)
        .await;
    assert_eq!(
        steps.calls(),
        [(0, 1), (1, 1), (2, 1)],
        "the waiting steps ran after the running one, in order"
    );
    let acks = wire.acks("STEPS", "steps");
    assert_eq!(
        (count(&acks, "+ACK"), count(&acks, "-NAK")),
        (3, 0),
        "{acks:?}"
    );
}
