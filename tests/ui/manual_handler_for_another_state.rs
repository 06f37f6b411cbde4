use ruststream_nats::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Outgoing)]
#[outgoing(name = "payments.authorized")]
struct Payment {
    id: u64,
}

use std::convert::Infallible;

#[derive(Clone, Default)]
struct Clients;

struct Capture;

impl Handle<Payment> for Capture {
    async fn handle(
        &self,
        _payment: &Payment,
        _outs: &(),
        _ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        Ok(())
    }
}

fn main() {
    let _app = RustStream::new(AppInfo::new("payments", "0.1.0"))
        .on_startup(async move |()| Ok::<_, Infallible>(Clients))
        .with_broker(NatsBroker::new("nats://localhost:4222"), |b| {
            b.include(CoreSubject::new("payments.authorized").handler(Capture));
        });
}
