use ruststream_nats::prelude::*;

fn main() {
    let _cap: std::num::NonZeroI32 = nonzero!(-1);
}
