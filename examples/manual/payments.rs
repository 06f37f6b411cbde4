// The payments service without macros: the twin of `examples/payments.rs`. Every capability
// of `#[subscriber]` is reachable by hand: the state through `ctx.state::<Clients>()`, the
// reply through `outs.publish(ctx, &captured)`, the delivery count through `ctx.delivered()`.
//
// ```text
// cargo run --example manual_payments -- describe
// ```

use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ruststream_nats::prelude::*;
use serde::{Deserialize, Serialize};

/// How long a busy bank asks its callers to wait.
const BACKOFF: Duration = Duration::from_secs(30);

#[derive(Debug, PartialEq, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "payments.authorized")]
struct Payment {
    id: u64,
    card: String,
    amount_cents: u64,
}

#[derive(Debug, PartialEq, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "payments.captured")]
struct Captured {
    payment: u64,
    amount_cents: u64,
}

/// Captures an authorized payment at the bank and publishes the capture.
struct Capture;

impl Handle<Payment, Publisher<Captured>, Clients> for Capture {
    async fn handle(
        &self,
        payment: &Payment,
        outs: &Publisher<Captured>,
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        let delivered = ctx.delivered();
        if delivered.is_some_and(|count| count > 1) {
            tracing::info!(payment.id, ?delivered, "payment delivered again");
        }
        // The runtime binds the handler to the app's state, so it is always there.
        let Some(clients) = ctx.state::<Clients>() else {
            return Err(HandlerOutcome::retry());
        };
        match clients.bank.capture(payment).await {
            Ok(()) => {
                let captured = Captured {
                    payment: payment.id,
                    amount_cents: payment.amount_cents,
                };
                // Published first, acknowledged after: a failed publish brings the payment back.
                outs.publish(ctx, &captured).await.map_err(|err| {
                    tracing::error!(payment.id, %err, "the capture was not published");
                    HandlerOutcome::retry()
                })
            }
            // Past the rate limit: the server holds the payment and delivers it after the delay.
            Err(Refusal::Busy) => Err(HandlerOutcome::retry_after(BACKOFF)),
            // No answer: the server delivers the payment again at once.
            Err(Refusal::Unavailable) => Err(HandlerOutcome::retry()),
            // The server never delivers a terminated payment again.
            Err(Refusal::Declined) => {
                tracing::warn!(payment.id, "card declined, payment terminated");
                Err(HandlerOutcome::drop())
            }
        }
    }
}

/// Refreshes the dashboard on every capture.
struct Refresh;

impl Handle<Captured, (), Clients> for Refresh {
    async fn handle(
        &self,
        captured: &Captured,
        _outs: &(),
        _ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        tracing::info!(captured.payment, "dashboard refreshed");
        Ok(())
    }
}

#[ruststream::app]
fn app() -> impl App<State = Clients> {
    RustStream::new(AppInfo::new("payments", "0.1.0"))
        .on_startup(async move |()| Ok::<_, Infallible>(Clients::default()))
        .with_broker(NatsBroker::new("nats://localhost:4222"), |b| {
            b.include(
                JetStreamSubject::new("payments.authorized", "PAYMENTS")
                    .durable("capture")
                    .ack_wait(NonZeroDuration::from_secs(nonzero!(60)))
                    .handler(Capture),
            )
            .name("capture")
            .max_attempts(nonzero!(5));
            b.include(CoreSubject::new("payments.captured").handler(Refresh))
                .name("refresh");
        })
}

/// The app state: the clients every handler shares, opened once at startup.
#[derive(Clone, Default)]
struct Clients {
    bank: Arc<Bank>,
}

/// Why the bank did not capture a payment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// The rate limit is used up: ask again later.
    Busy,
    /// The bank did not answer.
    Unavailable,
    /// The card cannot be charged; asking again gets the same answer.
    Declined,
}

/// A stand-in for the bank's client that answers by card, deterministically: `busy-once` is
/// `Busy` the first time, `flaky` is `Unavailable` the first time, `declined` is always
/// `Declined`, any other card is captured. A payment captured again is charged once.
#[derive(Debug, Default)]
struct Bank {
    refused_once: Mutex<HashSet<u64>>,
    charged: Mutex<HashSet<u64>>,
}

impl Bank {
    /// Captures `payment`, or says why not.
    async fn capture(&self, payment: &Payment) -> Result<(), Refusal> {
        let once = match payment.card.as_str() {
            "declined" => return Err(Refusal::Declined),
            "busy-once" => Some(Refusal::Busy),
            "flaky" => Some(Refusal::Unavailable),
            _ => None,
        };
        if let Some(refusal) = once
            && lock(&self.refused_once).insert(payment.id)
        {
            return Err(refusal);
        }
        if !lock(&self.charged).insert(payment.id) {
            tracing::info!(payment.id, "payment captured before; not charged again");
        }
        Ok(())
    }
}

/// A lock that a panicking holder does not poison for the others.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
