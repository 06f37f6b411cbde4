use ruststream_nats::prelude::*;
use serde::Serialize;

#[derive(Serialize, Outgoing)]
#[outgoing(
    name = "payments.captured",
    codec = ruststream::codec::Format::Json,
    codec = ruststream::codec::Format::Json
)]
struct Captured {
    payment: u64,
}

fn main() {}
