//! What goes wrong, against a real nats-server: apps that refuse to start (with errors that say
//! why and what to do), payloads that do not decode, handlers that panic, a dead-letter publish
//! that fails, batches, and durable consumers whose settings changed.

mod support;

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::stream;
use ruststream::{BatchContext, BatchOutcome, ErrorKind, HandleBatch, HandlerOutcome};
use ruststream_nats::{CoreWildcard, JetStreamSubject, NatsBroker};
use support::nats::*;

/// An address nothing listens on.
fn closed_port_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let port = listener.local_addr().expect("its address").port();
    drop(listener);
    format!("nats://127.0.0.1:{port}")
}

#[tokio::test]
async fn a_pattern_without_retry_to_refuses_to_start() {
    logs();
    let err = start(NatsBroker::new(closed_port_url()), |b| {
        b.include(CoreWildcard::new("orders.*").handler(Scripted::always(HandlerOutcome::ack())))
            .name("audit");
    })
    .await
    .expect_err("the app refuses to start");
    assert_eq!(err.kind(), ErrorKind::Config);
    let message = err.to_string();
    assert!(message.contains("`audit`"), "{message}");
    assert!(message.contains("orders.*"), "{message}");
    assert!(message.contains(".retry_to(\"subject\")"), "{message}");
}

#[tokio::test]
async fn invalid_subjects_refuse_to_start_all_at_once() {
    logs();
    let err = start(NatsBroker::new(closed_port_url()), |b| {
        b.include(
            JetStreamSubject::new("orders..created", STREAM)
                .handler(Scripted::always(HandlerOutcome::ack())),
        )
        .name("empty_token")
        .dead_letter("dead.*");
        b.include(
            ruststream_nats::CoreSubject::new("orders created")
                .handler(Scripted::always(HandlerOutcome::ack())),
        )
        .name("spaced");
    })
    .await
    .expect_err("the app refuses to start");
    assert_eq!(err.kind(), ErrorKind::Config);
    let message = err.to_string();
    assert!(message.contains("3 problems"), "{message}");
    assert!(
        message.contains("`empty_token`") && message.contains("orders..created"),
        "{message}"
    );
    assert!(message.contains("dead.*"), "{message}");
    assert!(message.contains("`spaced`"), "{message}");
}

#[tokio::test]
async fn a_wrong_url_refuses_to_start_naming_it() {
    logs();
    let url = closed_port_url();
    let err = start(NatsBroker::new(url.clone()), |b| {
        b.include(
            ruststream_nats::CoreSubject::new("orders.created")
                .handler(Scripted::always(HandlerOutcome::ack())),
        );
    })
    .await
    .expect_err("the app refuses to start");
    assert_eq!(err.kind(), ErrorKind::Connect);
    assert!(err.to_string().contains(&url), "{err}");
}

#[tokio::test]
async fn a_url_with_credentials_is_never_printed() {
    logs();
    let server = NatsServer::builder()
        .config("authorization { user: alice, password: s3cret }")
        .start();
    let wrong = server.url().replace("nats://", "nats://alice:wrong@");
    let err = start(NatsBroker::new(wrong), |b| {
        b.include(
            ruststream_nats::CoreSubject::new("orders.created")
                .handler(Scripted::always(HandlerOutcome::ack())),
        );
    })
    .await
    .expect_err("wrong credentials");
    assert_eq!(err.kind(), ErrorKind::Connect);
    assert!(!err.to_string().contains("wrong"), "{err}");

    let handler = Scripted::always(HandlerOutcome::ack());
    let running = start(
        NatsBroker::new(server.url()).user_and_password("alice", "s3cret"),
        |b| {
            b.include(ruststream_nats::CoreSubject::new("orders.created").handler(handler.clone()));
        },
    )
    .await
    .expect("the right credentials connect");
    let client = async_nats::ConnectOptions::new()
        .user_and_password("alice".into(), "s3cret".into())
        .connect(server.url())
        .await
        .expect("the test client connects");
    publish_core(&client, "orders.created", &[], &order(1)).await;
    handler.until_seen(1).await;
    running.stop().await.expect("a clean stop");
}

#[tokio::test]
async fn a_missing_stream_refuses_to_start_saying_how_to_create_it() {
    logs();
    let server = NatsServer::start();
    let err = start(NatsBroker::new(server.url()), |b| {
        b.include(
            JetStreamSubject::new("payments.authorized", "PAYMENTS")
                .durable("capture")
                .handler(Scripted::always(HandlerOutcome::ack())),
        );
    })
    .await
    .expect_err("the app refuses to start");
    assert_eq!(err.kind(), ErrorKind::Broker);
    let message = err.to_string();
    assert!(message.contains("`PAYMENTS`"), "{message}");
    assert!(message.contains("nats stream add PAYMENTS"), "{message}");
    assert!(message.contains("declare_stream"), "{message}");
}

#[tokio::test]
async fn a_declared_stream_is_created_at_startup() {
    logs();
    let server = NatsServer::start();
    let (_client, js) = connect_jetstream(&server).await;
    let handler = Scripted::always(HandlerOutcome::ack());
    let running = start(
        NatsBroker::new(server.url()).declare_stream("PAYMENTS", ["payments.>"]),
        |b| {
            b.include(
                JetStreamSubject::new("payments.authorized", "PAYMENTS")
                    .durable("capture")
                    .handler(handler.clone()),
            );
        },
    )
    .await
    .expect("the app starts");
    publish_stored(&js, "payments.authorized", &order(1)).await;
    handler.until_seen(1).await;
    running.stop().await.expect("a clean stop");
}

#[tokio::test]
async fn a_durable_is_updated_when_ack_wait_changes_and_refused_when_its_filter_does() {
    let (server, _client, js) = jetstream_server().await;
    let mount = |wait: u64, subject: &'static str| {
        move |b: &mut ruststream::Scope<()>| {
            b.include(
                JetStreamSubject::new(subject, STREAM)
                    .durable("worker")
                    .ack_wait(millis(wait))
                    .handler(Scripted::always(HandlerOutcome::ack())),
            );
        }
    };
    let first = start(
        NatsBroker::new(server.url()),
        mount(1_000, "orders.created"),
    )
    .await
    .expect("the app starts");
    first.stop().await.expect("a clean stop");
    assert_eq!(
        consumer_info(&js, STREAM, "worker").await.config.ack_wait,
        Duration::from_secs(1)
    );

    let second = start(
        NatsBroker::new(server.url()),
        mount(2_000, "orders.created"),
    )
    .await
    .expect("the app starts with the new ack_wait");
    second.stop().await.expect("a clean stop");
    assert_eq!(
        consumer_info(&js, STREAM, "worker").await.config.ack_wait,
        Duration::from_secs(2),
        "the durable was updated"
    );

    let err = start(
        NatsBroker::new(server.url()),
        mount(2_000, "orders.shipped"),
    )
    .await
    .expect_err("the filter subject cannot change in place");
    assert_eq!(err.kind(), ErrorKind::Broker);
    let message = err.to_string();
    assert!(message.contains("`worker`"), "{message}");
    assert!(message.contains("orders.created"), "{message}");
    assert!(
        message.contains("nats consumer rm ORDERS worker"),
        "{message}"
    );
}

#[tokio::test]
async fn a_deleted_consumer_is_opened_again() {
    let (server, _client, js) = jetstream_server().await;
    let handler = Scripted::always(HandlerOutcome::ack());
    let running = start_on(&server, |b| {
        b.include(created("phoenix").handler(handler.clone()));
    })
    .await;
    publish_stored(&js, "orders.created", &order(1)).await;
    handler.until_seen(1).await;

    js.get_stream(STREAM)
        .await
        .expect("the stream")
        .delete_consumer("phoenix")
        .await
        .expect("the consumer is deleted");
    // The registration notices and creates the durable again, from where it stood: order 1,
    // settled, does not come again (docs/guarantees.md).
    eventually(PATIENCE, "the consumer exists again", || async {
        let stream = js.get_stream(STREAM).await.ok()?;
        stream.consumer_info("phoenix").await.ok()
    })
    .await;
    publish_stored(&js, "orders.created", &order(2)).await;
    let seen = handler.until_seen(2).await;
    let ids: Vec<u64> = seen.iter().map(|s| s.id).collect();
    assert_eq!(ids, [1, 2], "{seen:?}");
    running.stop().await.expect("a clean stop");
    assert_eq!(handler.seen().len(), 2, "{:?}", handler.seen());
}

#[tokio::test]
async fn an_undecodable_payload_is_terminated_and_the_next_message_flows() {
    let (server, _client, js) = jetstream_server().await;
    let handler = Scripted::always(HandlerOutcome::ack());
    let running = start_on(&server, |b| {
        b.include(
            created("decode")
                .ack_wait(millis(300))
                .handler(handler.clone()),
        );
    })
    .await;

    publish_stored(&js, "orders.created", "not json").await;
    let good = publish_stored(&js, "orders.created", &order(2)).await;
    let seen = handler.until_seen(1).await;
    assert_eq!(seen[0].id, 2);
    until_settled(&js, "decode", good, "both settled").await;
    quiet_for(Duration::from_millis(700)).await;
    // Terminated, not redelivered: two deliveries in all.
    assert_eq!(
        consumer_info(&js, STREAM, "decode")
            .await
            .delivered
            .consumer_sequence,
        2
    );
    running.stop().await.expect("a clean stop");
}

#[tokio::test]
async fn an_undecodable_payload_goes_to_the_dead_letter() {
    let (server, client, js) = jetstream_server().await;
    let dead = Recorder::start(&client, ["dead.orders"]).await;
    let handler = Scripted::always(HandlerOutcome::ack());
    let running = start_on(&server, |b| {
        b.include(created("decode_dl").handler(handler.clone()))
            .dead_letter("dead.orders");
    })
    .await;

    let seq = publish_stored(&js, "orders.created", "{\"id\": \"seven\"}").await;
    let dead = dead.until(1).await;
    assert_eq!(&dead[0].payload[..], b"{\"id\": \"seven\"}");
    until_settled(&js, "decode_dl", seq, "terminated").await;
    assert!(handler.seen().is_empty());
    running.stop().await.expect("a clean stop");
}

#[tokio::test]
async fn a_panicking_handler_is_retried_and_the_next_message_flows() {
    let (server, _client, js) = jetstream_server().await;
    // Order 1 panics on its first delivery; everything else is acknowledged.
    let handler = Scripted::new(|seen| {
        if seen.id == 1 && seen.delivered == Some(1) {
            None
        } else {
            Some(HandlerOutcome::ack())
        }
    });
    let running = start_on(&server, |b| {
        b.include(created("panics").handler(handler.clone()));
    })
    .await;

    publish_stored(&js, "orders.created", &order(1)).await;
    let second = publish_stored(&js, "orders.created", &order(2)).await;
    let seen = handler.until_seen(3).await;
    let again = seen
        .iter()
        .find(|s| s.id == 1 && s.delivered == Some(2))
        .expect("the panicked delivery came back as a retry");
    assert_eq!(again.attempt, 2);
    assert!(seen.iter().any(|s| s.id == 2));
    until_settled(&js, "panics", second, "all settled").await;
    running.stop().await.expect("a clean stop");
}

#[tokio::test]
async fn a_failed_dead_letter_publish_leaves_the_original_unsettled() {
    let (server, _client, js) = jetstream_server().await;
    // The dead-letter stream is full and refuses new messages.
    js.create_stream(stream::Config {
        name: "DEAD".to_owned(),
        subjects: vec!["dead.>".to_owned()],
        max_messages: 1,
        discard: stream::DiscardPolicy::New,
        ..Default::default()
    })
    .await
    .expect("the dead-letter stream");
    publish_stored(&js, "dead.filler", "{}").await;

    let handler = Scripted::always(HandlerOutcome::retry());
    let running = start_on(&server, |b| {
        b.include(
            created("dl_fails")
                .ack_wait(millis(600))
                .handler(handler.clone()),
        )
        .max_attempts(attempts(1))
        .dead_letter("dead.orders");
    })
    .await;

    let seq = publish_stored(&js, "orders.created", &order(13)).await;
    handler.until_seen(1).await;
    quiet_for(Duration::from_millis(200)).await;
    let info = consumer_info(&js, STREAM, "dl_fails").await;
    assert_eq!(info.num_ack_pending, 1, "the original is not terminated");

    // The original is held back (-NAK with a delay) and delivered again: nothing is lost. The
    // delivery past the cap goes straight to another dead-letter try, without the handler.
    consumer_until(&js, STREAM, "dl_fails", "delivered again", |i| {
        i.delivered.consumer_sequence >= 2
    })
    .await;
    assert_eq!(handler.seen().len(), 1, "{:?}", handler.seen());

    // Once the dead-letter stream has room, the next attempt goes through and is terminated.
    js.get_stream("DEAD")
        .await
        .expect("the dead-letter stream")
        .purge()
        .await
        .expect("purged");
    until_settled(&js, "dl_fails", seq, "terminated after the dead letter").await;
    let mut dead = js.get_stream("DEAD").await.expect("the dead-letter stream");
    let state = dead.info().await.expect("its info").state.clone();
    assert_eq!(state.messages, 1);
    let stored = dead
        .get_raw_message(state.first_sequence)
        .await
        .expect("the dead letter");
    assert_eq!(&stored.payload[..], order(13).as_bytes());
    running.stop().await.expect("a clean stop");
}

type Answer = dyn Fn(&[Order]) -> BatchOutcome + Send + Sync;

/// A batch handler that answers each message by the script and records the batch sizes.
#[derive(Clone)]
struct Batches {
    sizes: Arc<Mutex<Vec<usize>>>,
    ids: Arc<Mutex<Vec<u64>>>,
    answer: Arc<Answer>,
}

impl Batches {
    fn new(answer: impl Fn(&[Order]) -> BatchOutcome + Send + Sync + 'static) -> Self {
        Self {
            sizes: Arc::default(),
            ids: Arc::default(),
            answer: Arc::new(answer),
        }
    }

    fn ids(&self) -> Vec<u64> {
        self.ids.lock().expect("not poisoned").clone()
    }
}

impl HandleBatch<Order> for Batches {
    async fn handle_batch(
        &self,
        orders: &[Order],
        _outs: &(),
        _ctx: &mut BatchContext<'_>,
    ) -> BatchOutcome {
        self.sizes.lock().expect("not poisoned").push(orders.len());
        self.ids
            .lock()
            .expect("not poisoned")
            .extend(orders.iter().map(|o| o.id));
        (self.answer)(orders)
    }
}

#[tokio::test]
async fn a_batch_settles_each_message_with_its_own_outcome() {
    let (server, _client, js) = jetstream_server().await;
    let mut last = 0;
    for id in 1..=4 {
        last = publish_stored(&js, "orders.created", &order(id)).await;
    }
    // Order 3 is retried once; order 4 is dropped; the rest are acknowledged.
    let retried = Arc::new(Mutex::new(false));
    let handler = Batches::new(move |orders| {
        let mut retried = retried.lock().expect("not poisoned");
        BatchOutcome::Each(
            orders
                .iter()
                .map(|o| match o.id {
                    3 if !*retried => {
                        *retried = true;
                        HandlerOutcome::retry()
                    }
                    4 => HandlerOutcome::drop(),
                    _ => HandlerOutcome::ack(),
                })
                .collect(),
        )
    });
    let running = start_on(&server, |b| {
        b.include(
            created("batch")
                .batch(NonZeroUsize::new(10).expect("not zero"))
                .handler(handler.clone()),
        );
    })
    .await;

    until_settled(&js, "batch", last, "every message settled").await;
    let mut ids = handler.ids();
    ids.sort_unstable();
    assert_eq!(ids, [1, 2, 3, 3, 4], "order 3 came back once");
    assert_eq!(
        consumer_info(&js, STREAM, "batch")
            .await
            .delivered
            .consumer_sequence,
        5
    );
    running.stop().await.expect("a clean stop");
}

#[tokio::test]
async fn a_batch_with_the_wrong_number_of_outcomes_settles_nothing() {
    let (server, _client, js) = jetstream_server().await;
    for id in 1..=3 {
        publish_stored(&js, "orders.created", &order(id)).await;
    }
    let handler = Batches::new(|_| BatchOutcome::Each(vec![HandlerOutcome::ack()]));
    let running = start_on(&server, |b| {
        b.include(
            created("mismatch")
                .ack_wait(millis(1_000))
                .batch(NonZeroUsize::new(10).expect("not zero"))
                .handler(handler.clone()),
        );
    })
    .await;

    // A batch of several got one outcome: nothing of it is settled. (A batch of one matches.)
    eventually(PATIENCE, "all three handled", || async {
        (handler.ids().len() >= 3).then_some(())
    })
    .await;
    let sizes = handler.sizes.lock().expect("not poisoned").clone();
    let unsettled: usize = sizes.iter().filter(|&&n| n > 1).sum();
    assert!(unsettled > 0, "the messages came one by one: {sizes:?}");
    consumer_until(
        &js,
        STREAM,
        "mismatch",
        "only the mismatched batch unsettled",
        |i| i.num_ack_pending == unsettled && i.delivered.stream_sequence == 3,
    )
    .await;
    running.stop().await.expect("a clean stop");
}
