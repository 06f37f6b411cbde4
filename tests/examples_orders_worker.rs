//! The order worker of `examples/orders_worker.rs` and its manual twin
//! `examples/manual/orders_worker.rs`, one instance, tested unchanged in both modes (in process
//! with `TestApp`, live on a real nats-server). Many instances of it, as child processes, are
//! `tests/scale_instances.rs`.

mod support;

/// The scenarios, expanded inside the module of each twin (`super::*` is the example's code).
macro_rules! orders_worker_scenarios {
    () => {
        /// The name the instance answers with: its `HOSTNAME`, `local` when unset.
        fn this_instance() -> String {
            std::env::var("HOSTNAME").unwrap_or_else(|_| "local".to_owned())
        }

        mod in_process {
            use ruststream_nats::prelude::*;
            use ruststream_nats::testing::TestApp;

            use super::{Fulfilled, Notified, Notify, Order, app, this_instance};

            #[tokio::test(start_paused = true)]
            async fn an_order_is_fulfilled_and_a_notification_answered_by_this_instance() {
                let t = TestApp::start(app()).await.expect("the app starts");
                t.publish("orders.placed", &Order { id: 7 })
                    .await
                    .expect("published");
                t.publish("orders.notify", &Notify { order: 7 })
                    .await
                    .expect("published");
                t.settle().await;

                assert_eq!(t.outcomes("fulfil"), [HandlerOutcome::ack()]);
                assert_eq!(t.delivered("fulfil"), [Some(1)]);
                assert_eq!(
                    t.published::<Fulfilled>("orders.fulfilled"),
                    [Fulfilled {
                        order: 7,
                        by: this_instance()
                    }]
                );
                assert_eq!(
                    t.published::<Notified>("orders.notified"),
                    [Notified {
                        order: 7,
                        by: this_instance()
                    }]
                );
                assert_eq!(t.nats().acknowledgements("ORDERS", "fulfil"), ["+ACK"]);
                t.shutdown().await.expect("a clean shutdown");
            }
        }

        mod live {
            use ruststream_nats::prelude::*;

            use super::{Fulfilled, Notified, Notify, Order, app, this_instance};
            use crate::support::examples::Live;

            #[tokio::test]
            async fn an_order_is_fulfilled_and_a_notification_answered_by_this_instance() {
                let mut live = Live::run(app()).await;
                let seq = live.publish_stored("orders.placed", &Order { id: 7 }).await;
                live.publish("orders.notify", &Notify { order: 7 }).await;
                live.until("the +ACK and both answers", |l| {
                    l.acks("ORDERS", "fulfil").len() == 1
                        && l.messages("orders.notified").len() == 1
                })
                .await;

                assert_eq!(live.recorder().outcomes("fulfil"), [HandlerOutcome::ack()]);
                assert_eq!(
                    live.published::<Fulfilled>("orders.fulfilled"),
                    [Fulfilled {
                        order: 7,
                        by: this_instance()
                    }]
                );
                assert_eq!(
                    live.published::<Notified>("orders.notified"),
                    [Notified {
                        order: 7,
                        by: this_instance()
                    }]
                );
                assert_eq!(live.acks("ORDERS", "fulfil"), ["+ACK"]);
                let info = live
                    .consumer_until("ORDERS", "fulfil", "acknowledged", |i| {
                        i.num_ack_pending == 0 && i.ack_floor.stream_sequence >= seq
                    })
                    .await;
                assert_eq!(info.delivered.consumer_sequence, 1);
                live.stop().await;
            }
        }
    };
}

/// `examples/orders_worker.rs`, with `#[subscriber]`.
#[allow(dead_code)]
mod orders_worker {
    include!("../examples/orders_worker.rs");

    orders_worker_scenarios!();
}

/// `examples/manual/orders_worker.rs`, with `Handle` by hand.
#[allow(dead_code)]
mod manual_orders_worker {
    include!("../examples/manual/orders_worker.rs");

    orders_worker_scenarios!();
}
