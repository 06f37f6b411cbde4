use ruststream_nats::prelude::*;
use std::convert::Infallible;

#[derive(Clone, Default)]
struct Clients;

fn main() {
    let _app = RustStream::new(AppInfo::new("payments", "0.1.0"))
        .with_broker(NatsBroker::new("nats://localhost:4222"), |_b| {})
        .on_startup(async move |()| Ok::<_, Infallible>(Clients::default()));
}
