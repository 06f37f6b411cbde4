//! Return forms and the failure policy (issue 15): `()` acknowledges; `Result<(), E>` and
//! `Result<T, E>` with `E: std::error::Error` settle an `Err` as the registration's `on_error`
//! says (`retry()` by default), the error logged with its source chain; `on_panic` and
//! `on_undecodable` replace the fixed policies. Each scenario runs in process (paused clock) and
//! on a real nats-server, asserting the acknowledgements the server saw and the dead letters.

mod support;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ruststream::registration::{Handled, OnFailure};
use ruststream::{AppInfo, HandlerOutcome, Outgoing, RustStream, nonzero, subscriber};
use ruststream_nats::testing::Recorder;
use ruststream_nats::{JetStreamSubject, NatsBroker};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Order {
    id: u64,
}

#[derive(Debug, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "receipts.made")]
struct Receipt {
    id: u64,
}

/// An error with a source, as a ledger client would return.
#[derive(Debug)]
struct Refused {
    id: u64,
    source: std::io::Error,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the ledger refused order {}", self.id)
    }
}

impl std::error::Error for Refused {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

fn refuse(order: &Order) -> Result<(), Refused> {
    if order.id % 2 == 1 {
        return Err(Refused {
            id: order.id,
            source: std::io::Error::other("disk full"),
        });
    }
    Ok(())
}

#[subscriber(JetStreamSubject::new("orders.unit", "ORDERS").durable("unit"))]
async fn unit(_order: &Order) {}

#[subscriber(JetStreamSubject::new("orders.booked", "ORDERS").durable("book"))]
async fn book(order: &Order) -> Result<(), Refused> {
    refuse(order)?;
    Ok(())
}

#[subscriber(JetStreamSubject::new("orders.receipt", "ORDERS").durable("receipt"), reply)]
async fn receipt(order: &Order) -> Result<Receipt, Refused> {
    refuse(order)?;
    Ok(Receipt { id: order.id })
}

#[subscriber(JetStreamSubject::new("orders.panics", "ORDERS").durable("panics"))]
async fn panics(order: &Order) -> HandlerOutcome {
    assert!(order.id == 0, "order {} is cursed", order.id);
    HandlerOutcome::ack()
}

/// `book` and `receipt` under the default (retry, cap 2, dead letter); `book` mounted again with
/// `on_error(drop)` and `on_error(retry_after)`; `panics` dead-lettered at once; `unit` with an
/// undecodable payload dropped (no dead letter although one is declared).
fn app(broker: NatsBroker) -> impl ruststream::App<State = ()> {
    RustStream::new(AppInfo::new("returns", "0.1.0")).with_broker(broker, |b| {
        b.include(unit)
            .dead_letter("dead.unit")
            .on_undecodable(OnFailure::Drop);
        b.include(book)
            .max_attempts(nonzero!(2))
            .dead_letter("dead.book");
        b.include(
            JetStreamSubject::new("orders.dropped", "ORDERS")
                .durable("dropped")
                .handler(book {}),
        )
        .name("book_dropped")
        .dead_letter("dead.dropped")
        .on_error(OnFailure::Drop);
        b.include(
            JetStreamSubject::new("orders.later", "ORDERS")
                .durable("later")
                .handler(book {}),
        )
        .name("book_later")
        .on_error(OnFailure::RetryAfter(Duration::from_secs(3600)));
        b.include(receipt)
            .max_attempts(nonzero!(2))
            .dead_letter("dead.receipt");
        b.include(panics)
            .max_attempts(nonzero!(5))
            .dead_letter("dead.panics")
            .on_panic(OnFailure::DeadLetterOrDrop);
    })
}

fn json(order: u64) -> Vec<u8> {
    serde_json::to_vec(&Order { id: order }).unwrap()
}

/// What a scenario needs from the world: publish to a stream, and what the server saw.
trait World {
    async fn publish(&self, subject: &str, payload: Vec<u8>);
    /// Waits until consumer `durable` got `n` acknowledgements; returns them.
    async fn acks(&self, durable: &str, n: usize) -> Vec<String>;
    /// Every message published on `subject` so far (payloads).
    async fn published(&self, subject: &str) -> Vec<Vec<u8>>;
    fn recorder(&self) -> &Recorder;
}

const ACK: &str = "+ACK";
const NAK: &str = "-NAK";
const TERM: &str = "+TERM";

async fn scenarios<W: World>(w: &W) {
    // `()` acknowledges.
    w.publish("orders.unit", json(2)).await;
    assert_eq!(w.acks("unit", 1).await, [ACK]);

    // Undecodable with on_undecodable(Drop): ended, no dead letter although one is declared.
    w.publish("orders.unit", b"{not json".to_vec()).await;
    assert_eq!(w.acks("unit", 2).await, [ACK, TERM]);
    assert!(w.published("dead.unit").await.is_empty());

    // Result<(), E>: Ok acknowledges; Err retries by default, then dead letter at the cap.
    w.publish("orders.booked", json(4)).await;
    w.publish("orders.booked", json(5)).await;
    let acks = w.acks("book", 3).await;
    assert_eq!(acks.iter().filter(|a| *a == ACK).count(), 1, "{acks:?}");
    assert_eq!(acks.iter().filter(|a| *a == NAK).count(), 1, "{acks:?}");
    assert_eq!(acks.iter().filter(|a| *a == TERM).count(), 1, "{acks:?}");
    assert_eq!(w.published("dead.book").await, [json(5)]);
    let failed: Vec<_> = w
        .recorder()
        .handled("book")
        .into_iter()
        .filter_map(|h| match h.handled {
            Handled::Failed(error) => Some(error),
            _ => None,
        })
        .collect();
    assert_eq!(
        failed,
        [
            "the ledger refused order 5: disk full",
            "the ledger refused order 5: disk full"
        ],
        "the error is recorded with its source chain"
    );

    // on_error(Drop): ended at once, no dead letter.
    w.publish("orders.dropped", json(7)).await;
    assert_eq!(w.acks("dropped", 1).await, [TERM]);
    assert!(w.published("dead.dropped").await.is_empty());

    // on_error(RetryAfter): a delayed -NAK.
    w.publish("orders.later", json(9)).await;
    assert_eq!(
        w.acks("later", 1).await,
        [ruststream_test_server::client::nak_with(
            Duration::from_secs(3600)
        )]
    );

    // Result<T, E> with reply: Ok publishes then acknowledges; Err as on_error.
    w.publish("orders.receipt", json(10)).await;
    w.publish("orders.receipt", json(11)).await;
    let acks = w.acks("receipt", 3).await;
    assert_eq!(acks.iter().filter(|a| *a == ACK).count(), 1, "{acks:?}");
    assert_eq!(acks.iter().filter(|a| *a == TERM).count(), 1, "{acks:?}");
    let receipts = w.published("receipts.made").await;
    assert_eq!(receipts, [serde_json::to_vec(&Receipt { id: 10 }).unwrap()]);
    assert_eq!(w.published("dead.receipt").await, [json(11)]);

    // on_panic(DeadLetterOrDrop): the first panic dead-letters, under a cap of 5.
    w.publish("orders.panics", json(13)).await;
    assert_eq!(w.acks("panics", 1).await, [TERM]);
    assert_eq!(w.published("dead.panics").await, [json(13)]);
    assert!(matches!(
        &w.recorder().handled("panics")[0].handled,
        Handled::Panicked(p) if p.contains("order 13 is cursed")
    ));
}

#[test]
fn describe_shows_the_failure_policy() {
    let text = ruststream::app::cli::describe(&app(NatsBroker::new("nats://localhost:4222")));
    assert!(
        text.contains("unit: undecodable: drop, panic: retry, error: retry"),
        "{text}"
    );
    assert!(
        text.contains(
            "book_later: undecodable: dead letter or drop, panic: retry, error: retry after 3600s"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "panics: undecodable: dead letter or drop, panic: dead letter or drop, error: retry"
        ),
        "{text}"
    );
    assert!(
        !text.contains("\nbook: "),
        "the defaults are not repeated:\n{text}"
    );
}

mod in_process {
    use super::*;
    use ruststream_nats::testing::TestApp;

    struct InProcess(TestApp);

    impl World for InProcess {
        async fn publish(&self, subject: &str, payload: Vec<u8>) {
            self.0
                .publish_raw(subject, ruststream::Headers::new(), payload)
                .await
                .expect("published");
        }

        async fn acks(&self, durable: &str, n: usize) -> Vec<String> {
            self.0.settle().await;
            let acks = self.0.nats().acknowledgements("ORDERS", durable);
            assert_eq!(acks.len(), n, "{durable}: {acks:?}");
            acks
        }

        async fn published(&self, subject: &str) -> Vec<Vec<u8>> {
            self.0.settle().await;
            self.0
                .nats()
                .published(subject)
                .into_iter()
                .map(|m| m.payload.to_vec())
                .collect()
        }

        fn recorder(&self) -> &Recorder {
            self.0.recorder()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn return_forms_and_failure_policies() {
        let t = TestApp::start(app(NatsBroker::new("nats://unused:4222")))
            .await
            .expect("the app starts");
        let w = InProcess(t);
        scenarios(&w).await;
        w.0.shutdown().await.expect("a clean shutdown");
    }
}

mod live {
    use super::support::nats::{PATIENCE, jetstream_server};
    use super::*;
    use ruststream::App as _;
    use ruststream_test_server::client::{Recorder as Wire, eventually};

    struct Live {
        js: async_nats::jetstream::Context,
        wire: Wire,
        recorder: Arc<Recorder>,
    }

    impl World for Live {
        async fn publish(&self, subject: &str, payload: Vec<u8>) {
            self.js
                .publish(subject.to_owned(), payload.into())
                .await
                .expect("published")
                .await
                .expect("stored");
        }

        async fn acks(&self, durable: &str, n: usize) -> Vec<String> {
            let what = format!("{n} acknowledgements from {durable}");
            let acks = eventually(PATIENCE, &what, || async {
                let acks = self.wire.acks("ORDERS", durable);
                (acks.len() >= n).then_some(acks)
            })
            .await;
            assert_eq!(acks.len(), n, "{durable}: {acks:?}");
            acks
        }

        async fn published(&self, subject: &str) -> Vec<Vec<u8>> {
            self.wire
                .matching(subject)
                .iter()
                .map(|m| m.payload.to_vec())
                .collect()
        }

        fn recorder(&self) -> &Recorder {
            &self.recorder
        }
    }

    #[tokio::test]
    async fn return_forms_and_failure_policies_on_the_wire() {
        let (server, client, js) = jetstream_server().await;
        let wire = Wire::start(&client, ["$JS.ACK.>", "dead.>", "receipts.>"]).await;
        let recorder = Arc::new(Recorder::new());
        let running = app(NatsBroker::new(server.url()))
            .start(ruststream::Env::new().with_observer(recorder.clone()))
            .await
            .expect("the app starts");
        let w = Live { js, wire, recorder };
        scenarios(&w).await;
        running.stop().await.expect("a clean stop");
    }
}
