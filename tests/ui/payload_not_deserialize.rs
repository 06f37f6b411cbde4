use ruststream_nats::prelude::*;
use serde::Serialize;

#[derive(Serialize)]
struct Refund {
    id: u64,
}

#[subscriber("payments.refunded")]
async fn refund(refund: &Refund) -> HandlerOutcome {
    let _ = refund.id;
    HandlerOutcome::ack()
}

fn main() {}
