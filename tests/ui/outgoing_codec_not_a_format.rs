use ruststream_nats::prelude::*;
use serde::Serialize;

struct Acme;

#[derive(Serialize, Outgoing)]
#[outgoing(name = "payments.captured", codec = Acme)]
struct Captured {
    payment: u64,
}

fn main() {}
