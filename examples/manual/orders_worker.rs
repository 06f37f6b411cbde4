// The order worker of `examples/orders_worker.rs` without macros: the handlers implement
// `Handle` and publish their answers themselves.
//
// ```text
// cargo run --example manual_orders_worker -- describe
// NATS_URL=nats://localhost:4222 HOSTNAME=worker-1 cargo run --example manual_orders_worker
// ```

use std::convert::Infallible;
use std::sync::Arc;

use ruststream_nats::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, PartialEq, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "orders.placed")]
struct Order {
    id: u64,
}

#[derive(Debug, PartialEq, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "orders.fulfilled")]
struct Fulfilled {
    order: u64,
    by: String,
}

#[derive(Debug, PartialEq, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "orders.notify")]
struct Notify {
    order: u64,
}

#[derive(Debug, PartialEq, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "orders.notified")]
struct Notified {
    order: u64,
    by: String,
}

/// Fulfils an order and publishes who did.
struct Fulfil;

impl Handle<Order, Publisher<Fulfilled>, Worker> for Fulfil {
    async fn handle(
        &self,
        order: &Order,
        outs: &Publisher<Fulfilled>,
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        let Some(worker) = ctx.state::<Worker>() else {
            return Err(HandlerOutcome::retry());
        };
        worker.instance.fulfil().await;
        let fulfilled = Fulfilled {
            order: order.id,
            by: worker.instance.name().to_owned(),
        };
        outs.publish(ctx, &fulfilled).await.map_err(|err| {
            tracing::error!(order.id, %err, "the fulfilment was not published");
            HandlerOutcome::retry()
        })
    }
}

/// Notifies a customer and publishes who did.
struct NotifyCustomer;

impl Handle<Notify, Publisher<Notified>, Worker> for NotifyCustomer {
    async fn handle(
        &self,
        notify: &Notify,
        outs: &Publisher<Notified>,
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        let Some(worker) = ctx.state::<Worker>() else {
            return Err(HandlerOutcome::retry());
        };
        let notified = Notified {
            order: notify.order,
            by: worker.instance.name().to_owned(),
        };
        outs.publish(ctx, &notified).await.map_err(|err| {
            tracing::error!(notify.order, %err, "the notification was not published");
            HandlerOutcome::retry()
        })
    }
}

#[ruststream::app]
fn app() -> impl App<State = Worker> {
    let url = std::env::var("NATS_URL").unwrap_or_else(|_| "nats://localhost:4222".to_owned());
    let instance = Instance::from_env();
    let name = format!("orders-worker {}", instance.name());
    RustStream::new(AppInfo::new("orders-worker", "0.1.0"))
        .on_startup(async move |()| Ok::<_, Infallible>(Worker { instance }))
        .with_broker(NatsBroker::new(url).connection_name(name), |b| {
            b.include(
                JetStreamSubject::new("orders.placed", "ORDERS")
                    .durable("fulfil")
                    .ack_wait(NonZeroDuration::from_secs(nonzero!(5)))
                    .handler(Fulfil),
            )
            .name("fulfil")
            .concurrency(nonzero!(16));
            b.include(
                CoreSubject::new("orders.notify")
                    .queue_group("notifiers")
                    .handler(NotifyCustomer),
            )
            .name("notify");
        })
}

#[derive(Clone)]
struct Worker {
    instance: Instance,
}

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
