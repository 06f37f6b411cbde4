// Retries with a cap, and dead letters, without macros: the twin of
// `examples/retries_dead_letters.rs`. The attempt a cap counts is `ctx.attempt()`, the subject
// a pattern matched is `ctx.subject()`; the cap, the dead letter and the retry target are
// declared at the mount site, as with the macros.
//
// ```text
// cargo run --example manual_retries_dead_letters -- describe
// ```

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
/// order for 5 s and delivers it again, delivered + 1; the third failure sends it to
/// `orders.dead` as it arrived, and then terminates it.
struct Reserve;

impl Handle<Order> for Reserve {
    async fn handle(
        &self,
        order: &Order,
        _outs: &(),
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        let attempt = ctx.attempt().get();
        reserve_stock(order, attempt).await.map_err(|err| {
            tracing::warn!(order.id, attempt, %err, "stock not reserved");
            HandlerOutcome::retry_after(WAREHOUSE_BACKOFF)
        })
    }
}

/// Mails the receipt of an order. Under the cap a `retry()` publishes a copy to
/// `receipts.send` at once; the second failure sends the receipt to `receipts.dead` as it
/// arrived.
struct MailReceipt;

impl Handle<Receipt> for MailReceipt {
    async fn handle(
        &self,
        receipt: &Receipt,
        _outs: &(),
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        let attempt = ctx.attempt().get();
        send_mail(&receipt.email, attempt).await.map_err(|err| {
            tracing::warn!(receipt.order, attempt, %err, "receipt not mailed");
            HandlerOutcome::retry()
        })
    }
}

/// Writes every audit event to the audit store. A busy store is asked again after 1 s, through
/// a copy published to `audit.retry` (the pattern matches it too); at the cap the event is let
/// go.
struct Audit;

impl Handle<AuditEvent> for Audit {
    async fn handle(
        &self,
        event: &AuditEvent,
        _outs: &(),
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        let attempt = ctx.attempt().get();
        let subject = ctx.subject();
        match write_audit(event, attempt).await {
            Ok(()) => {
                tracing::info!(event.id, subject, attempt, "audit event written");
                Ok(())
            }
            Err(err) => {
                tracing::warn!(event.id, subject, attempt, %err, "audit event not written");
                Err(HandlerOutcome::retry_after(AUDIT_BACKOFF))
            }
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
            b.include(
                JetStreamSubject::new("orders.created", "ORDERS")
                    .durable("reserve")
                    .handler(Reserve),
            )
            .name("reserve")
            .max_attempts(nonzero!(3))
            .dead_letter("orders.dead");
            b.include(CoreSubject::new("receipts.send").handler(MailReceipt))
                .name("mail_receipt")
                .max_attempts(nonzero!(2))
                .dead_letter("receipts.dead");
            b.include(CoreWildcard::new("audit.*").handler(Audit))
                .name("audit")
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
