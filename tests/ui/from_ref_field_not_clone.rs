use ruststream_nats::prelude::*;

#[derive(Debug, Default)]
struct Bank;

#[derive(Default, FromRef)]
struct Clients {
    bank: Bank,
}

fn main() {}
