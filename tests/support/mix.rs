//! A handler for the edges of at least once: it answers a fixed mix of `ack` (publishing a
//! stored output first), `retry`, `retry_after`, `drop` and panics, and the checks of what the
//! server must hold once every message ended.

use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream;
use ruststream::{Context, Handle, HandlerOutcome, Outgoing, Publisher};
use ruststream_nats::{JetStreamSubject, NatsBroker};
use ruststream_test_server::client::{Recorder, consumer_info, eventually, stream_messages};
use serde::{Deserialize, Serialize};

use super::nats::{Order, STREAM, attempts, millis, start};

/// The cap: a message still unsettled by its third delivery is dead-lettered.
pub const CAP: u64 = 3;

/// How long each disruption may take to heal, and the run to finish after the last one.
pub const RECOVERY: Duration = Duration::from_secs(60);

/// The stored output of an acknowledged order.
#[derive(Debug, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "out.done")]
pub struct Done {
    pub id: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Ack,
    Retry,
    RetryAfter,
    Drop,
    Panic,
}

/// The answer to delivery `delivered` of order `id`: a fixed pseudo-random mix (55% ack, 15%
/// retry, 10% retry after 300 ms, 10% drop, 10% panic), the same on every run.
pub fn answer(id: u64, delivered: u64) -> Answer {
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
pub struct Mix {
    seen: Arc<Mutex<Vec<(u64, u64, Answer)>>>,
}

impl Mix {
    pub fn seen(&self) -> Vec<(u64, u64, Answer)> {
        self.seen.lock().expect("not poisoned").clone()
    }

    /// How many deliveries were handled so far.
    pub fn handled(&self) -> usize {
        self.seen.lock().expect("not poisoned").len()
    }

    pub async fn until_handled(&self, n: usize, what: &str) {
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
pub async fn instance(url: String, mix: &Mix) -> ruststream::RunningApp {
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

/// Waits until every one of the `n` stored orders (stream sequences 1..=n) ended, with nothing
/// left on consumer `mix`, then checks what the server holds: every order was handled at least
/// once; every one the server got a `+ACK` for (as `acks` saw it) has its output in `OUT`; every
/// one it got a `+TERM` for was dropped by its handler or is in `DEAD`.
///
/// An order ended when `acks` saw its `+ACK` or `+TERM`, or, for a settlement sent while the
/// test's own connection was down (a server restart), when its output or dead letter is stored
/// or its handler dropped it. A message lost (never delivered again after a `-NAK`) has none of
/// these.
pub async fn every_order_ended(js: &jetstream::Context, acks: &Recorder, mix: &Mix, n: u64) {
    let deadline = tokio::time::Instant::now() + RECOVERY;
    let (wire, outputs, dead) = loop {
        let wire = settled(acks);
        let outputs = stored_ids(js, "OUT").await;
        let dead = stored_ids(js, "DEAD").await;
        let seen = mix.seen();
        let unended: Vec<u64> = (1..=n)
            .filter(|id| {
                !wire.contains_key(id)
                    && !outputs.contains(id)
                    && !dead.contains(id)
                    && !seen.iter().any(|s| s.0 == *id && s.2 == Answer::Drop)
            })
            .collect();
        let info = consumer_info(js, STREAM, "mix").await;
        if unended.is_empty() && info.num_pending == 0 && info.num_ack_pending == 0 {
            break (wire, outputs, dead);
        }
        if tokio::time::Instant::now() > deadline {
            let first: Vec<(u64, Vec<(u64, Answer)>)> = unended
                .iter()
                .take(10)
                .map(|&id| {
                    let deliveries = seen.iter().filter(|s| s.0 == id);
                    (id, deliveries.map(|s| (s.1, s.2)).collect())
                })
                .collect();
            panic!(
                "{} of {n} orders never ended; the first, with their (delivered, answer): \
                 {first:?}; the consumer: {info:#?}",
                unended.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };

    let seen = mix.seen();
    let handled: BTreeSet<u64> = seen.iter().map(|s| s.0).collect();
    assert_eq!(
        handled.len(),
        usize::try_from(n).expect("fits"),
        "every stored message handled at least once"
    );
    for (id, end) in &wire {
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
    let info = consumer_info(js, STREAM, "mix").await;
    eprintln!(
        "{} deliveries; {} acked, {} dead-lettered; consumer: {} redelivered",
        mix.handled(),
        outputs.len(),
        dead.len(),
        info.num_redelivered
    );
}

/// The order ids of the messages stream `name` holds (`{"id": n}` payloads).
async fn stored_ids(js: &jetstream::Context, name: &str) -> BTreeSet<u64> {
    stream_messages(js, name)
        .await
        .iter()
        .filter_map(|m| {
            serde_json::from_slice::<serde_json::Value>(&m.payload).ok()?["id"].as_u64()
        })
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Acked,
    Terminated,
}

/// Each stream sequence whose delivery the server got a final settlement for, as the test's
/// subscription to the acknowledgement subjects saw it: `+ACK` wins over `+TERM` (a late
/// acknowledgement of an earlier delivery settles it too).
pub fn settled(acks: &Recorder) -> BTreeMap<u64, End> {
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
