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
    id: u64,
}

#[subscriber(CoreSubject::new("payments.authorized").batch(nonzero!(10)), reply)]
async fn capture_all(payments: &[Payment]) -> Vec<Result<Captured, String>> {
    payments.iter().map(|p| Ok(Captured { id: p.id })).collect()
}

fn main() {}
