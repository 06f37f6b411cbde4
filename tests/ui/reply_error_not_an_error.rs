use ruststream_nats::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Deserialize)]
struct Payment {
    id: u64,
}

#[derive(Serialize, Outgoing)]
#[outgoing(name = "payments.captured")]
struct Captured {
    payment: u64,
}

#[subscriber("payments.authorized", reply)]
async fn capture(payment: &Payment) -> Result<Captured, &'static str> {
    Ok(Captured { payment: payment.id })
}

fn main() {
    let _ = RustStream::new(AppInfo::new("payments", "0.1.0"))
        .with_broker(NatsBroker::new("nats://localhost:4222"), |b| {
            b.include(capture);
        });
}
