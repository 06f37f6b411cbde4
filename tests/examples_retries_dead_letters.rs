//! The order service of `examples/retries_dead_letters.rs` and its manual twin
//! `examples/manual/retries_dead_letters.rs`, tested unchanged in process (`TestApp`, paused
//! clock) and live (a real nats-server, with the examples' real 5 s and 1 s delays): the cap on
//! JetStream and on Core, the dead letters, and the copies of a Core pattern sent to `retry_to`.
//!
//! Each example's code is included into a module of this test (`include!` of the file itself).

mod support;

/// The scenarios, expanded inside the module of each twin (`super::*` is the example's code).
macro_rules! retries_scenarios {
    () => {
        fn order(id: u64, sku: &str) -> Order {
            Order {
                id,
                sku: sku.to_owned(),
                quantity: 2,
            }
        }

        fn receipt(order: u64, email: &str) -> Receipt {
            Receipt {
                order,
                email: email.to_owned(),
            }
        }

        fn event(id: u64, action: &str) -> AuditEvent {
            AuditEvent {
                id,
                action: action.to_owned(),
            }
        }

        mod in_process {
            use std::time::Duration;

            use ruststream_nats::RETRY_COUNT_HEADER;
            use ruststream_nats::prelude::*;
            use ruststream_nats::testing::TestApp;
            use tokio::time::Instant;

            use super::{
                AUDIT_BACKOFF, AuditEvent, Receipt, WAREHOUSE_BACKOFF, app, event, order, receipt,
            };
            use crate::support::examples::nak_with;

            fn subjects(t: &TestApp, registration: &str) -> Vec<String> {
                t.handled(registration)
                    .into_iter()
                    .map(|h| h.subject)
                    .collect()
            }

            fn attempts(t: &TestApp, registration: &str) -> Vec<u32> {
                t.handled(registration).iter().map(|h| h.attempt).collect()
            }

            #[tokio::test(start_paused = true)]
            async fn an_order_the_warehouse_missed_once_is_reserved_on_its_second_delivery() {
                let t = TestApp::start(app()).await.expect("the app starts");
                t.publish("orders.created", &order(1, "late-anvil"))
                    .await
                    .expect("published");
                t.settle().await;
                assert_eq!(
                    t.outcomes("reserve"),
                    [HandlerOutcome::retry_after(WAREHOUSE_BACKOFF)]
                );

                t.advance(WAREHOUSE_BACKOFF).await;
                assert_eq!(
                    t.outcomes("reserve"),
                    [
                        HandlerOutcome::retry_after(WAREHOUSE_BACKOFF),
                        HandlerOutcome::ack()
                    ]
                );
                assert_eq!(t.delivered("reserve"), [Some(1), Some(2)]);
                assert_eq!(attempts(&t, "reserve"), [1, 2]);
                assert_eq!(
                    t.nats().acknowledgements("ORDERS", "reserve"),
                    [nak_with(WAREHOUSE_BACKOFF), "+ACK".to_owned()]
                );
                assert!(t.dead_letters("orders.dead").is_empty());
                t.shutdown().await.expect("a clean shutdown");
            }

            #[tokio::test(start_paused = true)]
            async fn an_order_at_the_cap_goes_to_the_dead_letter_subject_and_is_terminated() {
                let t = TestApp::start(app()).await.expect("the app starts");
                t.publish("orders.created", &order(2, "offline-anvil"))
                    .await
                    .expect("published");
                t.settle().await;
                t.advance(WAREHOUSE_BACKOFF * 2).await;

                assert_eq!(
                    t.outcomes("reserve"),
                    vec![HandlerOutcome::retry_after(WAREHOUSE_BACKOFF); 3]
                );
                assert_eq!(t.delivered("reserve"), [Some(1), Some(2), Some(3)]);
                assert_eq!(
                    t.nats().acknowledgements("ORDERS", "reserve"),
                    [
                        nak_with(WAREHOUSE_BACKOFF),
                        nak_with(WAREHOUSE_BACKOFF),
                        "+TERM".to_owned()
                    ]
                );
                // The dead letter is the order as it arrived, kept by the ORDERS stream.
                let original = serde_json::to_vec(&order(2, "offline-anvil")).expect("encode");
                let dead = t.dead_letters("orders.dead");
                assert_eq!(dead.len(), 1);
                assert_eq!(dead[0].payload, original);
                let stored = t.nats().stream_messages("ORDERS");
                let subjects: Vec<&str> = stored.iter().map(|m| &*m.subject).collect();
                assert_eq!(subjects, ["orders.created", "orders.dead"]);
                assert_eq!(stored[1].payload, original);
                let info = t
                    .nats()
                    .consumer_info("ORDERS", "reserve")
                    .expect("the consumer");
                assert_eq!((info.delivered, info.ack_pending), (3, 0));

                // Terminated: never delivered again.
                t.advance(Duration::from_secs(120)).await;
                assert_eq!(t.outcomes("reserve").len(), 3);
                t.shutdown().await.expect("a clean shutdown");
            }

            #[tokio::test(start_paused = true)]
            async fn a_greylisted_receipt_comes_back_as_a_copy_at_once() {
                let t = TestApp::start(app()).await.expect("the app starts");
                let start = Instant::now();
                t.publish("receipts.send", &receipt(3, "cy@greylisting.example"))
                    .await
                    .expect("published");
                t.settle().await;

                assert_eq!(
                    t.outcomes("mail_receipt"),
                    [HandlerOutcome::retry(), HandlerOutcome::ack()]
                );
                assert_eq!(attempts(&t, "mail_receipt"), [1, 2]);
                assert_eq!(t.delivered("mail_receipt"), [None, None]);
                assert!(start.elapsed() < Duration::from_secs(1), "at once");
                // The original, then the runtime's copy, which carries the count.
                let carried = t.nats().published("receipts.send");
                assert_eq!(carried.len(), 2);
                assert_eq!(carried[0].headers.get(RETRY_COUNT_HEADER), None);
                assert_eq!(carried[1].headers.get(RETRY_COUNT_HEADER), Some("1"));
                assert_eq!(carried[1].payload, carried[0].payload);
                assert!(t.dead_letters("receipts.dead").is_empty());
                t.shutdown().await.expect("a clean shutdown");
            }

            #[tokio::test(start_paused = true)]
            async fn a_receipt_at_the_cap_goes_to_the_dead_letter_subject_as_it_arrived() {
                let t = TestApp::start(app()).await.expect("the app starts");
                t.publish("receipts.send", &receipt(4, "di@unreachable.example"))
                    .await
                    .expect("published");
                t.settle().await;

                assert_eq!(
                    t.outcomes("mail_receipt"),
                    [HandlerOutcome::retry(), HandlerOutcome::retry()]
                );
                assert_eq!(attempts(&t, "mail_receipt"), [1, 2]);
                let dead = t.dead_letters("receipts.dead");
                assert_eq!(dead.len(), 1);
                assert_eq!(
                    dead[0].payload,
                    serde_json::to_vec(&receipt(4, "di@unreachable.example")).expect("encode")
                );
                // As it arrived: the second attempt was the first copy.
                assert_eq!(dead[0].headers.get(RETRY_COUNT_HEADER), Some("1"));
                t.advance(Duration::from_secs(60)).await;
                assert_eq!(t.outcomes("mail_receipt").len(), 2);
                assert_eq!(t.published::<Receipt>("receipts.send").len(), 2);
                t.shutdown().await.expect("a clean shutdown");
            }

            #[tokio::test(start_paused = true)]
            async fn a_pattern_sends_its_copy_to_the_retry_to_subject() {
                let t = TestApp::start(app()).await.expect("the app starts");
                t.publish("audit.orders", &event(5, "export"))
                    .await
                    .expect("published");
                t.settle().await;
                assert_eq!(
                    t.outcomes("audit"),
                    [HandlerOutcome::retry_after(AUDIT_BACKOFF)]
                );
                assert!(t.published::<AuditEvent>("audit.retry").is_empty());

                t.advance(AUDIT_BACKOFF).await;
                assert_eq!(
                    t.outcomes("audit"),
                    [
                        HandlerOutcome::retry_after(AUDIT_BACKOFF),
                        HandlerOutcome::ack()
                    ]
                );
                assert_eq!(subjects(&t, "audit"), ["audit.orders", "audit.retry"]);
                assert_eq!(attempts(&t, "audit"), [1, 2]);
                assert_eq!(
                    t.published::<AuditEvent>("audit.retry"),
                    [event(5, "export")]
                );
                t.shutdown().await.expect("a clean shutdown");
            }

            #[tokio::test(start_paused = true)]
            async fn a_pattern_at_the_cap_without_a_dead_letter_lets_the_event_go() {
                let t = TestApp::start(app()).await.expect("the app starts");
                t.publish("audit.payments", &event(6, "purge"))
                    .await
                    .expect("published");
                t.settle().await;
                t.advance(AUDIT_BACKOFF * 2).await;

                assert_eq!(
                    t.outcomes("audit"),
                    vec![HandlerOutcome::retry_after(AUDIT_BACKOFF); 3]
                );
                assert_eq!(
                    subjects(&t, "audit"),
                    ["audit.payments", "audit.retry", "audit.retry"]
                );
                assert_eq!(attempts(&t, "audit"), [1, 2, 3]);
                t.advance(Duration::from_secs(60)).await;
                assert_eq!(t.outcomes("audit").len(), 3);
                assert_eq!(t.published::<AuditEvent>("audit.retry").len(), 2);
                assert!(t.published::<AuditEvent>("audit.dead").is_empty());
                t.shutdown().await.expect("a clean shutdown");
            }
        }

        mod live {
            use std::time::{Duration, Instant};

            use ruststream_nats::RETRY_COUNT_HEADER;
            use ruststream_nats::prelude::*;

            use super::{
                AUDIT_BACKOFF, AuditEvent, Receipt, WAREHOUSE_BACKOFF, app, event, order, receipt,
            };
            use crate::support::examples::{Live, PATIENCE, nak_with};

            fn subjects(live: &Live, registration: &str) -> Vec<String> {
                live.recorder()
                    .handled(registration)
                    .into_iter()
                    .map(|h| h.subject)
                    .collect()
            }

            fn attempts(live: &Live, registration: &str) -> Vec<u32> {
                live.recorder()
                    .handled(registration)
                    .iter()
                    .map(|h| h.attempt)
                    .collect()
            }

            fn retry_count(message: &async_nats::Message) -> Option<String> {
                message
                    .headers
                    .as_ref()
                    .and_then(|h| h.get(RETRY_COUNT_HEADER))
                    .map(|v| v.as_str().to_owned())
            }

            #[tokio::test]
            async fn an_order_the_warehouse_missed_once_is_reserved_on_its_second_delivery() {
                let mut live = Live::run(app()).await;
                let start = Instant::now();
                let seq = live
                    .publish_stored("orders.created", &order(1, "late-anvil"))
                    .await;
                live.until_within(WAREHOUSE_BACKOFF + PATIENCE, "delivered again", |l| {
                    l.recorder().outcomes("reserve").len() == 2
                })
                .await;
                assert!(start.elapsed() >= WAREHOUSE_BACKOFF - Duration::from_millis(100));

                assert_eq!(
                    live.recorder().outcomes("reserve"),
                    [
                        HandlerOutcome::retry_after(WAREHOUSE_BACKOFF),
                        HandlerOutcome::ack()
                    ]
                );
                assert_eq!(live.recorder().delivered("reserve"), [Some(1), Some(2)]);
                assert_eq!(attempts(&live, "reserve"), [1, 2]);
                let info = live
                    .consumer_until("ORDERS", "reserve", "acknowledged", |i| {
                        i.num_ack_pending == 0 && i.ack_floor.stream_sequence >= seq
                    })
                    .await;
                assert_eq!(info.delivered.consumer_sequence, 2);
                live.until("both acknowledgements", |l| {
                    l.acks("ORDERS", "reserve").len() == 2
                })
                .await;
                assert_eq!(
                    live.acks("ORDERS", "reserve"),
                    [nak_with(WAREHOUSE_BACKOFF), "+ACK".to_owned()]
                );
                assert!(live.messages("orders.dead").is_empty());
                live.stop().await;
            }

            #[tokio::test]
            async fn an_order_at_the_cap_goes_to_the_dead_letter_subject_and_is_terminated() {
                let mut live = Live::run(app()).await;
                let seq = live
                    .publish_stored("orders.created", &order(2, "offline-anvil"))
                    .await;
                live.until_within(WAREHOUSE_BACKOFF * 2 + PATIENCE, "the dead letter", |l| {
                    !l.messages("orders.dead").is_empty()
                })
                .await;

                assert_eq!(
                    live.recorder().outcomes("reserve"),
                    vec![HandlerOutcome::retry_after(WAREHOUSE_BACKOFF); 3]
                );
                assert_eq!(
                    live.recorder().delivered("reserve"),
                    [Some(1), Some(2), Some(3)]
                );
                // The dead letter is stored after the original in the same stream: the ack
                // floor may pass the original.
                let info = live
                    .consumer_until("ORDERS", "reserve", "terminated", |i| {
                        i.num_ack_pending == 0 && i.ack_floor.stream_sequence >= seq
                    })
                    .await;
                assert_eq!(info.delivered.consumer_sequence, 3);
                live.until("three acknowledgements", |l| {
                    l.acks("ORDERS", "reserve").len() == 3
                })
                .await;
                assert_eq!(
                    live.acks("ORDERS", "reserve"),
                    [
                        nak_with(WAREHOUSE_BACKOFF),
                        nak_with(WAREHOUSE_BACKOFF),
                        "+TERM".to_owned()
                    ]
                );
                // The dead letter is the order as it arrived, kept by the ORDERS stream (the app
                // declares it with `orders.>`).
                let original = serde_json::to_vec(&order(2, "offline-anvil")).expect("encode");
                let dead = live.messages("orders.dead");
                assert_eq!(dead.len(), 1);
                assert_eq!(dead[0].payload, original);
                let stored = live.stream_messages("ORDERS").await;
                let subjects: Vec<&str> = stored.iter().map(|m| m.subject.as_str()).collect();
                assert_eq!(subjects, ["orders.created", "orders.dead"]);
                assert_eq!(stored[1].payload, original);

                live.quiet().await;
                assert_eq!(live.recorder().outcomes("reserve").len(), 3);
                live.stop().await;
            }

            #[tokio::test]
            async fn a_greylisted_receipt_comes_back_as_a_copy_at_once() {
                let mut live = Live::run(app()).await;
                live.publish("receipts.send", &receipt(3, "cy@greylisting.example"))
                    .await;
                live.until("mailed on the copy", |l| {
                    l.recorder().outcomes("mail_receipt").len() == 2
                })
                .await;
                live.quiet().await;

                assert_eq!(
                    live.recorder().outcomes("mail_receipt"),
                    [HandlerOutcome::retry(), HandlerOutcome::ack()]
                );
                assert_eq!(attempts(&live, "mail_receipt"), [1, 2]);
                assert_eq!(live.recorder().delivered("mail_receipt"), [None, None]);
                let carried = live.messages("receipts.send");
                assert_eq!(carried.len(), 2, "the original and one copy");
                assert_eq!(retry_count(&carried[0]), None);
                assert_eq!(retry_count(&carried[1]).as_deref(), Some("1"));
                assert_eq!(carried[1].payload, carried[0].payload);
                assert!(live.messages("receipts.dead").is_empty());
                live.stop().await;
            }

            #[tokio::test]
            async fn a_receipt_at_the_cap_goes_to_the_dead_letter_subject_as_it_arrived() {
                let mut live = Live::run(app()).await;
                live.publish("receipts.send", &receipt(4, "di@unreachable.example"))
                    .await;
                live.until("the dead letter", |l| {
                    !l.messages("receipts.dead").is_empty()
                })
                .await;
                live.quiet().await;

                assert_eq!(
                    live.recorder().outcomes("mail_receipt"),
                    [HandlerOutcome::retry(), HandlerOutcome::retry()]
                );
                assert_eq!(attempts(&live, "mail_receipt"), [1, 2]);
                let dead = live.messages("receipts.dead");
                assert_eq!(dead.len(), 1);
                assert_eq!(
                    dead[0].payload,
                    serde_json::to_vec(&receipt(4, "di@unreachable.example")).expect("encode")
                );
                // As it arrived: the second attempt was the first copy.
                assert_eq!(retry_count(&dead[0]).as_deref(), Some("1"));
                assert_eq!(live.published::<Receipt>("receipts.send").len(), 2);
                live.stop().await;
            }

            #[tokio::test]
            async fn a_pattern_sends_its_copy_to_the_retry_to_subject() {
                let mut live = Live::run(app()).await;
                let start = Instant::now();
                live.publish("audit.orders", &event(5, "export")).await;
                // The copy reaches the handler and the test's own subscription separately:
                // wait for both before reading what the wire carried.
                live.until("written on the copy, and the copy seen on the wire", |l| {
                    l.recorder().outcomes("audit").len() == 2
                        && !l.messages("audit.retry").is_empty()
                })
                .await;
                assert!(start.elapsed() >= AUDIT_BACKOFF - Duration::from_millis(100));

                assert_eq!(
                    live.recorder().outcomes("audit"),
                    [
                        HandlerOutcome::retry_after(AUDIT_BACKOFF),
                        HandlerOutcome::ack()
                    ]
                );
                assert_eq!(subjects(&live, "audit"), ["audit.orders", "audit.retry"]);
                assert_eq!(attempts(&live, "audit"), [1, 2]);
                let copies = live.messages("audit.retry");
                assert_eq!(copies.len(), 1);
                assert_eq!(retry_count(&copies[0]).as_deref(), Some("1"));
                assert_eq!(
                    live.published::<AuditEvent>("audit.retry"),
                    [event(5, "export")]
                );
                live.stop().await;
            }

            #[tokio::test]
            async fn a_pattern_at_the_cap_without_a_dead_letter_lets_the_event_go() {
                let mut live = Live::run(app()).await;
                live.publish("audit.payments", &event(6, "purge")).await;
                live.until("three attempts", |l| {
                    l.recorder().outcomes("audit").len() == 3
                })
                .await;
                // Longer than the backoff: no fourth attempt comes.
                tokio::time::sleep(AUDIT_BACKOFF * 2).await;

                assert_eq!(
                    live.recorder().outcomes("audit"),
                    vec![HandlerOutcome::retry_after(AUDIT_BACKOFF); 3]
                );
                assert_eq!(
                    subjects(&live, "audit"),
                    ["audit.payments", "audit.retry", "audit.retry"]
                );
                assert_eq!(attempts(&live, "audit"), [1, 2, 3]);
                assert_eq!(live.messages("audit.retry").len(), 2);
                // Nothing anywhere else: no dead letter is declared.
                let elsewhere: Vec<String> = live
                    .messages(">")
                    .iter()
                    .map(|m| m.subject.to_string())
                    .filter(|s| {
                        !s.starts_with("audit.")
                            && !s.starts_with("$JS.")
                            && !s.starts_with("_INBOX.")
                    })
                    .collect();
                assert!(elsewhere.is_empty(), "published elsewhere: {elsewhere:?}");
                live.stop().await;
            }
        }
    };
}

/// `examples/retries_dead_letters.rs`, with `#[subscriber]`.
#[allow(dead_code)]
mod retries_dead_letters {
    include!("../examples/retries_dead_letters.rs");

    retries_scenarios!();
}

/// `examples/manual/retries_dead_letters.rs`, with `Handle` by hand.
#[allow(dead_code)]
mod manual_retries_dead_letters {
    include!("../examples/manual/retries_dead_letters.rs");

    retries_scenarios!();
}
