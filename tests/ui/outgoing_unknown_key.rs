use ruststream_nats::prelude::*;
use serde::Serialize;

#[derive(Serialize, Outgoing)]
#[outgoing(subject = "payments.captured")]
struct Captured {
    payment: u64,
}

fn main() {}
