use ruststream_nats::prelude::*;
use serde::Deserialize;
use std::sync::Arc;

#[derive(Deserialize)]
struct Payment {
    id: u64,
}

struct Bank;

#[subscriber("payments.authorized")]
async fn capture(payment: &Payment, State(bank): State<Arc<Bank>>) -> HandlerOutcome {
    let _ = (payment.id, bank);
    HandlerOutcome::ack()
}

fn main() {
    let _app = RustStream::new(AppInfo::new("payments", "0.1.0")).with_broker(
        NatsBroker::new("nats://localhost:4222"),
        |b| {
            b.include(capture);
        },
    );
}
