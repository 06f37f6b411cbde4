//! At least once at the edges, live: stored messages handled by a handler that answers a fixed
//! mix of `ack` (publishing a stored output first), `retry`, `retry_after`, `drop` and panics under
//! a cap with a dead-letter subject, while an operator deletes the durable consumer, the link is
//! cut and healed, the instance is stopped and replaced by a new one, and the server is killed
//! and restarted.
//!
//! At the end every stored message was handled at least once and ended one way (acknowledged,
//! dropped, or dead-lettered at the cap), as the server reports it: nothing pending on the
//! consumer, every acknowledged input has its output stored in the output stream, every message
//! that ended at the cap is in the dead-letter stream.
//!
//! 240 messages by default; `RUSTSTREAM_RECOVERY_FULL=1` runs 2 000.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ruststream::{Context, Handle, HandlerOutcome, Outgoing, Publisher};
use ruststream_nats::{JetStreamSubject, NatsBroker};
use ruststream_test_server::client::{Recorder, eventually, stream_messages};
use ruststream_test_server::proxy::Proxy;
use serde::{Deserialize, Serialize};
use support::nats::*;

/// The cap: a message still unsettled by its third delivery is dead-lettered.
const CAP: u64 = 3;

/// How long each disruption may take to heal, and the run to finish after the last one.
const RECOVERY: Duration = Duration::from_secs(60);

fn messages() -> u64 {
    if std::env::var_os("RUSTSTREAM_RECOVERY_FULL").is_some() {
        2_000
    } else {
        240
    }
}

/// The stored output of an acknowledged order.
#[derive(Debug, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "out.done")]
struct Done {
    id: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Ack,
    Retry,
    RetryAfter,
    Drop,
    Panic,
}

/// The answer to delivery `delivered` of order `id`: a fixed pseudo-random mix (55% ack, 15%
/// retry, 10% retry after 300 ms, 10% drop, 10% panic), the same on every run.
fn answer(id: u64, delivered: u64) -> Answer {
    let mut x = id
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(delivered.wrapping_mul(0xBF58_476D_1CE4_E5B9));
    x ^= x >> 29;
    match x % 20 {
        0..=10 => Answer::Ack,
        11..=13 => Answer::Retry,
        14 | 15 => Answer::RetryAfter,
        16 | 17 => Answer::Drop,
        _ => Answer::Panic,
    }
}

/// Every delivery the handlers saw: (order id, delivered count, answer), across instances.
#[derive(Clone, Default)]
struct Mix {
    seen: Arc<Mutex<Vec<(u64, u64, Answer)>>>,
}

impl Mix {
    fn seen(&self) -> Vec<(u64, u64, Answer)> {
        self.seen.lock().expect("not poisoned").clone()
    }

    /// How many deliveries were handled so far.
    fn handled(&self) -> usize {
        self.seen.lock().expect("not poisoned").len()
    }

    async fn until_handled(&self, n: usize, what: &str) {
        eventually(RECOVERY, what, || async {
            (self.handled() >= n).then_some(())
        })
        .await;
    }
}

impl Handle<Order, Publisher<Done>> for Mix {
    async fn handle(
        &self,
        order: &Order,
        outs: &Publisher<Done>,
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        let delivered = ctx.delivered().unwrap_or(1);
        let answer = answer(order.id, delivered);
        self.seen
            .lock()
            .expect("not poisoned")
            .push((order.id, delivered, answer));
        // Slow enough that the disruptions below meet messages in flight.
        tokio::time::sleep(Duration::from_millis(5)).await;
        match answer {
            Answer::Ack => outs
                .publish(ctx, &Done { id: order.id })
                .await
                .map_err(|_| HandlerOutcome::retry()),
            Answer::Retry => Err(HandlerOutcome::retry()),
            Answer::RetryAfter => Err(HandlerOutcome::retry_after(Duration::from_millis(300))),
            Answer::Drop => Err(HandlerOutcome::drop()),
            Answer::Panic => panic!("the mix panics on order {}", order.id),
        }
    }
}

/// One instance of the service: the mix on durable `mix`, through `url`.
async fn instance(url: String, mix: &Mix) -> ruststream::RunningApp {
    start(NatsBroker::new(url), |b| {
        b.include(
            JetStreamSubject::new("orders.created", STREAM)
                .durable("mix")
                .ack_wait(millis(2_000))
                .handler(mix.clone()),
        )
        .name("mix")
        .concurrency(NonZeroUsize::new(4).expect("4"))
        .max_attempts(attempts(u32::try_from(CAP).expect("small")))
        .dead_letter("dead.orders");
    })
    .await
    .expect("the instance starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_message_ends_once_through_deletions_cuts_and_restarts_with_every_kind_of_answer() {
    eprintln!("running against {}", NatsServer::version());
    let (mut server, client, js) = jetstream_server().await;
    create_stream(&js, "OUT", ["out.>"]).await;
    create_stream(&js, "DEAD", ["dead.orders"]).await;
    let acks = Recorder::start(&client, ["$JS.ACK.ORDERS.mix.>"]).await;
    let proxy = Proxy::start(server.port());
    let n = messages();
    for id in 1..=n {
        publish_stored(&js, "orders.created", order(id)).await;
    }
    let n_usize = usize::try_from(n).expect("fits");

    let mix = Mix::default();
    let first = instance(proxy.url(), &mix).await;

    // An operator deletes the durable while messages wait out their `retry_after`.
    mix.until_handled(n_usize / 4, "a quarter handled").await;
    js.get_stream(STREAM)
        .await
        .expect("the stream")
        .delete_consumer("mix")
        .await
        .expect("the operator deletes the durable");

    // The link is cut for 6 s and heals.
    mix.until_handled(n_usize / 2, "half handled after the deletion")
        .await;
    proxy.cut();
    tokio::time::sleep(Duration::from_secs(6)).await;
    proxy.heal();

    // The instance is stopped and a new one takes over.
    mix.until_handled(3 * n_usize / 4, "three quarters handled after the cut")
        .await;
    first.stop().await.expect("a clean stop");
    let second = instance(server.url(), &mix).await;

    // The server is killed with messages on file storage, and restarted.
    mix.until_handled(7 * n_usize / 8, "seven eighths handled after the restart")
        .await;
    server.kill();
    tokio::time::sleep(Duration::from_secs(2)).await;
    server.restart();

    // Every message ended on the wire: the server got its `+ACK` or its `+TERM` (the inputs
    // are stream sequences 1..=n, published in order), and nothing is left on the consumer.
    let deadline = tokio::time::Instant::now() + RECOVERY;
    let ends = loop {
        let ends = settled(&acks);
        let info = consumer_info(&js, STREAM, "mix").await;
        if ends.len() == n_usize && info.num_pending == 0 && info.num_ack_pending == 0 {
            break ends;
        }
        if tokio::time::Instant::now() > deadline {
            let seen = mix.seen();
            let unended: Vec<(u64, Vec<(u64, Answer)>)> = (1..=n)
                .filter(|id| !ends.contains_key(id))
                .take(10)
                .map(|id| {
                    let deliveries = seen.iter().filter(|s| s.0 == id);
                    (id, deliveries.map(|s| (s.1, s.2)).collect())
                })
                .collect();
            panic!(
                "{} of {n} orders never ended; the first, with their (delivered, answer): \
                 {unended:?}; the consumer: {info:#?}",
                n_usize - ends.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    second.stop().await.expect("a clean stop");

    let outputs: BTreeSet<u64> = stream_messages(&js, "OUT")
        .await
        .iter()
        .map(|m| {
            serde_json::from_slice::<Done>(&m.payload)
                .expect("an output")
                .id
        })
        .collect();
    let dead: BTreeSet<u64> = stream_messages(&js, "DEAD")
        .await
        .iter()
        .map(|m| {
            serde_json::from_slice::<serde_json::Value>(&m.payload).expect("a dead letter")["id"]
                .as_u64()
                .expect("an order id")
        })
        .collect();
    let seen = mix.seen();
    let handled: BTreeSet<u64> = seen.iter().map(|s| s.0).collect();
    assert_eq!(
        handled.len(),
        n_usize,
        "every stored message handled at least once"
    );
    for (id, end) in &ends {
        if *end == End::Acked {
            assert!(
                outputs.contains(id),
                "order {id} was acknowledged without its output stored"
            );
        } else {
            // Terminated: the handler dropped it, or it went to the dead-letter stream.
            let dropped = seen.iter().any(|s| s.0 == *id && s.2 == Answer::Drop);
            assert!(
                dropped || dead.contains(id),
                "order {id} was terminated without a drop or its dead letter"
            );
        }
    }
    let info = consumer_info(&js, STREAM, "mix").await;
    eprintln!(
        "{} deliveries; {} acked, {} dead-lettered; consumer: {} redelivered",
        mix.handled(),
        outputs.len(),
        dead.len(),
        info.num_redelivered
    );
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Acked,
    Terminated,
}

/// Each stream sequence whose delivery the server got a final settlement for, as the test's
/// subscription to the acknowledgement subjects saw it: `+ACK` wins over `+TERM` (a late
/// acknowledgement of an earlier delivery settles it too).
fn settled(acks: &Recorder) -> BTreeMap<u64, End> {
    let mut ends = BTreeMap::new();
    for ack in acks.messages() {
        let Some(sequence) = ack.subject.as_str().split('.').nth(5) else {
            continue;
        };
        let Ok(sequence) = sequence.parse::<u64>() else {
            continue;
        };
        if ack.payload.starts_with(b"+ACK") {
            ends.insert(sequence, End::Acked);
        } else if ack.payload.starts_with(b"+TERM") {
            ends.entry(sequence).or_insert(End::Terminated);
        }
    }
    ends
}
