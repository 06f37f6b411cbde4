use ruststream_nats::prelude::*;

#[subscriber("payments.authorized")]
async fn capture() -> HandlerOutcome {
    HandlerOutcome::ack()
}

fn main() {}
