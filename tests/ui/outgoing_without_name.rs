use ruststream_nats::prelude::*;
use serde::Serialize;

#[derive(Serialize, Outgoing)]
struct Captured {
    payment: u64,
}

fn main() {}
