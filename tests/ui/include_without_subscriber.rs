use ruststream_nats::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Outgoing)]
#[outgoing(name = "payments.authorized")]
struct Payment {
    id: u64,
}

async fn capture(payment: &Payment) -> HandlerOutcome {
    let _ = payment.id;
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
