//! A handler's name leaves the module's value names free: a parameter, a `let` and a closure
//! argument named like a handler are plain variables, and `b.include(status)` still mounts it.

use ruststream_nats::prelude::*;
use serde::Deserialize;

#[derive(Deserialize)]
struct Query {
    id: u64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Status {
    Open,
    Closed,
}

/// Answers status requests.
#[subscriber("orders.status")]
async fn status(query: &Query) -> HandlerOutcome {
    let _ = query.id;
    HandlerOutcome::ack()
}

#[subscriber("payments.authorized")]
async fn capture(query: &Query) -> HandlerOutcome {
    let _ = query.id;
    HandlerOutcome::ack()
}

struct Order {
    status: Status,
}

fn set(order: &mut Order, status: Status) {
    order.status = status;
}

fn total(amounts: &[u64]) -> u64 {
    let capture = amounts.iter().sum();
    capture
}

fn main() {
    let mut order = Order {
        status: Status::Open,
    };
    set(&mut order, Status::Closed);
    let status = order.status;
    assert_eq!(status, Status::Closed);
    assert_eq!([3].map(|capture: u64| capture + 1), [4]);
    assert_eq!(total(&[1, 2]), 3);

    let app = RustStream::new(AppInfo::new("orders", "0.1.0")).with_broker(
        NatsBroker::new("nats://localhost:4222"),
        |b| {
            b.include(self::status);
            b.include(capture);
        },
    );
    let described = ruststream::app::cli::describe(&app);
    assert!(described.contains("orders.status"), "{described}");
    assert!(described.contains("payments.authorized"), "{described}");
}
