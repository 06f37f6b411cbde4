// Retries with a cap, and dead letters, on both models: the code of the guide "Retries and dead
// letters". An order service reserves stock through a JetStream consumer, mails receipts on a
// Core subject, and writes audit events from a Core pattern.
//
// | registration | model | a retry | the cap | at the cap |
// | --- | --- | --- | --- | --- |
// | `reserve` | JetStream | `-NAK` with 5 s: the server holds the order | 3 | to `orders.dead`, then `+TERM` |
// | `mail_receipt` | Core subject | a copy to `receipts.send`, at once | 2 | to `receipts.dead` |
// | `audit` | Core pattern | a copy to `audit.retry`, after 1 s | 3 | let go |
//
// ```text
// cargo run --example retries_dead_letters -- describe   # the registrations, without connecting
// cargo run --example retries_dead_letters               # runs against nats://localhost:4222
// ```
//
// The twin without macros is `examples/manual/retries_dead_letters.rs`.

use std::fmt;
use std::time::Duration;

use ruststream_nats::prelude::*;
use serde::{Deserialize, Serialize};

/// How long an order waits on the server when the warehouse did not answer.
const WAREHOUSE_BACKOFF: Duration = Duration::from_secs(5);

/// How long an audit event waits in the process when the audit store is busy.
const AUDIT_BACKOFF: Duration = Duration::from_secs(1);

/// A new order, stored in the `ORDERS` stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "orders.created")]
struct Order {
    id: u64,
    sku: String,
    quantity: u32,
}

/// A receipt to mail, on Core NATS.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "receipts.send")]
struct Receipt {
    order: u64,
    email: String,
}

/// Something that happened, published to `audit.<area>` (`audit.orders`, `audit.payments`, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct AuditEvent {
    id: u64,
    action: String,
}

/// Reserves stock for a new order. When the warehouse does not answer, the server holds the
/// order for 5 s and delivers it again, delivered + 1. The mount site allows 3 attempts: the
/// third failure sends the order to `orders.dead` as it arrived, and then terminates it.
#[subscriber(JetStreamSubject::new("orders.created", "ORDERS").durable("reserve"))]
async fn reserve(order: &Order, Ctx(attempt): Ctx<Attempt>) -> HandlerOutcome {
    match reserve_stock(order, attempt).await {
        Ok(()) => HandlerOutcome::ack(),
        Err(err) => {
            tracing::warn!(order.id, attempt, %err, "stock not reserved");
            HandlerOutcome::retry_after(WAREHOUSE_BACKOFF)
        }
    }
}

/// Mails the receipt of an order. Core NATS keeps nothing to deliver again, so under the cap the
/// runtime brings the receipt back itself: a `retry()` publishes a copy to `receipts.send` at
/// once, which counts the attempt in its `x-ruststream-retry-count` header. The second failure
/// is the last: the receipt goes to `receipts.dead` as it arrived.
#[subscriber("receipts.send")]
async fn mail_receipt(receipt: &Receipt, Ctx(attempt): Ctx<Attempt>) -> HandlerOutcome {
    match send_mail(&receipt.email, attempt).await {
        Ok(()) => HandlerOutcome::ack(),
        Err(err) => {
            tracing::warn!(receipt.order, attempt, %err, "receipt not mailed");
            HandlerOutcome::retry()
        }
    }
}

/// Writes every audit event to the audit store. A pattern matches many subjects and publishes
/// to none, so the mount site names where a copy goes: `audit.retry`, which the pattern matches
/// too. A busy store is asked again after 1 s, from a timer in this process (a stop before it
/// fires loses the copy). At the cap, with no dead letter, the event is let go.
#[subscriber(CoreWildcard::new("audit.*"))]
async fn audit(
    event: &AuditEvent,
    Ctx(subject): Ctx<Subject>,
    Ctx(attempt): Ctx<Attempt>,
) -> HandlerOutcome {
    match write_audit(event, attempt).await {
        Ok(()) => {
            tracing::info!(event.id, subject, attempt, "audit event written");
            HandlerOutcome::ack()
        }
        Err(err) => {
            tracing::warn!(event.id, subject, attempt, %err, "audit event not written");
            HandlerOutcome::retry_after(AUDIT_BACKOFF)
        }
    }
}

#[ruststream::app]
fn app() -> impl App<State = ()> {
    RustStream::new(AppInfo::new("orders", "0.1.0")).with_broker(
        // Declared so that the service runs on a bare nats-server; the stream also keeps the
        // dead letters of `orders.dead`.
        NatsBroker::new("nats://localhost:4222").declare_stream("ORDERS", ["orders.>"]),
        |b| {
            b.include(reserve)
                .max_attempts(nonzero!(3))
                .dead_letter("orders.dead");
            b.include(mail_receipt)
                .max_attempts(nonzero!(2))
                .dead_letter("receipts.dead");
            b.include(audit)
                .max_attempts(nonzero!(3))
                .retry_to("audit.retry");
        },
    )
}

/// Why a call to a stand-in failed.
#[derive(Debug)]
struct NoAnswer(&'static str);

impl fmt::Display for NoAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// A stand-in for the warehouse, by SKU: `late-*` is not counted yet on the first attempt and
/// reserved on the next; `offline-*` never answers; any other SKU is reserved.
async fn reserve_stock(order: &Order, attempt: u32) -> Result<(), NoAnswer> {
    let sku = order.sku.as_str();
    if sku.starts_with("offline-") || (sku.starts_with("late-") && attempt == 1) {
        return Err(NoAnswer("the warehouse did not answer"));
    }
    tracing::info!(order.id, sku, order.quantity, attempt, "stock reserved");
    Ok(())
}

/// A stand-in for the mail server, by domain: `greylisting.example` refuses a first try and
/// takes the next (greylisting); `unreachable.example` never answers; any other address gets
/// its receipt.
async fn send_mail(to: &str, attempt: u32) -> Result<(), NoAnswer> {
    if to.ends_with("@unreachable.example") {
        return Err(NoAnswer("the mail server did not answer"));
    }
    if to.ends_with("@greylisting.example") && attempt == 1 {
        return Err(NoAnswer("greylisted: try again later"));
    }
    tracing::info!(to, attempt, "receipt mailed");
    Ok(())
}

/// A stand-in for the audit store, by action: `export` finds the store busy the first time;
/// `purge` always does; any other action is written.
async fn write_audit(event: &AuditEvent, attempt: u32) -> Result<(), NoAnswer> {
    match event.action.as_str() {
        "purge" => Err(NoAnswer("the audit store is busy")),
        "export" if attempt == 1 => Err(NoAnswer("the audit store is busy")),
        _ => Ok(()),
    }
}
