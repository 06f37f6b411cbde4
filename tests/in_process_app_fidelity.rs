//! Every row of the seeds' settlement tables, run twice with the same body: on `TestApp` (NATS
//! in process, paused clock) and on a real nats-server (real clock, short delays). The outcomes,
//! delivered counts, acknowledgements on the wire, consumer counters, copies and dead letters
//! must be the same.

mod support;

use std::time::Duration;

use ruststream::{HandlerOutcome, Headers};
use ruststream_nats::testing::ConsumerFacts;
use ruststream_test_server::client::nak_with;
use support::fidelity::app::AppWire;
use support::fidelity::orders::{DEAD, Done, Order, STREAM, Step};
use support::fidelity::{ACK_WAIT, DELAY};
use tokio::time::Instant;

/// Runs each scenario on the app in process (paused clock) and live (real server and clock).
macro_rules! both {
    ($($name:ident),* $(,)?) => {
        mod in_process {
            $(
                #[tokio::test(start_paused = true)]
                async fn $name() {
                    let wire = crate::support::fidelity::app::AppWire::in_process(crate::support::fidelity::orders::orders_app).await;
                    super::$name(&wire).await;
                    wire.shutdown().await;
                }
            )*
        }
        mod live {
            $(
                #[tokio::test]
                async fn $name() {
                    let wire = crate::support::fidelity::app::AppWire::live(crate::support::fidelity::orders::orders_app).await;
                    super::$name(&wire).await;
                    wire.shutdown().await;
                }
            )*
        }
    };
}

both!(
    jetstream_ack_is_finished,
    jetstream_retry_is_delivered_again_at_once,
    jetstream_retry_after_is_held_for_the_delay,
    jetstream_drop_is_terminated,
    jetstream_no_outcome_before_ack_wait_is_delivered_again,
    jetstream_retry_after_below_the_cap_is_held,
    jetstream_at_the_cap_goes_to_the_dead_letter_subject,
    jetstream_at_the_cap_without_a_dead_letter_is_terminated,
    jetstream_undecodable_is_terminated,
    core_ack_settles_nothing,
    core_drop_settles_nothing,
    core_no_outcome_brings_nothing_back,
    core_retry_without_a_cap_brings_nothing_back,
    core_retry_under_a_cap_publishes_a_copy_at_once,
    core_retry_after_publishes_a_copy_after_the_delay,
    core_pattern_copies_go_to_the_retry_to_subject,
    core_at_the_cap_goes_to_the_dead_letter_subject,
    core_at_the_cap_without_a_dead_letter_is_let_go,
);

fn delay_ms() -> u64 {
    u64::try_from(DELAY.as_millis()).unwrap_or(u64::MAX)
}

// ---- JetStream --------------------------------------------------------------------------------

async fn jetstream_ack_is_finished(wire: &AppWire) {
    wire.publish("orders.placed", &Order::new(1, [Step::Ack]))
        .await;
    wire.wait_until(|w| w.acks(STREAM, "placed").len() == 1)
        .await;
    wire.pass(ACK_WAIT + Duration::from_millis(300)).await;

    assert_eq!(wire.outcomes("js"), [HandlerOutcome::ack()]);
    assert_eq!(wire.delivered("js"), [Some(1)]);
    assert_eq!(wire.acks(STREAM, "placed"), ["+ACK"]);
    assert_eq!(
        wire.published::<Done>("orders.done"),
        [Done {
            id: 1,
            attempt: 1,
            subject: "orders.placed".into()
        }]
    );
    assert_eq!(
        wire.consumer_info(STREAM, "placed").await,
        ConsumerFacts::new(1, 1, 0, 0, 0)
    );
}

async fn jetstream_retry_is_delivered_again_at_once(wire: &AppWire) {
    let start = Instant::now();
    wire.publish("orders.placed", &Order::new(2, [Step::Retry, Step::Ack]))
        .await;
    wire.wait_until(|w| w.acks(STREAM, "placed").len() == 2)
        .await;
    assert!(start.elapsed() < ACK_WAIT, "delivered again at once");
    wire.quiet().await;

    assert_eq!(
        wire.outcomes("js"),
        [HandlerOutcome::retry(), HandlerOutcome::ack()]
    );
    assert_eq!(wire.delivered("js"), [Some(1), Some(2)]);
    assert_eq!(wire.acks(STREAM, "placed"), ["-NAK", "+ACK"]);
    assert_eq!(
        wire.consumer_info(STREAM, "placed").await,
        ConsumerFacts::new(2, 1, 0, 0, 0)
    );
}

async fn jetstream_retry_after_is_held_for_the_delay(wire: &AppWire) {
    let start = Instant::now();
    wire.publish(
        "orders.placed",
        &Order::new(3, [Step::RetryAfterMs(delay_ms()), Step::Ack]),
    )
    .await;
    wire.wait_until(|w| w.acks(STREAM, "placed").len() == 1)
        .await;
    assert_eq!(wire.delivered("js"), [Some(1)], "held, not delivered yet");
    wire.wait_until(|w| w.acks(STREAM, "placed").len() == 2)
        .await;
    let waited = start.elapsed();
    assert!(waited >= DELAY, "held for the delay: {waited:?}");
    assert!(waited < ACK_WAIT, "not ack_wait: {waited:?}");
    wire.quiet().await;

    assert_eq!(
        wire.outcomes("js"),
        [HandlerOutcome::retry_after(DELAY), HandlerOutcome::ack()]
    );
    assert_eq!(wire.delivered("js"), [Some(1), Some(2)]);
    assert_eq!(
        wire.acks(STREAM, "placed"),
        [nak_with(DELAY), "+ACK".into()]
    );
    assert_eq!(
        wire.consumer_info(STREAM, "placed").await,
        ConsumerFacts::new(2, 1, 0, 0, 0)
    );
}

async fn jetstream_drop_is_terminated(wire: &AppWire) {
    wire.publish("orders.placed", &Order::new(4, [Step::Drop, Step::Ack]))
        .await;
    wire.wait_until(|w| w.acks(STREAM, "placed").len() == 1)
        .await;
    wire.pass(ACK_WAIT + Duration::from_millis(300)).await;

    assert_eq!(wire.outcomes("js"), [HandlerOutcome::drop()]);
    assert_eq!(wire.delivered("js"), [Some(1)]);
    assert_eq!(wire.acks(STREAM, "placed"), ["+TERM"]);
    assert!(wire.published::<Done>("orders.done").is_empty());
    assert_eq!(
        wire.consumer_info(STREAM, "placed").await,
        ConsumerFacts::new(1, 1, 0, 0, 0)
    );
}

async fn jetstream_no_outcome_before_ack_wait_is_delivered_again(wire: &AppWire) {
    let slow = u64::try_from((ACK_WAIT + DELAY).as_millis()).unwrap_or(u64::MAX);
    wire.publish(
        "orders.placed",
        &Order::new(5, [Step::SleepMs(slow), Step::Ack]),
    )
    .await;
    wire.wait_until(|w| w.outcomes("js").len() == 2).await;
    wire.pass(ACK_WAIT + Duration::from_millis(300)).await;

    // The first handler still acknowledged, after the server had delivered the message again.
    assert_eq!(
        wire.outcomes("js"),
        [HandlerOutcome::ack(), HandlerOutcome::ack()]
    );
    assert_eq!(wire.delivered("js"), [Some(1), Some(2)]);
    assert_eq!(wire.acks(STREAM, "placed"), ["+ACK", "+ACK"]);
    let info = wire.consumer_info(STREAM, "placed").await;
    assert_eq!(info, ConsumerFacts::new(2, 1, 0, 0, 0));
}

async fn jetstream_at_the_cap_goes_to_the_dead_letter_subject(wire: &AppWire) {
    let headers: Headers = [("x-order", "6")].into_iter().collect();
    let payload = serde_json::to_vec(&Order::new(6, [Step::Retry])).expect("encode");
    wire.publish_raw("orders.capped", headers, payload.clone())
        .await;
    wire.wait_until(|w| !w.messages(DEAD).is_empty()).await;
    wire.wait_until(|w| w.acks(STREAM, "capped").len() == 2)
        .await;
    wire.pass(ACK_WAIT + Duration::from_millis(300)).await;

    assert_eq!(
        wire.outcomes("js_capped"),
        [HandlerOutcome::retry(), HandlerOutcome::retry()]
    );
    assert_eq!(wire.delivered("js_capped"), [Some(1), Some(2)]);
    assert_eq!(wire.acks(STREAM, "capped"), ["-NAK", "+TERM"]);
    let dead = wire.messages(DEAD);
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].payload, payload, "as it arrived");
    assert_eq!(dead[0].headers.get("x-order"), Some("6"));
    assert_eq!(
        wire.consumer_info(STREAM, "capped").await,
        ConsumerFacts::new(2, 1, 0, 0, 0)
    );
}

async fn jetstream_retry_after_below_the_cap_is_held(wire: &AppWire) {
    let start = Instant::now();
    wire.publish(
        "orders.capped",
        &Order::new(12, [Step::RetryAfterMs(delay_ms()), Step::Ack]),
    )
    .await;
    wire.wait_until(|w| w.acks(STREAM, "capped").len() == 2)
        .await;
    assert!(start.elapsed() >= DELAY, "held for the delay");
    wire.quiet().await;
    assert_eq!(wire.delivered("js_capped"), [Some(1), Some(2)]);
    assert_eq!(
        wire.acks(STREAM, "capped"),
        [nak_with(DELAY), "+ACK".into()]
    );
    assert!(wire.messages(DEAD).is_empty());
}

async fn jetstream_at_the_cap_without_a_dead_letter_is_terminated(wire: &AppWire) {
    wire.publish("orders.capped_free", &Order::new(13, [Step::Retry]))
        .await;
    wire.wait_until(|w| w.acks(STREAM, "capped_free").len() == 2)
        .await;
    wire.pass(ACK_WAIT + Duration::from_millis(300)).await;
    assert_eq!(wire.delivered("js_capped_free"), [Some(1), Some(2)]);
    assert_eq!(wire.acks(STREAM, "capped_free"), ["-NAK", "+TERM"]);
    assert!(wire.messages(DEAD).is_empty());
    assert_eq!(
        wire.consumer_info(STREAM, "capped_free").await,
        ConsumerFacts::new(2, 1, 0, 0, 0)
    );
}

async fn jetstream_undecodable_is_terminated(wire: &AppWire) {
    wire.publish_raw("orders.placed", Headers::new(), b"not json".to_vec())
        .await;
    wire.wait_until(|w| w.acks(STREAM, "placed").len() == 1)
        .await;
    wire.pass(ACK_WAIT + Duration::from_millis(300)).await;
    assert_eq!(wire.decode_failures("js"), 1);
    assert!(wire.outcomes("js").is_empty());
    assert_eq!(wire.acks(STREAM, "placed"), ["+TERM"]);
}

// ---- Core -------------------------------------------------------------------------------------

async fn core_ack_settles_nothing(wire: &AppWire) {
    wire.publish("orders.core", &Order::new(7, [Step::Ack]))
        .await;
    wire.wait_until(|w| w.outcomes("core").len() == 1).await;
    wire.pass(DELAY * 2).await;
    assert_eq!(wire.outcomes("core"), [HandlerOutcome::ack()]);
    assert_eq!(wire.delivered("core"), [None]);
    assert_eq!(wire.messages("$JS.ACK.>").len(), 0);
    assert_eq!(wire.messages("orders.core").len(), 1);
    assert_eq!(wire.published::<Done>("orders.done").len(), 1);
}

async fn core_drop_settles_nothing(wire: &AppWire) {
    wire.publish("orders.core", &Order::new(14, [Step::Drop, Step::Ack]))
        .await;
    wire.wait_until(|w| w.outcomes("core").len() == 1).await;
    wire.pass(DELAY * 2).await;
    assert_eq!(wire.outcomes("core"), [HandlerOutcome::drop()]);
    assert_eq!(wire.messages("orders.core").len(), 1, "no copy");
    assert!(wire.messages("$JS.ACK.>").is_empty());
}

async fn core_no_outcome_brings_nothing_back(wire: &AppWire) {
    let slow = u64::try_from((ACK_WAIT + DELAY).as_millis()).unwrap_or(u64::MAX);
    wire.publish(
        "orders.core_free",
        &Order::new(15, [Step::SleepMs(slow), Step::Ack]),
    )
    .await;
    wire.wait_until(|w| w.outcomes("core_free").len() == 1)
        .await;
    wire.pass(ACK_WAIT).await;
    assert_eq!(wire.delivered("core_free"), [None]);
    assert_eq!(wire.messages("orders.core_free").len(), 1, "nothing again");
}

async fn core_pattern_copies_go_to_the_retry_to_subject(wire: &AppWire) {
    wire.publish("orders.wild.eu", &Order::new(16, [Step::Retry, Step::Ack]))
        .await;
    wire.wait_until(|w| w.outcomes("wild").len() == 2).await;
    wire.pass(DELAY).await;
    assert_eq!(
        wire.outcomes("wild"),
        [HandlerOutcome::retry(), HandlerOutcome::ack()]
    );
    assert_eq!(wire.attempts("wild"), [1, 2]);
    assert_eq!(
        wire.subjects("wild"),
        ["orders.wild.eu", "orders.wild.retry"]
    );
    let copies = wire.messages("orders.wild.retry");
    assert_eq!(copies.len(), 1);
    assert_eq!(copies[0].headers.get("x-ruststream-retry-count"), Some("1"));
}

async fn core_at_the_cap_without_a_dead_letter_is_let_go(wire: &AppWire) {
    wire.publish("orders.core", &Order::new(17, [Step::Retry]))
        .await;
    wire.wait_until(|w| w.outcomes("core").len() == 3).await;
    wire.pass(DELAY * 2).await;
    assert_eq!(wire.attempts("core"), [1, 2, 3]);
    assert_eq!(
        wire.messages("orders.core").len(),
        3,
        "the original and two copies"
    );
    assert!(wire.messages(DEAD).is_empty());
}

async fn core_retry_without_a_cap_brings_nothing_back(wire: &AppWire) {
    wire.publish("orders.core_free", &Order::new(8, [Step::Retry, Step::Ack]))
        .await;
    wire.wait_until(|w| w.outcomes("core_free").len() == 1)
        .await;
    wire.pass(DELAY * 2).await;
    assert_eq!(wire.outcomes("core_free"), [HandlerOutcome::retry()]);
    assert_eq!(wire.messages("orders.core_free").len(), 1, "no copy");
}

async fn core_retry_under_a_cap_publishes_a_copy_at_once(wire: &AppWire) {
    let start = Instant::now();
    wire.publish("orders.core", &Order::new(9, [Step::Retry, Step::Ack]))
        .await;
    wire.wait_until(|w| w.outcomes("core").len() == 2).await;
    assert!(start.elapsed() < ACK_WAIT, "a copy at once");
    wire.pass(DELAY).await;

    assert_eq!(
        wire.outcomes("core"),
        [HandlerOutcome::retry(), HandlerOutcome::ack()]
    );
    assert_eq!(wire.attempts("core"), [1, 2]);
    assert_eq!(wire.delivered("core"), [None, None]);
    let copies = wire.messages("orders.core");
    assert_eq!(copies.len(), 2, "the original and one copy");
    assert_eq!(copies[1].payload, copies[0].payload);
    assert_eq!(copies[1].headers.get("x-ruststream-retry-count"), Some("1"));
}

async fn core_retry_after_publishes_a_copy_after_the_delay(wire: &AppWire) {
    let start = Instant::now();
    wire.publish(
        "orders.core",
        &Order::new(10, [Step::RetryAfterMs(delay_ms()), Step::Ack]),
    )
    .await;
    wire.wait_until(|w| w.outcomes("core").len() == 2).await;
    assert!(start.elapsed() >= DELAY, "the copy waited for the delay");
    wire.quiet().await;
    assert_eq!(
        wire.outcomes("core"),
        [HandlerOutcome::retry_after(DELAY), HandlerOutcome::ack()]
    );
    assert_eq!(wire.attempts("core"), [1, 2]);
    assert_eq!(wire.messages("orders.core").len(), 2);
}

async fn core_at_the_cap_goes_to_the_dead_letter_subject(wire: &AppWire) {
    let headers: Headers = [("x-order", "11")].into_iter().collect();
    let payload = serde_json::to_vec(&Order::new(11, [Step::Retry])).expect("encode");
    wire.publish_raw("orders.core_capped", headers, payload.clone())
        .await;
    wire.wait_until(|w| !w.messages(DEAD).is_empty()).await;
    wire.pass(DELAY * 2).await;

    assert_eq!(
        wire.outcomes("core_capped"),
        [HandlerOutcome::retry(), HandlerOutcome::retry()]
    );
    assert_eq!(wire.attempts("core_capped"), [1, 2]);
    let dead = wire.messages(DEAD);
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].payload, payload, "as it arrived");
    assert_eq!(dead[0].headers.get("x-order"), Some("11"));
    assert_eq!(
        dead[0].headers.get("x-ruststream-retry-count"),
        Some("1"),
        "the second attempt arrived as the first copy"
    );
}
