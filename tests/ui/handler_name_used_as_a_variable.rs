use ruststream_nats::prelude::*;
use serde::Deserialize;

#[derive(Deserialize)]
struct Payment {
    id: u64,
}

#[subscriber("payments.authorized")]
async fn capture(payment: &Payment) -> HandlerOutcome {
    let _ = payment.id;
    HandlerOutcome::ack()
}

fn total(amounts: &[u64]) -> u64 {
    let capture = amounts.iter().sum();
    capture
}

fn main() {
    let _ = total(&[1, 2]);
}
