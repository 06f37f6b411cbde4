use ruststream_nats::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Outgoing)]
#[outgoing(name = "payments.authorized")]
struct Payment {
    id: u64,
}

#[subscriber(JetStreamSubject::new("payments.authorized").durable("capture"))]
async fn capture(payment: &Payment) -> HandlerOutcome {
    let _ = payment.id;
    HandlerOutcome::ack()
}

fn main() {}
