use ruststream_nats::prelude::*;
use serde::Deserialize;

#[derive(Deserialize)]
struct Payment {
    id: u64,
}

#[subscriber(
    JetStreamSubject::new("payments.authorized", "PAYMENTS")
        .durable("capture")
        .ack_wait(60)
)]
async fn capture(payment: &Payment) -> HandlerOutcome {
    let _ = payment.id;
    HandlerOutcome::ack()
}

fn main() {}
