use std::sync::Arc;

use ruststream_nats::prelude::*;

#[derive(Debug, Default)]
struct Bank;

#[derive(Clone, Default, FromRef)]
struct Clients(Arc<Bank>);

fn main() {}
