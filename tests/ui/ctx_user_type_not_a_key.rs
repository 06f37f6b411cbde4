use ruststream_nats::prelude::*;
use serde::Deserialize;

#[derive(Deserialize)]
struct Payment {
    id: u64,
}

struct Tenant;

#[subscriber("payments.authorized")]
async fn capture(payment: &Payment, Ctx(tenant): Ctx<Tenant>) -> HandlerOutcome {
    let _ = (payment.id, tenant);
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
