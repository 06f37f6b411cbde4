use ruststream_nats::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Outgoing)]
#[outgoing(name = "payments.authorized")]
struct Payment {
    id: u64,
}

#[subscriber("payments.authorized")]
async fn capture(payment: &Payment) -> bool {
    payment.id > 0
}

fn main() {}
