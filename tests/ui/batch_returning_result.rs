use ruststream_nats::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Outgoing)]
#[outgoing(name = "payments.authorized")]
struct Payment {
    id: u64,
}

#[subscriber(JetStreamSubject::new("payments.authorized", "PAYMENTS"))]
async fn capture_all(payments: &[Payment]) -> Result<(), HandlerOutcome> {
    let _ = payments.len();
    Ok(())
}

fn main() {}
