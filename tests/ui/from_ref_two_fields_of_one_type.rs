use ruststream_nats::prelude::*;

#[derive(Clone, Default, FromRef)]
struct Clients {
    primary: String,
    replica: String,
}

fn main() {}
