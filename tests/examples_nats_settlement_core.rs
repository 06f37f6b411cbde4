//! The shipping notice of `examples/nats_settlement_core.rs` and its manual twin
//! `examples/manual/nats_settlement_core.rs`, tested unchanged in process (`TestApp`, paused
//! clock) and live (a real nats-server): at most once on Core NATS, a `retry` with no cap
//! delivers nothing again.
//!
//! Each example's code is included into a module of this test (`include!` of the file itself).

mod support;

/// The scenarios, expanded inside the module of each twin; `$name` is the registration's name
/// (`notify` with the macro, `Notify` by hand: a manual handler is named after its type).
macro_rules! settlement_core_scenarios {
    ($name:literal) => {
        fn shipped(id: u64, email: &str) -> Shipped {
            Shipped {
                id,
                email: email.to_owned(),
            }
        }

        mod in_process {
            use std::time::Duration;

            use ruststream_nats::RETRY_COUNT_HEADER;
            use ruststream_nats::prelude::*;
            use ruststream_nats::testing::TestApp;

            use super::{Shipped, app, shipped};

            #[tokio::test(start_paused = true)]
            async fn a_shipping_notice_is_mailed_once() {
                let t = TestApp::start(app()).await.expect("the app starts");
                t.publish("orders.shipped", &shipped(1, "ada@example.com"))
                    .await
                    .expect("published");
                t.settle().await;

                assert_eq!(t.outcomes($name), [HandlerOutcome::ack()]);
                // Core NATS counts no deliveries.
                assert_eq!(t.delivered($name), [None]);
                t.shutdown().await.expect("a clean shutdown");
            }

            #[tokio::test(start_paused = true)]
            async fn a_notice_the_mail_server_missed_is_not_delivered_again() {
                let t = TestApp::start(app()).await.expect("the app starts");
                t.publish("orders.shipped", &shipped(2, "bob@unreachable.example"))
                    .await
                    .expect("published");
                t.settle().await;
                assert_eq!(t.outcomes($name), [HandlerOutcome::retry()]);

                // No cap declared: no copy, now or later. The notice is lost.
                t.advance(Duration::from_secs(60)).await;
                assert_eq!(t.outcomes($name), [HandlerOutcome::retry()]);
                let carried = t.nats().published("orders.shipped");
                assert_eq!(carried.len(), 1, "only the original: {carried:?}");
                assert!(carried[0].headers.get(RETRY_COUNT_HEADER).is_none());
                assert_eq!(
                    t.published::<Shipped>("orders.shipped"),
                    [shipped(2, "bob@unreachable.example")]
                );
                t.shutdown().await.expect("a clean shutdown");
            }
        }

        mod live {
            use ruststream_nats::prelude::*;

            use super::{app, shipped};
            use crate::support::examples::Live;

            #[tokio::test]
            async fn a_shipping_notice_is_mailed_once() {
                let mut live = Live::run(app()).await;
                live.publish("orders.shipped", &shipped(1, "ada@example.com"))
                    .await;
                live.until("the notice handled", |l| {
                    !l.recorder().outcomes($name).is_empty()
                })
                .await;
                live.quiet().await;

                assert_eq!(live.recorder().outcomes($name), [HandlerOutcome::ack()]);
                assert_eq!(live.recorder().delivered($name), [None]);
                assert_eq!(live.messages("orders.shipped").len(), 1);
                // Nothing is sent to the server to settle a Core delivery.
                assert!(live.messages("$JS.ACK.>").is_empty());
                live.stop().await;
            }

            #[tokio::test]
            async fn a_notice_the_mail_server_missed_is_not_delivered_again() {
                let mut live = Live::run(app()).await;
                live.publish("orders.shipped", &shipped(2, "bob@unreachable.example"))
                    .await;
                live.until("the notice handled", |l| {
                    !l.recorder().outcomes($name).is_empty()
                })
                .await;
                live.quiet().await;

                assert_eq!(live.recorder().outcomes($name), [HandlerOutcome::retry()]);
                let carried = live.messages("orders.shipped");
                assert_eq!(carried.len(), 1, "the server carried only the original");
                assert!(carried[0].headers.is_none());
                live.stop().await;
            }
        }
    };
}

/// `examples/nats_settlement_core.rs`, with `#[subscriber]`.
#[allow(dead_code)]
mod nats_settlement_core {
    include!("../examples/nats_settlement_core.rs");

    settlement_core_scenarios!("notify");
}

/// `examples/manual/nats_settlement_core.rs`, with `Handle` by hand.
#[allow(dead_code)]
mod manual_nats_settlement_core {
    include!("../examples/manual/nats_settlement_core.rs");

    settlement_core_scenarios!("Notify");
}
