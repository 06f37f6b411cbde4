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

fn main() {
    let _app = RustStream::new(AppInfo::new("payments", "0.1.0")).with_broker(
        NatsBroker::new("nats://localhost:4222"),
        |b| {
            b.include(refund);
        },
    );
}
