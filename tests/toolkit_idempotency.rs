//! Idempotent handlers (`idempotent_by`), run twice with the same bodies: on `TestApp` (NATS in
//! process, paused clock) and on a real nats-server (real clock). The bank (a counter the
//! handler charges) is charged once per payment id, whatever the server delivers; the server's
//! key-value bucket holds the key, and the consumer finished every message.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ruststream::{App, AppInfo, Context, Handle, HandlerOutcome, NonZeroDuration, RustStream};
use ruststream_nats::testing::ConsumerFacts;
use ruststream_nats::{JetStreamSubject, NatsBroker};
use serde::{Deserialize, Serialize};
use support::fidelity::ACK_WAIT;
use support::fidelity::app::AppWire;

const STREAM: &str = "PAYMENTS";
const WINDOW: Duration = Duration::from_secs(3600);
/// The claim of the registration whose claims are left behind by a "crashed" process.
const SHORT_CLAIM: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Payment {
    id: u64,
    /// On its first delivery: sleep this long after charging, before acknowledging.
    #[serde(default)]
    slow_first_ms: u64,
    /// On its first delivery: ask for a retry before charging.
    #[serde(default)]
    retry_first: bool,
}

impl Payment {
    fn new(id: u64) -> Self {
        Self {
            id,
            slow_first_ms: 0,
            retry_first: false,
        }
    }
}

/// The bank: how many times each payment id was charged.
#[derive(Clone, Default)]
struct Bank(Arc<Mutex<HashMap<u64, u32>>>);

impl Bank {
    fn charges(&self, id: u64) -> u32 {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
            .copied()
            .unwrap_or(0)
    }
}

struct Charge(Bank);

impl Handle<Payment> for Charge {
    async fn handle(
        &self,
        payment: &Payment,
        _outs: &(),
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        let first = ctx.attempt().get() == 1;
        if first && payment.retry_first {
            return Err(HandlerOutcome::retry());
        }
        *self
            .0
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(payment.id)
            .or_default() += 1;
        if first && payment.slow_first_ms > 0 {
            tokio::time::sleep(Duration::from_millis(payment.slow_first_ms)).await;
        }
        Ok(())
    }
}

fn payments_app(bank: &Bank, url: &str) -> impl App + use<> {
    let ack_wait = NonZeroDuration::new(ACK_WAIT).unwrap_or_else(|| unreachable!());
    let concurrent = std::num::NonZeroUsize::new(3).unwrap_or(std::num::NonZeroUsize::MIN);
    let bank = bank.clone();
    RustStream::new(AppInfo::new("payments", "0.1.0")).with_broker(NatsBroker::new(url), |b| {
        b.include(
            JetStreamSubject::new("payments.charge", STREAM)
                .durable("charge")
                .ack_wait(ack_wait)
                .handler(Charge(bank.clone())),
        )
        .name("charge")
        .idempotent_by(|payment: &Payment| payment.id)
        .idempotency_window(WINDOW);
        b.include(
            JetStreamSubject::new("payments.parallel", STREAM)
                .durable("parallel")
                .ack_wait(ack_wait)
                .handler(Charge(bank.clone())),
        )
        .name("parallel")
        .concurrency(concurrent)
        .idempotent_by(|payment: &Payment| payment.id)
        .idempotency_window(WINDOW)
        .idempotency_bucket("payments-parallel");
        b.include(
            JetStreamSubject::new("payments.header", STREAM)
                .durable("header")
                .ack_wait(ack_wait)
                .handler(Charge(bank.clone())),
        )
        .name("header")
        .idempotent_by_header("Idempotency-Key")
        .idempotency_window(WINDOW)
        .idempotency_claim(SHORT_CLAIM);
    })
}

/// Runs each scenario on the app in process (paused clock) and live (real server and clock).
macro_rules! both {
    ($($name:ident),* $(,)?) => {
        mod in_process {
            $(
                #[tokio::test(start_paused = true)]
                async fn $name() {
                    let bank = super::Bank::default();
                    let wire = crate::AppWire::in_process(|url| super::payments_app(&bank, url)).await;
                    super::$name(&wire, &bank).await;
                    wire.shutdown().await;
                }
            )*
        }
        mod live {
            $(
                #[tokio::test]
                async fn $name() {
                    let bank = super::Bank::default();
                    let wire = crate::AppWire::live(|url| super::payments_app(&bank, url)).await;
                    super::$name(&wire, &bank).await;
                    wire.shutdown().await;
                }
            )*
        }
    };
}

both!(
    the_same_payment_three_times_is_charged_once,
    concurrent_duplicates_are_charged_once,
    a_late_acknowledgement_redelivery_is_not_charged_again,
    a_retry_releases_the_claim_and_runs_again,
    a_claim_left_by_a_crash_expires_and_the_payment_runs,
    the_header_form_keys_by_the_header,
);

async fn the_same_payment_three_times_is_charged_once(wire: &AppWire, bank: &Bank) {
    for _ in 0..3 {
        wire.publish("payments.charge", &Payment::new(7)).await;
    }
    wire.wait_until(|w| w.acks(STREAM, "charge").len() == 3)
        .await;
    wire.quiet().await;

    assert_eq!(bank.charges(7), 1, "the bank is charged once");
    assert_eq!(wire.acks(STREAM, "charge"), ["+ACK", "+ACK", "+ACK"]);
    // The handler ran once: the two duplicates were acknowledged without it.
    assert_eq!(wire.outcomes("charge"), [HandlerOutcome::ack()]);
    assert_eq!(
        wire.kv_value("idempotency-charge", "7").await.as_deref(),
        Some("handled")
    );
    assert_eq!(
        wire.consumer_info(STREAM, "charge").await,
        ConsumerFacts::new(3, 3, 0, 0, 0)
    );
}

async fn concurrent_duplicates_are_charged_once(wire: &AppWire, bank: &Bank) {
    // Three handlers at once; the first to claim sleeps after charging, so the others find
    // its claim and are held back until it recorded the key.
    let mut payment = Payment::new(8);
    payment.slow_first_ms = 300;
    for _ in 0..3 {
        wire.publish("payments.parallel", &payment).await;
    }
    wire.wait_until(|w| {
        w.acks(STREAM, "parallel")
            .iter()
            .filter(|a| *a == "+ACK")
            .count()
            == 3
    })
    .await;
    wire.quiet().await;

    assert_eq!(bank.charges(8), 1, "the bank is charged once");
    assert_eq!(wire.outcomes("parallel"), [HandlerOutcome::ack()]);
    let acks = wire.acks(STREAM, "parallel");
    assert!(
        acks.iter().any(|a| a.starts_with("-NAK {\"delay\":")),
        "a duplicate was held back while the first held the claim: {acks:?}"
    );
    assert_eq!(
        wire.kv_value("payments-parallel", "8").await.as_deref(),
        Some("handled")
    );
    let info = wire.consumer_info(STREAM, "parallel").await;
    assert_eq!(info.ack_pending, 0, "every message finished: {info:?}");
    assert_eq!(info.pending, 0, "every message finished: {info:?}");
}

async fn a_late_acknowledgement_redelivery_is_not_charged_again(wire: &AppWire, bank: &Bank) {
    // The first delivery charges, then sleeps past ack_wait: the server delivers the payment
    // again before the +ACK of the first arrives.
    let mut payment = Payment::new(9);
    payment.slow_first_ms = u64::try_from((ACK_WAIT * 2).as_millis()).unwrap_or(u64::MAX);
    wire.publish("payments.charge", &payment).await;
    wire.wait_until(|w| w.acks(STREAM, "charge").len() >= 2)
        .await;
    // Any later redelivery lands and is settled too.
    wire.pass(ACK_WAIT + Duration::from_millis(300)).await;
    wire.quiet().await;

    assert_eq!(bank.charges(9), 1, "the bank is charged once");
    assert_eq!(wire.outcomes("charge"), [HandlerOutcome::ack()]);
    let acks = wire.acks(STREAM, "charge");
    assert!(acks.iter().all(|a| a == "+ACK"), "{acks:?}");
    let info = wire.consumer_info(STREAM, "charge").await;
    assert!(
        info.delivered >= 2,
        "the server delivered the payment again: {info:?}"
    );
    assert_eq!(
        (info.delivered_stream, info.ack_pending, info.pending),
        (1, 0, 0),
        "the payment finished: {info:?}"
    );
    assert_eq!(
        wire.kv_value("idempotency-charge", "9").await.as_deref(),
        Some("handled")
    );
}

async fn a_retry_releases_the_claim_and_runs_again(wire: &AppWire, bank: &Bank) {
    let mut payment = Payment::new(10);
    payment.retry_first = true;
    wire.publish("payments.charge", &payment).await;
    wire.wait_until(|w| w.acks(STREAM, "charge").len() == 2)
        .await;
    wire.quiet().await;

    assert_eq!(wire.acks(STREAM, "charge"), ["-NAK", "+ACK"]);
    assert_eq!(
        wire.outcomes("charge"),
        [HandlerOutcome::retry(), HandlerOutcome::ack()]
    );
    assert_eq!(bank.charges(10), 1);
    assert_eq!(
        wire.kv_value("idempotency-charge", "10").await.as_deref(),
        Some("handled")
    );
}

async fn a_claim_left_by_a_crash_expires_and_the_payment_runs(wire: &AppWire, bank: &Bank) {
    // Another instance claimed key `k-11` and died before recording it.
    wire.kv_put("idempotency-header", WINDOW, "k-11", "claimed")
        .await;
    let headers: ruststream::Headers = [("Idempotency-Key", "k-11")].into_iter().collect();
    let payload = serde_json::to_vec(&Payment::new(11)).expect("encode");
    wire.publish_raw("payments.header", headers, payload).await;
    wire.wait_until(|w| w.acks(STREAM, "header").iter().any(|a| a == "+ACK"))
        .await;
    wire.quiet().await;

    assert_eq!(
        bank.charges(11),
        1,
        "the payment ran once the claim expired"
    );
    let acks = wire.acks(STREAM, "header");
    assert!(
        acks.first()
            .is_some_and(|a| a.starts_with("-NAK {\"delay\":")),
        "held back while the claim held: {acks:?}"
    );
    assert_eq!(acks.last().map(String::as_str), Some("+ACK"));
    assert_eq!(
        wire.kv_value("idempotency-header", "k-11").await.as_deref(),
        Some("handled")
    );
}

async fn the_header_form_keys_by_the_header(wire: &AppWire, bank: &Bank) {
    // Two payments with different ids but the same key: the second is a duplicate.
    for id in [12, 13] {
        let headers: ruststream::Headers =
            [("Idempotency-Key", "order 12/a")].into_iter().collect();
        let payload = serde_json::to_vec(&Payment::new(id)).expect("encode");
        wire.publish_raw("payments.header", headers, payload).await;
    }
    wire.wait_until(|w| w.acks(STREAM, "header").len() == 2)
        .await;
    wire.quiet().await;

    assert_eq!((bank.charges(12), bank.charges(13)), (1, 0));
    assert_eq!(wire.acks(STREAM, "header"), ["+ACK", "+ACK"]);
    // A key NATS does not take as it is is stored hex-encoded.
    let stored = format!(
        "h={}",
        "order 12/a"
            .bytes()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    );
    assert_eq!(
        wire.kv_value("idempotency-header", &stored)
            .await
            .as_deref(),
        Some("handled")
    );
}

// ---- describe and startup checks ----------------------------------------------------------------

#[test]
fn describe_shows_the_bucket_and_the_window() {
    let app = payments_app(&Bank::default(), "nats://localhost:4222");
    let table = ruststream::app::cli::describe(&app);
    assert!(
        table.contains(
            "charge: idempotent by payload in bucket idempotency-charge (window 1h, claim 30s)"
        ),
        "{table}"
    );
    assert!(
        table.contains(
            "header: idempotent by header Idempotency-Key in bucket idempotency-header (window 1h, claim 2s)"
        ),
        "{table}"
    );
    let json = ruststream::app::cli::describe_json(&app);
    let parallel = json["registrations"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["name"] == "parallel"))
        .expect("the parallel registration");
    assert_eq!(
        parallel["idempotency"],
        serde_json::json!({
            "bucket": "payments-parallel",
            "window_ms": 3_600_000,
            "claim_ms": 30_000,
            "key": "payload",
        })
    );
    let plain = RustStream::new(AppInfo::new("plain", "0.1.0")).with_broker(
        NatsBroker::new("nats://localhost:4222"),
        |b| {
            b.include(
                JetStreamSubject::new("payments.charge", STREAM).handler(Charge(Bank::default())),
            );
        },
    );
    let json = ruststream::app::cli::describe_json(&plain);
    assert_eq!(
        json["registrations"][0]["idempotency"],
        serde_json::Value::Null
    );
}

#[tokio::test]
async fn a_window_without_a_key_is_refused_at_startup() {
    let app = RustStream::new(AppInfo::new("payments", "0.1.0")).with_broker(
        NatsBroker::new("nats://localhost:4222"),
        |b| {
            b.include(
                JetStreamSubject::new("payments.charge", STREAM).handler(Charge(Bank::default())),
            )
            .name("charge")
            .idempotency_window(WINDOW);
        },
    );
    let err = ruststream_nats::testing::TestApp::start(app)
        .await
        .expect_err("a window without a key is refused");
    let message = err.to_string();
    assert!(
        message.contains(
            "registration `charge` sets an idempotency window, bucket or claim without a key"
        ) && message.contains(".idempotent_by("),
        "{message}"
    );
}

#[tokio::test]
async fn a_claim_not_longer_than_the_handler_timeout_is_refused_at_startup() {
    let app = RustStream::new(AppInfo::new("payments", "0.1.0")).with_broker(
        NatsBroker::new("nats://localhost:4222"),
        |b| {
            b.include(
                JetStreamSubject::new("payments.charge", STREAM).handler(Charge(Bank::default())),
            )
            .name("charge")
            .idempotent_by(|payment: &Payment| payment.id)
            .idempotency_claim(Duration::from_secs(10))
            .handler_timeout(Duration::from_secs(10));
        },
    );
    let err = ruststream_nats::testing::TestApp::start(app)
        .await
        .expect_err("a claim the handler can outlive is refused");
    let message = err.to_string();
    assert!(
        message.contains("registration `charge` has an idempotency claim of 10s, not longer than its handler_timeout of 10s")
            && message.contains(".idempotency_claim("),
        "{message}"
    );
}

// ---- the key-value operations, at the wire ----------------------------------------------------

mod kv_wire {
    use std::time::Duration;

    use bytes::Bytes;
    use tokio::time::Instant;

    use crate::support::fidelity::{PATIENCE, Server};

    #[tokio::test(start_paused = true)]
    async fn in_process() {
        create_update_delete_expire(&Server::in_process()).await;
    }

    #[tokio::test]
    async fn live() {
        create_update_delete_expire(&Server::live().await).await;
    }

    /// Create-if-absent, compare-and-set, delete and the bucket's max_age, the same on both.
    async fn create_update_delete_expire(server: &Server) {
        let wire = server.wire();
        let (bucket, key) = ("claims".to_owned(), "pay-1".to_owned());
        let value = |v: &'static str| Bytes::from_static(v.as_bytes());
        let max_age = Duration::from_secs(1);
        wire.kv_bucket(bucket.clone(), Duration::from_secs(3600))
            .await
            .expect("bucket");
        // Opening it again is not an error, and sets the new max_age (the expiry below).
        wire.kv_bucket(bucket.clone(), max_age)
            .await
            .expect("bucket again");

        assert_eq!(
            wire.kv_get(bucket.clone(), key.clone()).await.expect("get"),
            None
        );
        let first = wire
            .kv_create(bucket.clone(), key.clone(), value("claimed"))
            .await
            .expect("create")
            .expect("the key was free");
        assert_eq!(
            wire.kv_create(bucket.clone(), key.clone(), value("claimed"))
                .await
                .expect("create again"),
            None,
            "one writer wins"
        );
        let entry = wire
            .kv_get(bucket.clone(), key.clone())
            .await
            .expect("get")
            .expect("the claim");
        assert_eq!(
            (entry.value.clone(), entry.revision),
            (value("claimed"), first)
        );
        assert!(entry.age < Duration::from_secs(1), "{entry:?}");

        // Compare-and-set: the stale revision loses.
        let second = wire
            .kv_update(bucket.clone(), key.clone(), value("handled"), first)
            .await
            .expect("update")
            .expect("the revision matched");
        assert!(second > first);
        assert_eq!(
            wire.kv_update(bucket.clone(), key.clone(), value("claimed"), first)
                .await
                .expect("stale update"),
            None
        );

        // Deleted: absent, and free to create again.
        wire.kv_delete(bucket.clone(), key.clone())
            .await
            .expect("delete");
        assert_eq!(
            wire.kv_get(bucket.clone(), key.clone()).await.expect("get"),
            None
        );
        let third = wire
            .kv_create(bucket.clone(), key.clone(), value("claimed"))
            .await
            .expect("create after delete")
            .expect("the key was free again");
        assert!(third > second);

        // Past max_age the value is gone, and the key free.
        let deadline = Instant::now() + PATIENCE;
        while wire
            .kv_get(bucket.clone(), key.clone())
            .await
            .expect("get")
            .is_some()
        {
            assert!(Instant::now() < deadline, "the value outlived max_age");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            wire.kv_create(bucket.clone(), key.clone(), value("claimed"))
                .await
                .expect("create after expiry")
                .is_some()
        );

        // A key NATS refuses, and a bucket that does not exist, are errors.
        assert!(wire.kv_get(bucket.clone(), "a b".into()).await.is_err());
        assert!(wire.kv_get("missing".into(), key.clone()).await.is_err());
    }
}
