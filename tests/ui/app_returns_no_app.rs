use ruststream_nats::prelude::*;

#[ruststream::app]
fn app() -> AppInfo {
    AppInfo::new("payments", "0.1.0")
}
