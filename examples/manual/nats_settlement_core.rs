// At most once on Core NATS, without macros: the twin of `examples/nats_settlement_core.rs`.
//
// ```text
// cargo run --example manual_nats_settlement_core -- describe
// ```

use std::fmt;

use ruststream_nats::prelude::*;
use serde::{Deserialize, Serialize};

/// An order left the warehouse.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "orders.shipped")]
struct Shipped {
    id: u64,
    email: String,
}

/// Mails the customer once the order ships. A Core NATS message reaches whoever is subscribed
/// at that moment and is not stored, so `Err(retry)` here delivers nothing again: the message is
/// processed at most once.
struct Notify;

impl Handle<Shipped> for Notify {
    async fn handle(
        &self,
        order: &Shipped,
        _outs: &(),
        _ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        send_mail(&order.email).await.map_err(|err| {
            tracing::error!(order.id, %err, "the shipping notice is lost");
            HandlerOutcome::retry()
        })
    }
}

#[ruststream::app]
fn app() -> impl App<State = ()> {
    RustStream::new(AppInfo::new("shipping", "0.1.0")).with_broker(
        NatsBroker::new("nats://localhost:4222"),
        |b| {
            b.include(CoreSubject::new("orders.shipped").handler(Notify));
        },
    )
}

/// The mail server did not answer.
#[derive(Debug)]
struct MailError;

impl fmt::Display for MailError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the mail server did not answer")
    }
}

/// A stand-in for the mail client: addresses at `unreachable.example` never answer.
async fn send_mail(to: &str) -> Result<(), MailError> {
    if to.ends_with("@unreachable.example") {
        Err(MailError)
    } else {
        tracing::info!(to, "shipping notice sent");
        Ok(())
    }
}
