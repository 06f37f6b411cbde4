use ruststream_nats::prelude::*;

#[ruststream::app]
fn app(url: &str) -> impl App<State = ()> {
    RustStream::new(AppInfo::new("payments", "0.1.0")).with_broker(NatsBroker::new(url), |_b| {})
}
