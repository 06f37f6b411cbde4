//! A load run, live: stored messages handled by a handler that answers a pseudo-random mix of
//! `ack`, `retry`, `retry_after` and `drop` under a cap with a dead-letter subject. Every message
//! ends exactly one way: handled and acknowledged, dead-lettered, or dropped; the three add up to
//! what was published, exactly, and each message ends the way its answers say it must. The
//! process's resident memory is sampled during the run and must stay flat.
//!
//! 4 000 messages by default; `RUSTSTREAM_LOAD_FULL=1` runs the full 200 000.

mod support;

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use async_nats::jetstream::stream;
use ruststream::{Context, Handle, HandlerOutcome};
use ruststream_nats::JetStreamSubject;
use ruststream_test_server::client::eventually;
use support::nats::*;

/// The cap: a message answered `retry` on its third delivery is dead-lettered.
const CAP: u32 = 3;

const ACKED: u8 = 1;
const DROPPED: u8 = 2;
const DEAD: u8 = 3;

fn messages() -> u64 {
    if std::env::var_os("RUSTSTREAM_LOAD_FULL").is_some() {
        200_000
    } else {
        4_000
    }
}

/// The answer to delivery `delivered` of message `id`: a fixed pseudo-random mix (60% ack, 20%
/// retry, 10% retry after 5 ms, 10% drop), the same on every run.
fn answer(id: u64, delivered: u64) -> HandlerOutcome {
    let mut x = id
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(delivered.wrapping_mul(0xBF58_476D_1CE4_E5B9));
    x ^= x >> 31;
    match x % 10 {
        0..=5 => HandlerOutcome::ack(),
        6 | 7 => HandlerOutcome::retry(),
        8 => HandlerOutcome::retry_after(Duration::from_millis(5)),
        _ => HandlerOutcome::drop(),
    }
}

/// How message `id` must end: the first answer that is not a retry, or dead at the cap.
fn expected(id: u64) -> u8 {
    for delivered in 1..=u64::from(CAP) {
        match answer(id, delivered) {
            HandlerOutcome::Ack => return ACKED,
            HandlerOutcome::Drop => return DROPPED,
            _ => {}
        }
    }
    DEAD
}

/// Records, per message, how its last handled delivery ended (a few bytes per message: the
/// record itself must not be what grows).
#[derive(Clone)]
struct Load {
    ends: Arc<Vec<AtomicU8>>,
    handled: Arc<AtomicU64>,
}

impl Handle<Order> for Load {
    async fn handle(
        &self,
        order: &Order,
        _outs: &(),
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        self.handled.fetch_add(1, Ordering::Relaxed);
        let delivered = ctx.delivered().unwrap_or(1);
        let outcome = answer(order.id, delivered);
        let end = match outcome {
            HandlerOutcome::Ack => Some(ACKED),
            HandlerOutcome::Drop => Some(DROPPED),
            _ if delivered >= u64::from(CAP) => Some(DEAD),
            _ => None,
        };
        if let (Some(end), Some(slot)) = (end, usize::try_from(order.id).ok())
            && let Some(slot) = self.ends.get(slot)
        {
            slot.store(end, Ordering::Relaxed);
        }
        match outcome {
            HandlerOutcome::Ack => Ok(()),
            other => Err(other),
        }
    }
}

/// The process's resident memory in KiB (Linux), `None` elsewhere.
fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mix_of_outcomes_under_a_cap_accounts_for_every_message() {
    eprintln!("running against {}", NatsServer::version());
    let (server, _client, js) = jetstream_server().await;
    js.create_stream(stream::Config {
        name: "DEAD".to_owned(),
        subjects: vec!["dead.orders".to_owned()],
        ..Default::default()
    })
    .await
    .expect("the dead-letter stream");
    let n = messages();
    // Published in pipelined windows: a request per message, 512 acknowledgements awaited at
    // once.
    let mut pending = Vec::with_capacity(512);
    for id in 1..=n {
        let ack = js
            .publish("orders.created", order(id).into())
            .await
            .expect("the publish is sent");
        pending.push(ack);
        if pending.len() == 512 || id == n {
            for ack in pending.drain(..) {
                ack.await.expect("the stream stored the message");
            }
        }
    }

    let load = Load {
        ends: Arc::new((0..=n).map(|_| AtomicU8::new(0)).collect()),
        handled: Arc::default(),
    };
    let samples = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sampler = {
        let samples = Arc::clone(&samples);
        let handled = Arc::clone(&load.handled);
        tokio::spawn(async move {
            loop {
                if let Some(rss) = rss_kib() {
                    samples
                        .lock()
                        .expect("not poisoned")
                        .push((handled.load(Ordering::Relaxed), rss));
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
    };
    let started = std::time::Instant::now();
    let running = start_on(&server, |b| {
        b.include(
            JetStreamSubject::new("orders.created", STREAM)
                .durable("load")
                .handler(load.clone()),
        )
        .name("load")
        .concurrency(NonZeroUsize::new(8).expect("8"))
        .max_attempts(attempts(CAP))
        .dead_letter("dead.orders");
    })
    .await;

    let within = PATIENCE + Duration::from_millis(n / 2);
    let info = eventually(within, "every message settled", || async {
        let info = consumer_info(&js, STREAM, "load").await;
        (info.num_pending == 0 && info.num_ack_pending == 0 && info.ack_floor.stream_sequence >= n)
            .then_some(info)
    })
    .await;
    let elapsed = started.elapsed();
    running.stop().await.expect("a clean stop");
    sampler.abort();

    // Every message ended exactly the way its answers say.
    let mut counts = [0_u64; 4];
    let mut wrong = Vec::new();
    for id in 1..=n {
        let end = load.ends[usize::try_from(id).expect("fits")].load(Ordering::Relaxed);
        counts[usize::from(end)] += 1;
        if end != expected(id) && wrong.len() < 10 {
            wrong.push((id, end, expected(id)));
        }
    }
    assert!(wrong.is_empty(), "(id, ended, expected): {wrong:?}");
    let [unended, acked, dropped, dead] = counts;
    assert_eq!(unended, 0);
    // The server agrees: the dead-letter stream holds exactly the dead ones.
    let mut dead_stream = js.get_stream("DEAD").await.expect("the dead-letter stream");
    let stored_dead = dead_stream.info().await.expect("its info").state.messages;
    assert_eq!(stored_dead, dead, "dead letters stored");
    assert_eq!(
        acked + dropped + stored_dead,
        n,
        "every message accounted for"
    );
    let handled = load.handled.load(Ordering::Relaxed);
    eprintln!(
        "{n} messages in {elapsed:?}: {acked} acknowledged, {dropped} dropped, {dead} dead-lettered; \
         {handled} deliveries handled; consumer delivered {}",
        info.delivered.consumer_sequence
    );

    // Resident memory stays flat: the second half of the run holds no more than the first half
    // did, give or take 64 MiB (allocator slack, the server's answers in flight).
    let samples = samples.lock().expect("not poisoned").clone();
    eprintln!("rss samples (handled, KiB): {samples:?}");
    if samples.len() >= 4 {
        let half = samples.len() / 2;
        let first = samples[..half].iter().map(|s| s.1).max().unwrap_or(0);
        let second = samples[half..].iter().map(|s| s.1).max().unwrap_or(0);
        assert!(
            second <= first + 64 * 1024,
            "resident memory grew from {first} KiB to {second} KiB: {samples:?}"
        );
    }
}
