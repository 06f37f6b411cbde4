use ruststream_nats::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Outgoing)]
#[outgoing(name = "payments.authorized")]
struct Payment {
    id: u64,
}

// Without `reply`, no return type acknowledges; a `reply` handler returns what it publishes.
#[subscriber("payments.authorized", reply)]
async fn capture(payment: &Payment) {
    let _ = payment.id;
}

fn main() {}
