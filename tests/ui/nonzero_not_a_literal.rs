use ruststream_nats::prelude::*;

fn main() {
    let secs = 60;
    let _wait = NonZeroDuration::from_secs(nonzero!(secs));
}
