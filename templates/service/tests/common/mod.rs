//! The test body both `tests/in_process.rs` and `tests/live.rs` run: the same publishes and the
//! same assertions, on NATS emulated in the test or on a real nats-server.

use ruststream_nats::prelude::*;
use ruststream_nats::testing::TestApp;

use {{crate_name}}::{Accepted, DEAD_LETTERS, Order};

pub async fn accepts_orders_and_dead_letters_empty_ones(t: &TestApp) {
    t.publish("orders.created", &Order { id: 1, quantity: 2 })
        .await
        .expect("published");
    t.settle().await;
    // What the handler said, and what it published.
    assert_eq!(t.outcomes("accept"), [HandlerOutcome::ack()]);
    assert_eq!(
        t.published::<Accepted>("orders.accepted"),
        [Accepted { order: 1 }]
    );

    t.publish("orders.created", &Order { id: 2, quantity: 0 })
        .await
        .expect("published");
    t.settle().await;
    assert_eq!(
        t.outcomes("accept"),
        [HandlerOutcome::ack(), HandlerOutcome::dead_letter()]
    );
    // The empty order went to the dead letters as it arrived, and nothing was published.
    let dead = t.dead_letters(DEAD_LETTERS);
    assert_eq!(dead.len(), 1);
    let order: Order = serde_json::from_slice(&dead[0].payload).expect("an order");
    assert_eq!(order, Order { id: 2, quantity: 0 });
    assert_eq!(t.published::<Accepted>("orders.accepted").len(), 1);

    // What the server holds: both settled, nothing waiting.
    assert_eq!(t.acknowledgements("ORDERS", "accept"), ["+ACK", "+TERM"]);
    let info = t
        .consumer_info("ORDERS", "accept")
        .await
        .expect("the consumer");
    assert_eq!((info.delivered, info.ack_pending, info.pending), (2, 0, 0));
}
