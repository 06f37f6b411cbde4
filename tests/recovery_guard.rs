//! User code outside the handler call, live: a lane key, an idempotency key and an observer
//! that panic for one message make that message settled as a handler panic is (`retry()` under
//! the cap, then the dead letter), while the others go on being handled; a registration whose
//! task ends, or that is not consuming (its stream deleted), turns `/readyz` false, and a task
//! that ended makes `stop()` fail.

mod support;

use std::sync::Arc;

use async_nats::jetstream;
use futures::future::BoxFuture;
use ruststream::app::{Handling, Observer};
use ruststream::middleware::{Middleware, Next};
use ruststream::registration::Handled;
use ruststream::{Delivery, Env, HandlerOutcome};
use ruststream_nats::{JetStreamSubject, NatsBroker};
use ruststream_test_server::client::stream_messages;
use support::nats::*;
use support::ops::{get, operations};
use tracing_subscriber::layer::SubscriberExt as _;

/// The stream the dead letters go to.
const DEAD: &str = "DEAD";

/// The order every panicking piece of user code panics on.
const POISON: u64 = 3;

/// The registration every test mounts, named `guard_<durable>`: durable `durable` of
/// `orders.created`, four at once, two attempts, then `dead.orders`. Its `ack_wait` is longer
/// than the tests wait: a delivery left unsettled is not delivered again in time, only one the
/// runtime settled.
fn registration<'a>(
    b: &'a mut ruststream::Scope<()>,
    durable: &str,
    handler: &Scripted,
) -> &'a mut ruststream::Registration<()> {
    b.include(
        JetStreamSubject::new("orders.created", STREAM)
            .durable(durable)
            .ack_wait(millis(30_000))
            .handler(handler.clone()),
    )
    .name(format!("guard_{durable}"))
    .concurrency(std::num::NonZeroUsize::new(4).expect("4"))
    .max_attempts(attempts(2))
    .dead_letter("dead.orders")
}

/// The handler of the poison tests: on its first attempt order 4 panics, order 5 answers
/// `retry()` and order 6 `retry_after(50ms)`; every other delivery is acknowledged. Each
/// is handled again and acknowledged on its second attempt, beside the poison order.
fn mixed() -> Scripted {
    Scripted::new(|seen| match (seen.id, seen.attempt) {
        (4, 1) => None,
        (5, 1) => Some(HandlerOutcome::retry()),
        (6, 1) => Some(HandlerOutcome::retry_after(
            std::time::Duration::from_millis(50),
        )),
        _ => Some(HandlerOutcome::ack()),
    })
}

/// A server with [`STREAM`] and [`DEAD`].
async fn server() -> (NatsServer, jetstream::Context) {
    let (server, _client, js) = jetstream_server().await;
    create_stream(&js, DEAD, ["dead.>"]).await;
    (server, js)
}

/// Publishes orders 1 to 6, then waits until the server saw every one settled and [`POISON`]
/// dead-lettered, its handler never acknowledging it; checks the handler saw every other.
async fn poison_is_dead_lettered_and_the_rest_handled(
    js: &jetstream::Context,
    durable: &str,
    handler: &Scripted,
    poison_reaches_handler: bool,
) {
    for id in 1..=6 {
        publish_stored(js, "orders.created", order(id)).await;
    }
    let info = until_settled(js, durable, 6, "every order settled").await;
    assert_eq!(info.num_pending, 0, "{info:#?}");
    let dead = eventually(PATIENCE, "the poison order dead-lettered", || async {
        let dead = stream_messages(js, DEAD).await;
        (!dead.is_empty()).then_some(dead)
    })
    .await;
    let ids: Vec<String> = dead
        .iter()
        .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
        .collect();
    assert_eq!(
        ids,
        [order(POISON)],
        "only the poison order is dead-lettered"
    );
    let mut handled: Vec<u64> = handler.seen().iter().map(|s| s.id).collect();
    handled.sort_unstable();
    handled.dedup();
    let expected: Vec<u64> = if poison_reaches_handler {
        (1..=6).collect()
    } else {
        (1..=6).filter(|id| *id != POISON).collect()
    };
    assert_eq!(handled, expected, "every other order was handled");
    let runs = |id: u64| handler.seen().iter().filter(|s| s.id == id).count();
    for id in [4, 5, 6] {
        assert_eq!(
            runs(id),
            2,
            "order {id}: its retry, then its acknowledgement"
        );
    }
    if poison_reaches_handler {
        assert_eq!(
            runs(POISON),
            2,
            "the poison order ran once per attempt, up to the cap"
        );
    }
}

#[tokio::test]
async fn a_panicking_lane_key_settles_its_message_as_a_handler_panic() {
    eprintln!("running against {}", NatsServer::version());
    let (server, js) = server().await;
    let handler = mixed();
    let running = start_on(&server, |b| {
        registration(b, "keyed", &handler).by_key(|order: &Order| {
            assert_ne!(order.id, POISON, "the lane key panics on the poison order");
            order.id % 2
        });
    })
    .await;
    poison_is_dead_lettered_and_the_rest_handled(&js, "keyed", &handler, false).await;
    running.stop().await.expect("a clean stop");
}

#[tokio::test]
async fn a_panicking_idempotency_key_settles_its_message_as_a_handler_panic() {
    eprintln!("running against {}", NatsServer::version());
    let (server, js) = server().await;
    let handler = mixed();
    let running = start_on(&server, |b| {
        registration(b, "idempotent", &handler).idempotent_by(|order: &Order| {
            assert_ne!(
                order.id, POISON,
                "the idempotency key panics on the poison order"
            );
            order.id
        });
    })
    .await;
    poison_is_dead_lettered_and_the_rest_handled(&js, "idempotent", &handler, false).await;
    running.stop().await.expect("a clean stop");
}

/// An observer that panics when told of the poison order.
struct PanicsOnPoison;

impl Observer for PanicsOnPoison {
    fn handled(&self, handling: &Handling<'_>) {
        let poison = order(POISON);
        assert_ne!(
            handling.delivery.payload().as_ref(),
            poison.as_bytes(),
            "the observer panics on the poison order"
        );
    }
}

#[tokio::test]
async fn a_panicking_observer_settles_its_message_as_a_handler_panic() {
    eprintln!("running against {}", NatsServer::version());
    let (server, js) = server().await;
    let handler = mixed();
    let env = Env::new().with_observer(Arc::new(PanicsOnPoison));
    let running = start_with(NatsBroker::new(server.url()), env, |b| {
        registration(b, "observed", &handler);
    })
    .await
    .expect("the app starts");
    poison_is_dead_lettered_and_the_rest_handled(&js, "observed", &handler, true).await;
    running.stop().await.expect("a clean stop");
}

/// A middleware that panics on the poison order, around the handler (after it ran).
struct PanicsAfterPoison;

impl Middleware for PanicsAfterPoison {
    fn handle<'a>(&'a self, delivery: &'a Delivery, next: Next<'a>) -> BoxFuture<'a, Handled> {
        Box::pin(async move {
            let handled = next.run().await;
            let poison = order(POISON);
            assert_ne!(
                delivery.payload().as_ref(),
                poison.as_bytes(),
                "the middleware panics on the poison order"
            );
            handled
        })
    }
}

#[tokio::test]
async fn a_panicking_middleware_settles_its_message_as_a_handler_panic() {
    eprintln!("running against {}", NatsServer::version());
    let (server, js) = server().await;
    let handler = mixed();
    let running = start_on(&server, |b| {
        registration(b, "layered", &handler).layer(PanicsAfterPoison);
    })
    .await;
    poison_is_dead_lettered_and_the_rest_handled(&js, "layered", &handler, true).await;
    running.stop().await.expect("a clean stop");
}

/// A tracing layer (user code the runtime calls on every line it logs) that panics on the
/// line whose message contains its text.
struct PanicsOn(&'static str);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for PanicsOn {
    fn on_event(
        &self,
        event: &tracing::Event<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        struct Message(String);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.0 = format!("{value:?}");
                }
            }
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        assert!(
            !message.0.contains(self.0),
            "a tracing layer panics on `{}`",
            self.0
        );
    }
}

#[tokio::test]
async fn a_registration_whose_task_ends_is_not_ready_and_fails_the_stop() {
    eprintln!("running against {}", NatsServer::version());
    let (server, js) = server().await;
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(move || writer.clone()),
        )
        .with(PanicsOn("the subscription ended"));
    // On the test's thread, where `#[tokio::test]` runs every task.
    let _logging = tracing::subscriber::set_default(subscriber);
    let (health, ops) = operations().await;
    let addr = ops.local_addr();
    let handler = Scripted::always(HandlerOutcome::ack());
    let env = Env::new().with(health.clone());
    let running = start_with(NatsBroker::new(server.url()), env, |b| {
        registration(b, "ending", &handler);
    })
    .await
    .expect("the app starts");
    publish_stored(&js, "orders.created", order(1)).await;
    until_settled(&js, "ending", 1, "the first order handled").await;
    assert_eq!(get(addr, "/readyz").await.0, 200);

    // The consumer deleted: the source logs that its subscription ended, and the layer panics
    // in the source's own task.
    js.get_stream(STREAM)
        .await
        .expect("the stream")
        .delete_consumer("ending")
        .await
        .expect("the consumer deleted");
    let body = eventually(PATIENCE, "/readyz answers 503", || async {
        let (status, body) = get(addr, "/readyz").await;
        (status == 503).then_some(body)
    })
    .await;
    assert!(body.contains("not consuming"), "{body}");
    let ended = logs.lines_with(&["ERROR", "guard_ending"]);
    assert!(
        !ended.is_empty(),
        "an error names the registration:\n{}",
        logs.text()
    );
    let err = running
        .stop()
        .await
        .expect_err("the stop says the registration's task ended");
    assert!(
        err.to_string().contains("guard_ending") || format!("{err:?}").contains("guard_ending"),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_deleted_stream_is_not_ready_until_it_is_back() {
    eprintln!("running against {}", NatsServer::version());
    let (server, js) = server().await;
    let (health, ops) = operations().await;
    let addr = ops.local_addr();
    let handler = Scripted::new(|seen| {
        Some(if seen.id == 1 && seen.delivered == Some(1) {
            HandlerOutcome::retry()
        } else {
            HandlerOutcome::ack()
        })
    });
    let env = Env::new().with(health.clone());
    let running = start_with(NatsBroker::new(server.url()), env, |b| {
        registration(b, "phoenix", &handler);
    })
    .await
    .expect("the app starts");
    publish_stored(&js, "orders.created", order(1)).await;
    until_settled(&js, "phoenix", 1, "the first order handled after a retry").await;
    assert_eq!(get(addr, "/readyz").await.0, 200);

    js.delete_stream(STREAM).await.expect("the stream deleted");
    let body = eventually(PATIENCE, "/readyz answers 503", || async {
        let (status, body) = get(addr, "/readyz").await;
        (status == 503).then_some(body)
    })
    .await;
    assert!(body.contains("not consuming"), "{body}");

    create_stream(&js, STREAM, ["orders.>"]).await;
    eventually(PATIENCE, "/readyz answers 200 again", || async {
        (get(addr, "/readyz").await.0 == 200).then_some(())
    })
    .await;
    // Consuming again: a message stored in the new stream is handled.
    publish_stored(&js, "orders.created", order(2)).await;
    until_settled(&js, "phoenix", 1, "the order of the new stream handled").await;
    assert!(handler.seen().iter().any(|s| s.id == 2));
    running.stop().await.expect("a clean stop");
}
