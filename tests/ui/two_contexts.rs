use ruststream_nats::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Outgoing)]
#[outgoing(name = "payments.authorized")]
struct Payment {
    id: u64,
}

#[subscriber("payments.authorized")]
async fn capture(
    payment: &Payment,
    ctx: &mut Context<'_>,
    again: &mut Context<'_>,
) -> HandlerOutcome {
    let _ = (payment.id, ctx, again);
    HandlerOutcome::ack()
}

fn main() {}
