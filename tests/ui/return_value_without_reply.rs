use ruststream_nats::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Outgoing)]
#[outgoing(name = "payments.authorized")]
struct Payment {
    id: u64,
}

#[derive(Serialize, Outgoing)]
#[outgoing(name = "payments.captured")]
struct Captured {
    payment: u64,
}

#[subscriber("payments.authorized")]
async fn capture(payment: &Payment) -> Result<Captured, HandlerOutcome> {
    Ok(Captured {
        payment: payment.id,
    })
}

fn main() {}
