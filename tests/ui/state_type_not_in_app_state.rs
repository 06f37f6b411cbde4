use ruststream_nats::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Outgoing)]
#[outgoing(name = "payments.authorized")]
struct Payment {
    id: u64,
}

use std::convert::Infallible;
use std::sync::Arc;

#[derive(Debug, Default)]
struct Bank;

#[derive(Debug, Default)]
struct Ledger;

#[derive(Clone, Default, FromRef)]
struct Clients {
    bank: Arc<Bank>,
}

#[subscriber("payments.authorized")]
async fn capture(payment: &Payment, State(ledger): State<Arc<Ledger>>) -> HandlerOutcome {
    let _ = (payment.id, ledger);
    HandlerOutcome::ack()
}

fn main() {
    let _app = RustStream::new(AppInfo::new("payments", "0.1.0"))
        .on_startup(async move |()| Ok::<_, Infallible>(Clients::default()))
        .with_broker(NatsBroker::new("nats://localhost:4222"), |b| {
            b.include(capture);
        });
}
