use ruststream_nats::prelude::*;

fn main() {
    let _wait = NonZeroDuration::from_secs(nonzero!(0));
}
