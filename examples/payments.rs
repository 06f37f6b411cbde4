// A payments service: captures authorized payments at the bank (a JetStream consumer that
// settles each payment with the bank's answer) and refreshes a dashboard on every capture (a
// Core NATS subject). The code of the guide "Acknowledgement and delivery guarantees".
//
// ```text
// cargo run --example payments -- describe   # the registrations, without connecting
// cargo run --example payments               # runs against nats://localhost:4222
// ```
//
// The twin without macros is `examples/manual/payments.rs`.

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

#[subscriber(
    JetStreamSubject::new("payments.authorized", "PAYMENTS")
        .durable("capture")
        .ack_wait(NonZeroDuration::from_secs(nonzero!(60))),
    reply
)]
async fn capture(
    payment: &Payment,
    Ctx(delivered): Ctx<Delivered>,
    State(bank): State<Arc<Bank>>,
) -> Result<Captured, HandlerOutcome> {
    if delivered.is_some_and(|count| count > 1) {
        tracing::info!(payment.id, ?delivered, "payment delivered again");
    }
    match bank.capture(payment).await {
        Ok(()) => Ok(Captured {
            payment: payment.id,
            amount_cents: payment.amount_cents,
        }),
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

#[subscriber("payments.captured")]
async fn refresh(captured: &Captured) -> HandlerOutcome {
    tracing::info!(captured.payment, "dashboard refreshed");
    HandlerOutcome::ack()
}

#[ruststream::app]
fn app() -> impl App<State = Clients> {
    RustStream::new(AppInfo::new("payments", "0.1.0"))
        .on_startup(async move |()| Ok::<_, Infallible>(Clients::default()))
        .with_broker(NatsBroker::new("nats://localhost:4222"), |b| {
            // A payment the bank keeps refusing is terminated at the fifth delivery.
            b.include(capture).max_attempts(nonzero!(5));
            b.include(refresh);
        })
}

/// The app state: the clients every handler shares, opened once at startup.
#[derive(Clone, Default, FromRef)]
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

/// A stand-in for the bank's client that answers by card, deterministically:
///
/// | card | answer |
/// | --- | --- |
/// | `busy-once` | `Busy` the first time, then a capture |
/// | `flaky` | `Unavailable` the first time, then a capture |
/// | `declined` | `Declined`, every time |
/// | any other | a capture |
///
/// It takes the payment id as an idempotency key: a payment captured again is charged once.
#[derive(Debug, Default)]
struct Bank {
    /// Payments that were refused once already (for `busy-once` and `flaky`).
    refused_once: Mutex<HashSet<u64>>,
    /// Payments charged, by id.
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

    /// How many distinct payments were charged.
    #[allow(dead_code)]
    fn charged(&self) -> usize {
        lock(&self.charged).len()
    }
}

/// A lock that a panicking holder does not poison for the others.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
