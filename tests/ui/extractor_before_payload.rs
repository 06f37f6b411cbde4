use ruststream_nats::prelude::*;

#[subscriber("payments.authorized")]
async fn capture(Ctx(delivered): Ctx<Delivered>) -> HandlerOutcome {
    let _ = delivered;
    HandlerOutcome::ack()
}

fn main() {}
