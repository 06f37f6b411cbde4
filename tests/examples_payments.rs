//! The payments service of `examples/payments.rs` and its manual twin
//! `examples/manual/payments.rs`, tested unchanged in both modes:
//!
//! - `in_process`: `TestApp` runs the production `app()` with NATS emulated in the process,
//!   under a paused clock, so Busy's 30 s backoff passes at once;
//! - `live`: the same `app()` on a real nats-server (its `NatsBroker` uses a connection to the
//!   test's server instead of the URL written in the example), asked through async-nats what it
//!   saw: consumer info, the acknowledgements on the wire, the replies.
//!
//! The bank stand-in answers by card: `visa` is captured, `busy-once` is Busy once, `flaky` is
//! Unavailable once, `declined` is always declined.
//!
//! Each example's code is included into a module of this test (`include!` of the file itself),
//! where its private `app()` and message types are in scope; the scenarios are written once and
//! expanded in both modules.

mod support;

/// The scenarios, expanded inside the module of each twin (`super::*` is the example's code).
macro_rules! payments_scenarios {
    () => {
        fn payment(id: u64, card: &str) -> Payment {
            Payment {
                id,
                card: card.to_owned(),
                amount_cents: 1250,
            }
        }

        fn captured(id: u64) -> Captured {
            Captured {
                payment: id,
                amount_cents: 1250,
            }
        }

        mod in_process {
            use std::time::Duration;

            use ruststream_nats::prelude::*;
            use ruststream_nats::testing::{ConsumerFacts, TestApp};
            use tokio::time::Instant;

            use super::{BACKOFF, Captured, app, captured, payment};
            use crate::support::examples::nak_with;

            fn consumer(t: &TestApp) -> ConsumerFacts {
                t.nats()
                    .consumer_info("PAYMENTS", "capture")
                    .expect("the app opened its consumer")
            }

            fn acks(t: &TestApp) -> Vec<String> {
                t.nats().acknowledgements("PAYMENTS", "capture")
            }

            #[tokio::test(start_paused = true)]
            async fn a_captured_payment_is_replied_and_acknowledged() {
                let t = TestApp::start(app()).await.expect("the app starts");
                t.publish("payments.authorized", &payment(1, "visa"))
                    .await
                    .expect("published");
                t.settle().await;

                assert_eq!(t.outcomes("capture"), [HandlerOutcome::ack()]);
                assert_eq!(t.delivered("capture"), [Some(1)]);
                // The reply, then the dashboard that reads it on Core NATS.
                assert_eq!(
                    t.published::<Captured>("payments.captured"),
                    [captured(1)]
                );
                assert_eq!(t.outcomes("refresh"), [HandlerOutcome::ack()]);
                assert_eq!(t.delivered("refresh"), [None]);
                assert_eq!(acks(&t), ["+ACK"]);
                let info = consumer(&t);
                assert_eq!((info.delivered, info.ack_pending), (1, 0));

                // Finished: not delivered again, not even after ack_wait.
                t.advance(Duration::from_secs(120)).await;
                assert_eq!(t.delivered("capture"), [Some(1)]);
                t.shutdown().await.expect("a clean shutdown");
            }

            #[tokio::test(start_paused = true)]
            async fn a_busy_bank_has_the_payment_held_for_the_backoff() {
                let wall = std::time::Instant::now();
                let t = TestApp::start(app()).await.expect("the app starts");
                let start = Instant::now();
                t.publish("payments.authorized", &payment(2, "busy-once"))
                    .await
                    .expect("published");
                t.settle().await;

                assert_eq!(
                    t.outcomes("capture"),
                    [HandlerOutcome::retry_after(BACKOFF)]
                );
                assert_eq!(acks(&t), [nak_with(BACKOFF)]);
                let held = consumer(&t);
                assert_eq!((held.delivered, held.ack_pending), (1, 1));

                // Held on the server: nothing before the 30 s are over.
                t.advance(BACKOFF - Duration::from_secs(1)).await;
                assert_eq!(t.delivered("capture"), [Some(1)]);
                assert!(t.published::<Captured>("payments.captured").is_empty());

                t.advance(Duration::from_secs(1)).await;
                assert_eq!(
                    t.outcomes("capture"),
                    [HandlerOutcome::retry_after(BACKOFF), HandlerOutcome::ack()]
                );
                assert_eq!(t.delivered("capture"), [Some(1), Some(2)]);
                assert_eq!(acks(&t), [nak_with(BACKOFF), "+ACK".to_owned()]);
                assert_eq!(
                    t.published::<Captured>("payments.captured"),
                    [captured(2)]
                );
                let info = consumer(&t);
                assert_eq!((info.delivered, info.ack_pending), (2, 0));
                assert!(start.elapsed() >= BACKOFF, "the clock passed the backoff");
                t.shutdown().await.expect("a clean shutdown");
                println!(
                    "the seed's {BACKOFF:?} backoff passed on the paused clock in {:?} of wall time",
                    wall.elapsed()
                );
            }

            #[tokio::test(start_paused = true)]
            async fn an_unavailable_bank_has_the_payment_delivered_again_at_once() {
                let t = TestApp::start(app()).await.expect("the app starts");
                let start = Instant::now();
                t.publish("payments.authorized", &payment(3, "flaky"))
                    .await
                    .expect("published");
                t.settle().await;

                assert_eq!(
                    t.outcomes("capture"),
                    [HandlerOutcome::retry(), HandlerOutcome::ack()]
                );
                assert_eq!(t.delivered("capture"), [Some(1), Some(2)]);
                assert_eq!(acks(&t), ["-NAK", "+ACK"]);
                assert!(
                    start.elapsed() < Duration::from_secs(1),
                    "delivered again at once, without waiting"
                );
                assert_eq!(
                    t.published::<Captured>("payments.captured"),
                    [captured(3)]
                );
                let info = consumer(&t);
                assert_eq!((info.delivered, info.ack_pending), (2, 0));
                t.shutdown().await.expect("a clean shutdown");
            }

            #[tokio::test(start_paused = true)]
            async fn a_declined_payment_is_terminated_and_never_delivered_again() {
                let t = TestApp::start(app()).await.expect("the app starts");
                t.publish("payments.authorized", &payment(4, "declined"))
                    .await
                    .expect("published");
                t.settle().await;

                assert_eq!(t.outcomes("capture"), [HandlerOutcome::drop()]);
                assert_eq!(acks(&t), ["+TERM"]);
                // Past the 60 s ack_wait: a terminated payment never comes back.
                t.advance(Duration::from_secs(120)).await;
                assert_eq!(t.delivered("capture"), [Some(1)]);
                assert!(t.published::<Captured>("payments.captured").is_empty());
                assert!(t.outcomes("refresh").is_empty());
                let info = consumer(&t);
                assert_eq!((info.delivered, info.ack_pending), (1, 0));
                t.shutdown().await.expect("a clean shutdown");
            }
        }

        mod live {
            use std::time::{Duration, Instant};

            use ruststream_nats::prelude::*;

            use super::{BACKOFF, Captured, app, captured, payment};
            use crate::support::examples::{Live, PATIENCE, nak_with};

            #[tokio::test]
            async fn a_captured_payment_is_replied_and_acknowledged() {
                let mut live = Live::run(app()).await;
                let seq = live
                    .publish_stored("payments.authorized", &payment(1, "visa"))
                    .await;
                live.until("the dashboard refreshed", |l| {
                    l.recorder().outcomes("refresh").len() == 1
                })
                .await;
                live.until("the +ACK", |l| l.acks("PAYMENTS", "capture").len() == 1)
                    .await;

                assert_eq!(live.recorder().outcomes("capture"), [HandlerOutcome::ack()]);
                assert_eq!(live.recorder().delivered("capture"), [Some(1)]);
                assert_eq!(
                    live.published::<Captured>("payments.captured"),
                    [captured(1)]
                );
                assert_eq!(live.recorder().delivered("refresh"), [None]);
                assert_eq!(live.acks("PAYMENTS", "capture"), ["+ACK"]);
                let info = live
                    .consumer_until("PAYMENTS", "capture", "acknowledged", |i| {
                        i.num_ack_pending == 0 && i.ack_floor.stream_sequence >= seq
                    })
                    .await;
                assert_eq!(info.delivered.consumer_sequence, 1);

                live.quiet().await;
                assert_eq!(live.recorder().delivered("capture"), [Some(1)]);
                live.stop().await;
            }

            /// The seed's backoff is 30 s and stays: this test waits for the real server to
            /// deliver the payment again.
            #[tokio::test]
            async fn a_busy_bank_has_the_payment_held_for_the_backoff() {
                let mut live = Live::run(app()).await;
                let start = Instant::now();
                let seq = live
                    .publish_stored("payments.authorized", &payment(2, "busy-once"))
                    .await;
                live.until("the -NAK with the delay", |l| {
                    l.acks("PAYMENTS", "capture").len() == 1
                })
                .await;

                assert_eq!(
                    live.recorder().outcomes("capture"),
                    [HandlerOutcome::retry_after(BACKOFF)]
                );
                assert_eq!(live.acks("PAYMENTS", "capture"), [nak_with(BACKOFF)]);
                let held = live
                    .consumer_until("PAYMENTS", "capture", "the payment held", |i| {
                        i.num_ack_pending == 1
                    })
                    .await;
                assert_eq!(held.delivered.consumer_sequence, 1);
                assert_eq!(held.delivered.stream_sequence, seq);
                assert_eq!(held.ack_floor.stream_sequence, 0);
                live.quiet().await;
                assert_eq!(live.recorder().delivered("capture"), [Some(1)]);

                live.until_within(BACKOFF + PATIENCE, "delivered again", |l| {
                    l.recorder().outcomes("capture").len() == 2
                })
                .await;
                let waited = start.elapsed();
                assert!(
                    waited >= BACKOFF - Duration::from_millis(100),
                    "held for the backoff, delivered again after {waited:?}"
                );
                assert_eq!(
                    live.recorder().outcomes("capture"),
                    [HandlerOutcome::retry_after(BACKOFF), HandlerOutcome::ack()]
                );
                assert_eq!(live.recorder().delivered("capture"), [Some(1), Some(2)]);
                live.until("the capture replied", |l| {
                    !l.published::<Captured>("payments.captured").is_empty()
                })
                .await;
                assert_eq!(
                    live.published::<Captured>("payments.captured"),
                    [captured(2)]
                );
                let info = live
                    .consumer_until("PAYMENTS", "capture", "acknowledged", |i| {
                        i.num_ack_pending == 0 && i.ack_floor.stream_sequence >= seq
                    })
                    .await;
                assert_eq!(info.delivered.consumer_sequence, 2);
                assert_eq!(
                    live.acks("PAYMENTS", "capture"),
                    [nak_with(BACKOFF), "+ACK".to_owned()]
                );
                live.stop().await;
            }

            #[tokio::test]
            async fn an_unavailable_bank_has_the_payment_delivered_again_at_once() {
                let mut live = Live::run(app()).await;
                let start = Instant::now();
                let seq = live
                    .publish_stored("payments.authorized", &payment(3, "flaky"))
                    .await;
                live.until("delivered again", |l| {
                    l.recorder().outcomes("capture").len() == 2
                })
                .await;
                // At once: well before the 60 s ack_wait would have brought it back.
                assert!(start.elapsed() < PATIENCE);

                assert_eq!(
                    live.recorder().outcomes("capture"),
                    [HandlerOutcome::retry(), HandlerOutcome::ack()]
                );
                assert_eq!(live.recorder().delivered("capture"), [Some(1), Some(2)]);
                let info = live
                    .consumer_until("PAYMENTS", "capture", "acknowledged", |i| {
                        i.num_ack_pending == 0 && i.ack_floor.stream_sequence >= seq
                    })
                    .await;
                assert_eq!(info.delivered.consumer_sequence, 2);
                live.until("both acknowledgements", |l| {
                    l.acks("PAYMENTS", "capture").len() == 2
                })
                .await;
                assert_eq!(live.acks("PAYMENTS", "capture"), ["-NAK", "+ACK"]);
                live.until("the capture replied", |l| {
                    !l.published::<Captured>("payments.captured").is_empty()
                })
                .await;
                assert_eq!(
                    live.published::<Captured>("payments.captured"),
                    [captured(3)]
                );
                live.stop().await;
            }

            #[tokio::test]
            async fn a_declined_payment_is_terminated_and_never_delivered_again() {
                let mut live = Live::run(app()).await;
                let seq = live
                    .publish_stored("payments.authorized", &payment(4, "declined"))
                    .await;
                live.until("the +TERM", |l| l.acks("PAYMENTS", "capture").len() == 1)
                    .await;

                assert_eq!(live.recorder().outcomes("capture"), [HandlerOutcome::drop()]);
                assert_eq!(live.acks("PAYMENTS", "capture"), ["+TERM"]);
                let info = live
                    .consumer_until("PAYMENTS", "capture", "terminated", |i| {
                        i.num_ack_pending == 0 && i.ack_floor.stream_sequence >= seq
                    })
                    .await;
                assert_eq!(info.delivered.consumer_sequence, 1);
                live.quiet().await;
                assert_eq!(live.recorder().delivered("capture"), [Some(1)]);
                assert!(live.published::<Captured>("payments.captured").is_empty());
                assert!(live.recorder().outcomes("refresh").is_empty());
                live.stop().await;
            }
        }
    };
}

/// `examples/payments.rs`, with `#[subscriber]`.
#[allow(dead_code)]
mod payments {
    include!("../examples/payments.rs");

    payments_scenarios!();
}

/// `examples/manual/payments.rs`, with `Handle` by hand.
#[allow(dead_code)]
mod manual_payments {
    include!("../examples/manual/payments.rs");

    payments_scenarios!();
}
