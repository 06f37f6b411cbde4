//! A service whose `Cargo.toml` names `ruststream-nats` and `serde`, not `ruststream`:
//! `tests/macros_crate_path.rs` checks that it compiles (the macros reach the runtime through
//! `ruststream_nats`).

use std::convert::Infallible;
use std::sync::Arc;

use ruststream_nats::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Deserialize)]
struct Payment {
    id: u64,
}

#[derive(Serialize, Deserialize, Outgoing)]
#[outgoing(name = "payments.captured")]
struct Captured {
    payment: u64,
}

#[derive(Default)]
struct Bank;

#[derive(Clone, Default, FromRef)]
struct Clients {
    bank: Arc<Bank>,
}

#[subscriber(JetStreamSubject::new("payments.authorized", "PAYMENTS").durable("capture"), reply)]
async fn capture(
    payment: &Payment,
    State(bank): State<Arc<Bank>>,
    Ctx(attempt): Ctx<Attempt>,
) -> Result<Captured, HandlerOutcome> {
    let _ = (bank, attempt);
    Ok(Captured {
        payment: payment.id,
    })
}

#[subscriber("payments.captured")]
async fn refresh(captured: &Captured) -> HandlerOutcome {
    let _ = captured;
    HandlerOutcome::ack()
}

fn main() {
    let app = RustStream::new(AppInfo::new("payments", "0.1.0"))
        .on_startup(async move |()| Ok::<_, Infallible>(Clients::default()))
        .with_broker(NatsBroker::new("nats://localhost:4222"), |b| {
            b.include(capture).max_attempts(nonzero!(3));
            b.include(refresh);
        });
    assert_eq!(app.registrations().len(), 2);
}
