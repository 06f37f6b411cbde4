use ruststream_nats::prelude::*;
use serde::Deserialize;

#[derive(Deserialize)]
struct Payment {
    id: u64,
}

#[subscriber("payments.authorized")]
async fn capture(payment: &Payment) -> Result<(), String> {
    if payment.id == 0 {
        return Err("no id".to_owned());
    }
    Ok(())
}

fn main() {}
