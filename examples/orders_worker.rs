// An order worker made to run as many replicas: every instance reads one durable JetStream
// consumer (the server spreads the orders among them, each order to one instance at a time) and
// one Core queue group (each notification to exactly one instance). The code of the guide
// "Deploying: many instances and a cluster" (`docs/deployment.md`).
//
// ```text
// cargo run --example orders_worker -- describe   # the registrations, without connecting
// NATS_URL=nats://n1:4222,nats://n2:4222,nats://n3:4222 HOSTNAME=worker-1 \
//     cargo run --example orders_worker           # one instance; start as many as you need
// ```
//
// `NATS_URL` lists the servers (default `nats://localhost:4222`); `HOSTNAME` names the
// instance in its answers (a container's hostname, `local` when unset); `ORDERS_FULFIL_MS`
// makes each fulfilment take that long (simulated I/O; none by default). The stream `ORDERS`
// (storing `orders.placed`) is created by the operator, with the replicas the cluster needs.
//
// The twin without macros is `examples/manual/orders_worker.rs`.

use std::convert::Infallible;
use std::sync::Arc;

use ruststream_nats::prelude::*;
use serde::{Deserialize, Serialize};

/// An order placed, stored in the stream `ORDERS`.
#[derive(Debug, PartialEq, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "orders.placed")]
struct Order {
    id: u64,
}

/// An order fulfilled, and by which instance.
#[derive(Debug, PartialEq, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "orders.fulfilled")]
struct Fulfilled {
    order: u64,
    by: String,
}

/// A customer to notify about an order, on Core NATS.
#[derive(Debug, PartialEq, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "orders.notify")]
struct Notify {
    order: u64,
}

/// A customer notified, and by which instance.
#[derive(Debug, PartialEq, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "orders.notified")]
struct Notified {
    order: u64,
    by: String,
}

/// Every instance reads the durable `fulfil`: the server hands each order to one of them and,
/// when that one dies before acknowledging, to another after `ack_wait`.
#[subscriber(
    JetStreamSubject::new("orders.placed", "ORDERS")
        .durable("fulfil")
        .ack_wait(NonZeroDuration::from_secs(nonzero!(5))),
    reply
)]
async fn fulfil(
    order: &Order,
    State(instance): State<Instance>,
) -> Result<Fulfilled, HandlerOutcome> {
    instance.fulfil().await;
    Ok(Fulfilled {
        order: order.id,
        by: instance.name().to_owned(),
    })
}

/// Every instance joins the queue group `notifiers`: each notification reaches one of them.
#[subscriber(CoreSubject::new("orders.notify").queue_group("notifiers"), reply)]
async fn notify(
    notify: &Notify,
    State(instance): State<Instance>,
) -> Result<Notified, HandlerOutcome> {
    Ok(Notified {
        order: notify.order,
        by: instance.name().to_owned(),
    })
}

#[ruststream::app]
fn app() -> impl App<State = Worker> {
    let url = std::env::var("NATS_URL").unwrap_or_else(|_| "nats://localhost:4222".to_owned());
    let instance = Instance::from_env();
    let name = format!("orders-worker {}", instance.name());
    RustStream::new(AppInfo::new("orders-worker", "0.1.0"))
        .on_startup(async move |()| Ok::<_, Infallible>(Worker { instance }))
        .with_broker(NatsBroker::new(url).connection_name(name), |b| {
            // Up to 16 orders at once in each instance.
            b.include(fulfil).concurrency(nonzero!(16));
            b.include(notify);
        })
}

/// The app state.
#[derive(Clone, FromRef)]
struct Worker {
    instance: Instance,
}

/// Which instance this is: its `HOSTNAME`, `local` when unset.
#[derive(Clone, Debug)]
struct Instance {
    name: Arc<str>,
    /// How long a fulfilment takes: `ORDERS_FULFIL_MS` milliseconds of simulated I/O (a stock
    /// reservation, say), none when unset. The scale tests set it so that an instance always
    /// holds orders in flight when one is killed mid-run.
    fulfil_for: std::time::Duration,
}

impl Instance {
    fn from_env() -> Self {
        let fulfil_ms = std::env::var("ORDERS_FULFIL_MS")
            .ok()
            .and_then(|ms| ms.trim().parse().ok())
            .unwrap_or(0);
        Self {
            name: std::env::var("HOSTNAME")
                .unwrap_or_else(|_| "local".to_owned())
                .into(),
            fulfil_for: std::time::Duration::from_millis(fulfil_ms),
        }
    }

    fn name(&self) -> &str {
        &self.name
    }

    /// The simulated I/O of one fulfilment.
    async fn fulfil(&self) {
        if !self.fulfil_for.is_zero() {
            tokio::time::sleep(self.fulfil_for).await;
        }
    }
}
