use ruststream_nats::prelude::*;

#[ruststream::app]
fn main() -> impl App<State = ()> {
    RustStream::new(AppInfo::new("payments", "0.1.0"))
        .with_broker(NatsBroker::new("nats://localhost:4222"), |_b| {})
}
