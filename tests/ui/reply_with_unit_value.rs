use ruststream_nats::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Outgoing)]
#[outgoing(name = "payments.authorized")]
struct Payment {
    id: u64,
}

#[subscriber("payments.authorized", reply)]
async fn capture(payment: &Payment) -> Result<(), HandlerOutcome> {
    let _ = payment.id;
    Ok(())
}

fn main() {}
