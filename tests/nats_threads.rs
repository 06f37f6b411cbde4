//! `.threads(n)`: a CPU-bound handler's calls run on threads of the registration's own, so an
//! async registration of the same app answers requests while every one of those calls is still
//! computing. Run with the same bodies on `TestApp` (NATS in process, paused clock) and on a
//! real nats-server; each asserts what the server saw. Also: a panic on those threads is a
//! handler panic, `.by_key(..)` lanes keep their order on them, what the startup checks
//! refuse, and what `describe` shows.

mod support;

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use ruststream::{
    App, AppInfo, BatchContext, BatchOutcome, Context, Handle, HandleBatch, HandlerOutcome,
    Outgoing, RustStream, subscriber,
};
use ruststream_nats::testing::ConsumerFacts;
use ruststream_nats::{JetStreamSubject, NatsBroker};
use serde::{Deserialize, Serialize};
use support::fidelity::app::AppWire;

const STREAM: &str = "WORK";
const JOBS: u64 = 6;

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Job {
    id: u32,
    /// Panics on its first attempt.
    panics: bool,
}

/// What the CPU-bound handler saw, and the gate its calls spin on.
#[derive(Clone)]
struct Crunch {
    started: tokio::sync::watch::Sender<usize>,
    finished: Arc<AtomicUsize>,
    /// While set, a call keeps computing after its 50 ms (a busy loop, never an `.await`).
    hold: Arc<AtomicBool>,
    threads: Arc<Mutex<Vec<String>>>,
}

impl Default for Crunch {
    fn default() -> Self {
        Self {
            started: tokio::sync::watch::Sender::new(0),
            finished: Arc::default(),
            hold: Arc::new(AtomicBool::new(true)),
            threads: Arc::default(),
        }
    }
}

/// Computes for `at_least`, then while `hold` is set (up to a minute), without yielding to
/// any runtime: the thread it runs on is busy all that time.
fn busy(at_least: Duration, hold: &AtomicBool) {
    let start = Instant::now();
    let mut x: u64 = 1;
    while start.elapsed() < at_least
        || (hold.load(Ordering::SeqCst) && start.elapsed() < Duration::from_secs(60))
    {
        for _ in 0..1000 {
            x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
        }
    }
}

impl Handle<Job> for Crunch {
    async fn handle(
        &self,
        job: &Job,
        _outs: &(),
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        let thread = std::thread::current();
        let name = thread.name().unwrap_or("unnamed").to_owned();
        self.threads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(name);
        self.started.send_modify(|n| *n += 1);
        assert!(
            !(job.panics && ctx.attempt().get() == 1),
            "job {} panics on its first attempt",
            job.id
        );
        busy(Duration::from_millis(50), &self.hold);
        self.finished.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Ping {
    n: u32,
}

#[derive(Debug, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "echo.answered")]
struct Pong {
    n: u32,
}

/// The async registration: it answers at once.
#[subscriber("echo.ask", reply)]
async fn echo(ping: &Ping) -> Result<Pong, HandlerOutcome> {
    Ok(Pong { n: ping.n })
}

fn two() -> NonZeroUsize {
    NonZeroUsize::new(2).unwrap_or(NonZeroUsize::MIN)
}

fn crunch_app(crunch: &Crunch, url: &str) -> impl App + use<> {
    let crunch = crunch.clone();
    RustStream::new(AppInfo::new("render", "0.1.0")).with_broker(NatsBroker::new(url), |b| {
        b.include(
            JetStreamSubject::new("work.crunch", STREAM)
                .durable("crunch")
                .handler(crunch.clone()),
        )
        .name("crunch")
        .concurrency(two())
        .threads(two());
        b.include(echo);
    })
}

/// Runs scenario `$body` in process (paused clock) and on a real nats-server.
macro_rules! in_process_and_live {
    ($body:ident) => {
        mod $body {
            use super::*;

            #[tokio::test(start_paused = true)]
            async fn in_process() {
                let crunch = Crunch::default();
                let wire = AppWire::in_process(|url| crunch_app(&crunch, url)).await;
                super::$body(&wire, &crunch).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn live() {
                let crunch = Crunch::default();
                let wire = AppWire::live(|url| crunch_app(&crunch, url)).await;
                super::$body(&wire, &crunch).await;
            }
        }
    };
}

in_process_and_live!(requests_are_answered_while_every_thread_computes);
in_process_and_live!(a_panic_on_the_threads_is_a_handler_panic);
in_process_and_live!(a_stop_waits_for_the_calls_on_the_threads);

async fn requests_are_answered_while_every_thread_computes(wire: &AppWire, crunch: &Crunch) {
    for id in 0..JOBS as u32 {
        let job = Job { id, panics: false };
        wire.publish("work.crunch", &job).await;
    }
    // Both threads are computing, and stay so until released: no clock needed to wait.
    let mut started = crunch.started.subscribe();
    started
        .wait_for(|n| *n >= 2)
        .await
        .expect("the handler runs");

    // Answered while both calls still compute: the app's runtime was never held by them.
    for n in 0..5 {
        let pong: Pong = wire.request("echo.ask", &Ping { n }).await;
        assert_eq!(pong.n, n);
    }
    assert_eq!(
        crunch.finished.load(Ordering::SeqCst),
        0,
        "every answer came while the CPU-bound calls were still computing"
    );
    assert_eq!(
        *crunch.started.borrow(),
        2,
        "two threads, two calls at once"
    );

    crunch.hold.store(false, Ordering::SeqCst);
    wire.wait_until(|w| w.acks(STREAM, "crunch").len() as u64 >= JOBS)
        .await;
    wire.quiet().await;

    let threads = crunch
        .threads
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    assert_eq!(threads.len() as u64, JOBS);
    assert!(
        threads.iter().all(|t| t == "crunch-0" || t == "crunch-1"),
        "every call ran on the registration's threads: {threads:?}"
    );
    assert_eq!(
        wire.acks(STREAM, "crunch"),
        vec!["+ACK"; JOBS as usize],
        "one +ACK per job, nothing else"
    );
    assert_eq!(
        wire.consumer_info(STREAM, "crunch").await,
        ConsumerFacts::new(JOBS, JOBS, 0, 0, 0),
        "each delivered once, all acknowledged"
    );
    wire.shutdown().await;
}

async fn a_panic_on_the_threads_is_a_handler_panic(wire: &AppWire, crunch: &Crunch) {
    crunch.hold.store(false, Ordering::SeqCst);
    wire.publish(
        "work.crunch",
        &Job {
            id: 7,
            panics: true,
        },
    )
    .await;
    wire.wait_until(|w| w.acks(STREAM, "crunch").iter().any(|a| a == "+ACK"))
        .await;
    wire.quiet().await;
    // The panic was caught on the thread and became the registration's `on_panic`
    // (`retry()`): a `-NAK`, then the second attempt acknowledged.
    assert_eq!(wire.acks(STREAM, "crunch"), vec!["-NAK", "+ACK"]);
    assert_eq!(wire.attempts("crunch"), vec![1, 2]);
    assert_eq!(
        wire.consumer_info(STREAM, "crunch").await,
        ConsumerFacts::new(2, 1, 0, 0, 0),
        "delivered twice, acknowledged"
    );
    wire.shutdown().await;
}

async fn a_stop_waits_for_the_calls_on_the_threads(wire: &AppWire, crunch: &Crunch) {
    for id in 0..2 {
        wire.publish("work.crunch", &Job { id, panics: false })
            .await;
    }
    let mut started = crunch.started.subscribe();
    started
        .wait_for(|n| *n >= 2)
        .await
        .expect("the handler runs");
    assert_eq!(crunch.finished.load(Ordering::SeqCst), 0, "both held");
    // The calls are released only once the stop has begun: it waits for them.
    let release = async {
        tokio::task::yield_now().await;
        crunch.hold.store(false, Ordering::SeqCst);
    };
    tokio::join!(wire.shutdown(), release);
    assert_eq!(crunch.finished.load(Ordering::SeqCst), 2);
    assert_eq!(
        wire.acks(STREAM, "crunch"),
        vec!["+ACK"; 2],
        "both settled by the drain"
    );
    assert_eq!(
        wire.consumer_info(STREAM, "crunch").await,
        ConsumerFacts::new(2, 2, 0, 0, 0),
        "delivered once each, acknowledged"
    );
}

/// A batch handler, for the startup check.
struct Batched;

impl HandleBatch<Job> for Batched {
    async fn handle_batch(
        &self,
        jobs: &[Job],
        _outs: &(),
        _ctx: &mut BatchContext<'_>,
    ) -> BatchOutcome {
        vec![HandlerOutcome::ack(); jobs.len()].into()
    }
}

/// The startup error of an app with the one registration `mount` makes.
async fn refused(mount: impl FnOnce(&mut ruststream::Scope<()>)) -> String {
    // Nothing listens there: the checks run before anything connects.
    let app = RustStream::new(AppInfo::new("render", "0.1.0"))
        .with_broker(NatsBroker::new("nats://127.0.0.1:1"), mount);
    match app.start(ruststream::Env::new()).await {
        Ok(_) => panic!("the app started"),
        Err(err) => err.to_string(),
    }
}

#[tokio::test]
async fn threads_are_refused_where_they_would_idle_or_cannot_run() {
    let idle = refused(|b| {
        b.include(
            JetStreamSubject::new("work.crunch", STREAM)
                .durable("crunch")
                .handler(Crunch::default()),
        )
        .name("crunch")
        .threads(two());
    })
    .await;
    assert!(
        idle.contains("registration `crunch` runs on 2 threads")
            && idle.contains(".concurrency(nonzero!(2))"),
        "{idle}"
    );
    let batch = refused(|b| {
        b.include(
            JetStreamSubject::new("work.crunch", STREAM)
                .durable("crunch")
                .batch(nonzero_usize(10))
                .handler(Batched),
        )
        .name("crunch")
        .concurrency(two())
        .threads(two());
    })
    .await;
    assert!(
        batch.contains("threads run single handlers only"),
        "{batch}"
    );
}

fn nonzero_usize(n: usize) -> NonZeroUsize {
    NonZeroUsize::new(n).unwrap_or(NonZeroUsize::MIN)
}

#[test]
fn describe_shows_the_threads() {
    let app = crunch_app(&Crunch::default(), "nats://127.0.0.1:1");
    let table = ruststream::app::cli::describe(&app);
    assert!(table.contains("handler on 2 threads of its own"), "{table}");
    let json = ruststream::app::cli::describe_json(&app);
    assert_eq!(json["registrations"][0]["threads"], 2);
    assert!(json["registrations"][1]["threads"].is_null(), "{json}");
    let crunch = app
        .registrations()
        .into_iter()
        .find(|r| r.name == "crunch")
        .expect("the crunch registration");
    assert_eq!(crunch.policy.threads, Some(two()));
    let notes = ruststream::registration::policy_notes(&crunch);
    assert!(
        notes.contains(&"handler on 2 threads of its own".to_owned()),
        "{notes:?}"
    );
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Keyed {
    key: u32,
    seq: u32,
}

/// Each call's (key, seq, thread), in the order the calls started.
#[derive(Clone, Default)]
struct Calls(Arc<Mutex<Vec<(u32, u32, String)>>>);

impl Handle<Keyed> for Calls {
    async fn handle(
        &self,
        keyed: &Keyed,
        _outs: &(),
        _ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        let thread = std::thread::current()
            .name()
            .unwrap_or("unnamed")
            .to_owned();
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((keyed.key, keyed.seq, thread));
        busy(Duration::from_millis(2), &AtomicBool::new(false));
        Ok(())
    }
}

const KEYS: u32 = 4;
const PER_KEY: u32 = 6;

fn keyed_app(calls: &Calls, url: &str) -> impl App + use<> {
    let calls = calls.clone();
    RustStream::new(AppInfo::new("render", "0.1.0")).with_broker(NatsBroker::new(url), |b| {
        b.include(
            JetStreamSubject::new("work.keyed", STREAM)
                .durable("keyed")
                .handler(calls.clone()),
        )
        .name("keyed")
        .concurrency(nonzero_usize(4))
        .threads(two())
        .by_key(|keyed: &Keyed| keyed.key);
    })
}

/// `.threads(n).by_key(..)`: the lanes keep each key's messages in order, and every call runs
/// on the registration's threads.
async fn each_key_in_order_on_the_threads(wire: &AppWire, calls: &Calls) {
    for seq in 0..PER_KEY {
        for key in 0..KEYS {
            wire.publish("work.keyed", &Keyed { key, seq }).await;
        }
    }
    let total = u64::from(KEYS * PER_KEY);
    wire.wait_until(|w| w.acks(STREAM, "keyed").len() as u64 >= total)
        .await;
    wire.quiet().await;
    let calls = calls
        .0
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    for key in 0..KEYS {
        let seqs: Vec<u32> = calls
            .iter()
            .filter(|(k, _, _)| *k == key)
            .map(|(_, s, _)| *s)
            .collect();
        assert_eq!(seqs, (0..PER_KEY).collect::<Vec<_>>(), "key {key} in order");
    }
    assert!(
        calls
            .iter()
            .all(|(_, _, t)| t == "keyed-0" || t == "keyed-1"),
        "every call on the registration's threads: {calls:?}"
    );
    assert_eq!(
        wire.consumer_info(STREAM, "keyed").await,
        ConsumerFacts::new(total, total, 0, 0, 0),
        "each delivered once, all acknowledged"
    );
    wire.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn each_key_in_order_on_the_threads_in_process() {
    let calls = Calls::default();
    let wire = AppWire::in_process(|url| keyed_app(&calls, url)).await;
    each_key_in_order_on_the_threads(&wire, &calls).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_key_in_order_on_the_threads_live() {
    let calls = Calls::default();
    let wire = AppWire::live(|url| keyed_app(&calls, url)).await;
    each_key_in_order_on_the_threads(&wire, &calls).await;
}
