//! Recovery, live: a consumer created again under a running registration brings back every
//! message the server would still have delivered: one waiting out `retry_after`, one released
//! with `-NAK`, one whose handler panicked, one held back because its dead letter could not be
//! stored. A stream deleted and created again is read from the start the descriptor names, not
//! from where the registration stood in the old one.
//!
//! The handlers answer `retry`, `retry_after`, a dead letter (retries up to the cap) and panic,
//! not only `ack`; each test asks the server afterwards that every stored message was handled
//! and ended as its answers say: nothing pending on the consumer, the dead letters stored.

mod support;

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use ruststream::HandlerOutcome;
use ruststream_nats::{JetStreamSubject, NatsBroker};
use ruststream_test_server::client::{create_stream, eventually, stream_messages};
use ruststream_test_server::proxy::Proxy;
use support::nats::*;

/// The stream of the dead letters, apart from [`STREAM`] so that deleting it keeps them.
const DEAD: &str = "DEAD";

/// How soon a registration must have handled what it owes after its consumer is back.
const RECOVERY: Duration = Duration::from_secs(15);

/// How long the link stays cut: longer than the 5 s a server keeps an ephemeral consumer nobody
/// pulls from, and than [`HELD`].
const CUT: Duration = Duration::from_secs(12);

/// How long the order ending in 2 is held back on its first delivery: long enough that its
/// consumer is gone before it comes back.
const HELD: Duration = Duration::from_secs(6);

/// The two registrations each test runs: `(name, subject, durable)`.
const REGISTRATIONS: [(&str, &str, Option<&str>); 2] = [
    ("ephemeral", "orders.ephemeral", None),
    ("durable", "orders.durable", Some("worker")),
];

/// The answers by the order id's last digit: 2 is held back with `retry_after(held)` the first
/// time, 3 retried at once the first time, 4 panics the first time, 5 always retries (dead
/// letter at the cap of 3 attempts); everything else, and every later turn, is acknowledged.
fn answers(held: Duration) -> Scripted {
    Scripted::by_turn(move |seen, turn| match (seen.id % 10, turn) {
        (5, _) => Some(HandlerOutcome::retry()),
        (2, 1) => Some(HandlerOutcome::retry_after(held)),
        (3, 1) => Some(HandlerOutcome::retry()),
        (4, 1) => None,
        _ => Some(HandlerOutcome::ack()),
    })
}

/// The dead-letter subject of registration `name`.
fn dead_subject(name: &str) -> String {
    format!("dead.{name}")
}

/// Starts the app on `url` with both [`REGISTRATIONS`], handled by `handlers` in their order.
async fn start_both(url: String, handlers: &[Scripted; 2]) -> ruststream::RunningApp {
    start(NatsBroker::new(url), |b| {
        for ((name, subject, durable), handler) in REGISTRATIONS.iter().zip(handlers) {
            let mut descriptor = JetStreamSubject::new(*subject, STREAM);
            if let Some(durable) = durable {
                descriptor = descriptor.durable(*durable);
            }
            b.include(descriptor.handler(handler.clone()))
                .name(*name)
                .max_attempts(attempts(3))
                .dead_letter(dead_subject(name));
        }
    })
    .await
    .expect("the app starts")
}

/// The order ids of the dead letters registration `name` stored.
async fn dead_letters(js: &jetstream::Context, name: &str) -> Vec<u64> {
    let subject = dead_subject(name);
    stream_messages(js, DEAD)
        .await
        .into_iter()
        .filter(|m| m.subject.as_str() == subject)
        .filter_map(|m| serde_json::from_slice::<Order>(&m.payload).ok())
        .map(|o| o.id)
        .collect()
}

/// Waits until the first round of `ids` was answered everywhere: the dead letters stored, the
/// retried and panicked orders handled again, and on the server nothing left but the held-back
/// order (or nothing at all when `held_left` is false).
async fn until_first_round(
    js: &jetstream::Context,
    handlers: &[Scripted; 2],
    ids: &[u64],
    held_left: bool,
) {
    for ((name, subject, _), handler) in REGISTRATIONS.iter().zip(handlers) {
        eventually(
            RECOVERY,
            &format!("{name}: the first round answered"),
            || async {
                let dead = dead_letters(js, name).await;
                let answered = ids.iter().all(|&id| match id % 10 {
                    5 => dead.contains(&id),
                    2 => handler.times(id) >= if held_left { 1 } else { 2 },
                    3 | 4 => handler.times(id) >= 2,
                    _ => handler.times(id) >= 1,
                });
                let info = consumer_reading(js, STREAM, subject).await?;
                let pending = usize::from(held_left);
                (answered && info.num_pending == 0 && info.num_ack_pending == pending).then_some(())
            },
        )
        .await;
    }
}

/// Waits until every order of `ids` ended as [`answers`] says, as the server reports it:
/// each handled (the held-back one twice), each dead letter stored, and the consumer of each
/// registration with nothing left to deliver or to acknowledge. Fails naming what is missing.
async fn until_all_ended(js: &jetstream::Context, handlers: &[Scripted; 2], ids: &[u64]) {
    for ((name, subject, _), handler) in REGISTRATIONS.iter().zip(handlers) {
        let deadline = tokio::time::Instant::now() + RECOVERY;
        loop {
            let unhandled: Vec<u64> = ids
                .iter()
                .copied()
                .filter(|&id| {
                    let times = handler.times(id);
                    times
                        < match id % 10 {
                            2..=4 => 2,
                            5 => 3,
                            _ => 1,
                        }
                })
                .collect();
            let dead = dead_letters(js, name).await;
            let dead_wrong: Vec<u64> = ids
                .iter()
                .copied()
                .filter(|&id| (id % 10 == 5) != dead.contains(&id))
                .collect();
            let info = consumer_reading(js, STREAM, subject).await;
            let left = info.as_ref().map(|i| (i.num_pending, i.num_ack_pending));
            if unhandled.is_empty() && dead_wrong.is_empty() && left == Some((0, 0)) {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{name}: after {RECOVERY:?}, orders not handled as often as answered: {unhandled:?}; \
                 dead letters wrong for {dead_wrong:?}; (pending, ack pending) on the server: {left:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A server with [`STREAM`] and [`DEAD`], and JetStream on it.
async fn server_with_dead_letters() -> (NatsServer, async_nats::Client, jetstream::Context) {
    let (server, client, js) = jetstream_server().await;
    create_stream(&js, DEAD, ["dead.>"]).await;
    (server, client, js)
}

/// Publishes each of `ids` to both registrations' subjects.
async fn publish_both(js: &jetstream::Context, ids: impl IntoIterator<Item = u64>) {
    for id in ids {
        for (_, subject, _) in REGISTRATIONS {
            publish_stored(js, subject, order(id)).await;
        }
    }
}

/// Fails unless each handler saw the held-back order once: its consumer must vanish while it
/// waits.
fn assert_still_held(handlers: &[Scripted; 2], id: u64) {
    for ((name, ..), handler) in REGISTRATIONS.iter().zip(handlers) {
        assert_eq!(
            handler.times(id),
            1,
            "{name}: order {id} came back before its consumer was gone (a slow machine?)"
        );
    }
}

#[tokio::test]
async fn consumers_deleted_while_a_message_is_held_back_bring_it_back() {
    eprintln!("running against {}", NatsServer::version());
    let (server, _client, js) = server_with_dead_letters().await;
    let handlers = [answers(HELD), answers(HELD)];
    let running = start_both(server.url(), &handlers).await;
    let ids = [1, 2, 3, 4, 5];
    publish_both(&js, ids).await;
    until_first_round(&js, &handlers, &ids, true).await;

    // An operator deletes both consumers while order 2 waits out its `retry_after`.
    let stream = js.get_stream(STREAM).await.expect("the stream exists");
    for (_, subject, _) in REGISTRATIONS {
        let info = consumer_reading(&js, STREAM, subject)
            .await
            .expect("the consumer exists");
        stream
            .delete_consumer(&info.name)
            .await
            .expect("the consumer is deleted");
    }
    assert_still_held(&handlers, 2);

    until_all_ended(&js, &handlers, &ids).await;
    running.stop().await.expect("a clean stop");
}

#[tokio::test]
async fn a_12_s_cut_link_while_a_message_is_held_back_brings_it_back() {
    eprintln!("running against {}", NatsServer::version());
    let (server, _client, js) = server_with_dead_letters().await;
    let proxy = Proxy::start(server.port());
    let handlers = [answers(HELD), answers(HELD)];
    let running = start_both(proxy.url(), &handlers).await;
    let ids = [1, 2, 3, 4, 5];
    publish_both(&js, ids).await;
    until_first_round(&js, &handlers, &ids, true).await;

    proxy.cut();
    assert_still_held(&handlers, 2);
    tokio::time::sleep(CUT).await;
    proxy.heal();

    until_all_ended(&js, &handlers, &ids).await;
    running.stop().await.expect("a clean stop");
}

#[tokio::test]
async fn a_stream_deleted_and_created_again_is_read_from_its_start() {
    eprintln!("running against {}", NatsServer::version());
    let (server, _client, js) = server_with_dead_letters().await;
    let proxy = Proxy::start(server.port());
    let held = Duration::from_millis(500);
    let handlers = [answers(held), answers(held)];
    let running = start_both(proxy.url(), &handlers).await;
    let old = [1, 2, 3, 4, 5];
    publish_both(&js, old).await;
    until_first_round(&js, &handlers, &old, false).await;

    // While the app cannot see it, the stream is deleted and created again, and it stores more
    // messages than the old one did before the app reads it.
    proxy.cut();
    js.delete_stream(STREAM)
        .await
        .expect("the stream is deleted");
    js.create_stream(stream::Config {
        name: STREAM.to_owned(),
        subjects: vec!["orders.>".to_owned()],
        ..Default::default()
    })
    .await
    .expect("the stream is created again");
    let new: Vec<u64> = (11..=20).collect();
    publish_both(&js, new.iter().copied()).await;
    proxy.heal();

    until_all_ended(&js, &handlers, &new).await;
    running.stop().await.expect("a clean stop");
}

#[tokio::test]
async fn consumers_deleted_while_a_dead_letter_is_held_back_bring_it_back() {
    eprintln!("running against {}", NatsServer::version());
    let (_server, _client, js) = jetstream_server().await;
    // A full dead-letter stream refuses the dead letters: each original is held back.
    js.create_stream(stream::Config {
        name: DEAD.to_owned(),
        subjects: vec!["dead.>".to_owned()],
        max_messages: 2,
        discard: stream::DiscardPolicy::New,
        ..Default::default()
    })
    .await
    .expect("the dead-letter stream is created");
    for _ in 0..2 {
        publish_stored(&js, "dead.filler", order(0)).await;
    }
    let handlers = [answers(HELD), answers(HELD)];
    let running = start_both(_server.url(), &handlers).await;
    let ids = [5, 6];
    publish_both(&js, ids).await;
    for ((name, subject, _), handler) in REGISTRATIONS.iter().zip(&handlers) {
        eventually(RECOVERY, &format!("{name}: order 5 held back"), || async {
            let info = consumer_reading(&js, STREAM, subject).await?;
            (handler.times(5) >= 3
                && handler.times(6) >= 1
                && info.num_pending == 0
                && info.num_ack_pending == 1)
                .then_some(())
        })
        .await;
    }

    // An operator deletes both consumers while order 5 is held back, then makes room for the
    // dead letters.
    let orders = js.get_stream(STREAM).await.expect("the stream exists");
    for (_, subject, _) in REGISTRATIONS {
        let info = consumer_reading(&js, STREAM, subject)
            .await
            .expect("the consumer exists");
        orders
            .delete_consumer(&info.name)
            .await
            .expect("the consumer is deleted");
    }
    js.get_stream(DEAD)
        .await
        .expect("the dead-letter stream exists")
        .purge()
        .await
        .expect("the fillers are purged");

    until_all_ended(&js, &handlers, &ids).await;
    running.stop().await.expect("a clean stop");
}
