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
    payments: usize,
}

#[subscriber(JetStreamSubject::new("payments.authorized", "PAYMENTS"), reply)]
async fn capture_all(payments: &[Payment]) -> Result<Captured, HandlerOutcome> {
    Ok(Captured {
        payments: payments.len(),
    })
}

fn main() {}
