//! A scripted service: each order carries the outcome its handler returns on each attempt, so
//! one app takes every row of the seeds' settlement tables.

use std::num::NonZeroU32;
use std::time::Duration;

use ruststream::{App, AppInfo, Context, Handle, HandlerOutcome, NonZeroDuration, RustStream};
use ruststream_nats::{CoreSubject, CoreWildcard, JetStreamSubject, NatsBroker};
use serde::{Deserialize, Serialize};

use super::ACK_WAIT;

/// What the handler does on one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// Publishes `Done` to `orders.done`, then acknowledges.
    Ack,
    Retry,
    RetryAfterMs(u64),
    Drop,
    /// Sleeps this long, then acknowledges: past ack_wait, no outcome reaches the server in time.
    SleepMs(u64),
}

/// An order and the handler's script: `plan[attempt - 1]`, the last step once the plan runs out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Order {
    pub id: u64,
    pub plan: Vec<Step>,
}

impl Order {
    pub fn new(id: u64, plan: impl Into<Vec<Step>>) -> Self {
        Self {
            id,
            plan: plan.into(),
        }
    }
}

/// What an acknowledged order publishes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Done {
    pub id: u64,
    pub attempt: u32,
    pub subject: String,
}

/// Plays an order's script.
pub struct Script;

impl Handle<Order> for Script {
    async fn handle(
        &self,
        order: &Order,
        _outs: &(),
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        let attempt = ctx.attempt().get();
        let i = usize::try_from(attempt - 1).unwrap_or(usize::MAX);
        let step = order
            .plan
            .get(i)
            .or(order.plan.last())
            .copied()
            .unwrap_or(Step::Ack);
        match step {
            Step::Ack => {}
            Step::Retry => return Err(HandlerOutcome::retry()),
            Step::RetryAfterMs(ms) => {
                return Err(HandlerOutcome::retry_after(Duration::from_millis(ms)));
            }
            Step::Drop => return Err(HandlerOutcome::drop()),
            Step::SleepMs(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
        }
        let done = Done {
            id: order.id,
            attempt,
            subject: ctx.subject().to_owned(),
        };
        ctx.publish_to("orders.done", &done)
            .await
            .map_err(|_| HandlerOutcome::retry())
    }
}

pub const STREAM: &str = "ORDERS";
pub const DEAD: &str = "orders.dead";

fn cap(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN)
}

/// The scripted service at `url`:
///
/// | registration | reads | policy |
/// | --- | --- | --- |
/// | `js` | `orders.placed` from `ORDERS`, durable `placed`, ack_wait [`ACK_WAIT`] | none |
/// | `js_capped` | `orders.capped` from `ORDERS`, durable `capped` | 2 attempts, dead letter `orders.dead` |
/// | `js_capped_free` | `orders.capped_free` from `ORDERS`, durable `capped_free` | 2 attempts |
/// | `core` | Core `orders.core` | 3 attempts |
/// | `core_capped` | Core `orders.core_capped` | 2 attempts, dead letter `orders.dead` |
/// | `core_free` | Core `orders.core_free` | none |
/// | `wild` | Core pattern `orders.wild.*` | 2 attempts, copies to `orders.wild.retry` |
pub fn orders_app(url: &str) -> impl App + use<> {
    let ack_wait = NonZeroDuration::new(ACK_WAIT).unwrap_or_else(|| unreachable!());
    RustStream::new(AppInfo::new("orders", "0.1.0")).with_broker(NatsBroker::new(url), |b| {
        b.include(
            JetStreamSubject::new("orders.placed", STREAM)
                .durable("placed")
                .ack_wait(ack_wait)
                .handler(Script),
        )
        .name("js");
        b.include(
            JetStreamSubject::new("orders.capped", STREAM)
                .durable("capped")
                .ack_wait(ack_wait)
                .handler(Script),
        )
        .name("js_capped")
        .max_attempts(cap(2))
        .dead_letter(DEAD);
        b.include(
            JetStreamSubject::new("orders.capped_free", STREAM)
                .durable("capped_free")
                .ack_wait(ack_wait)
                .handler(Script),
        )
        .name("js_capped_free")
        .max_attempts(cap(2));
        b.include(CoreSubject::new("orders.core").handler(Script))
            .name("core")
            .max_attempts(cap(3));
        b.include(CoreSubject::new("orders.core_capped").handler(Script))
            .name("core_capped")
            .max_attempts(cap(2))
            .dead_letter(DEAD);
        b.include(CoreSubject::new("orders.core_free").handler(Script))
            .name("core_free");
        b.include(CoreWildcard::new("orders.wild.*").handler(Script))
            .name("wild")
            .max_attempts(cap(2))
            .retry_to("orders.wild.retry");
    })
}
