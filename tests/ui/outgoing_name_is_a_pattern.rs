use ruststream_nats::prelude::*;
use serde::Serialize;

#[derive(Serialize, Outgoing)]
#[outgoing(name = "payments.*")]
struct Captured {
    payment: u64,
}

fn main() {}
