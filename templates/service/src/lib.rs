//! {{project-name}}: takes orders from the `ORDERS` stream and accepts them.
//!
//! The app lives here, in the library, so the tests start the same `app()` that `main` runs.

use ruststream_nats::prelude::*;
use serde::{Deserialize, Serialize};

/// What arrives on `orders.created`, as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Order {
    pub id: u64,
    pub quantity: u32,
}

/// What the service publishes to `orders.accepted` for each order it accepts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "orders.accepted")]
pub struct Accepted {
    pub order: u64,
}

/// Where orders that can never be accepted go, as they arrived, for a person to look at.
pub const DEAD_LETTERS: &str = "orders.dead";

/// Accepts an order; one of nothing can never be filled, so it goes to the dead letters at once
/// instead of being tried again.
#[subscriber(JetStreamSubject::new("orders.created", "ORDERS").durable("accept"), reply)]
async fn accept(order: &Order) -> Result<Accepted, HandlerOutcome> {
    if order.quantity == 0 {
        tracing::warn!(order.id, "an order of nothing");
        return Err(HandlerOutcome::dead_letter());
    }
    Ok(Accepted { order: order.id })
}

/// The service: its name and version, its broker, its handlers. `NATS_URL` or `run --url`
/// override the URL written here.
pub fn app() -> impl App<State = ()> {
    let info = AppInfo::new(env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION"));
    // Created at startup when missing: the service owns its stream.
    let broker =
        NatsBroker::new("nats://localhost:4222").declare_stream("ORDERS", ["orders.created"]);
    RustStream::new(info).with_broker(broker, |b| {
        b.include(accept)
            .max_attempts(nonzero!(5))
            .dead_letter(DEAD_LETTERS);
    })
}
