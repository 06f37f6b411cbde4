//! `.concurrency(n)` on a real nats-server: exactly `n` handlers in flight under load (never
//! more, and all `n` busy while there is a backlog), and the server never sends the instance
//! more than its busy slots plus the pull's lookahead, as the server's consumer info shows.

mod support;

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ruststream::{Context, Handle, HandlerOutcome};
use ruststream_nats::JetStreamSubject;
use ruststream_test_server::client::wait_until;
use support::nats::*;
use support::scale::publish_orders;
use tokio::sync::Semaphore;

/// The largest pull lookahead (`ruststream-nats`'s `PULL_MAX`, see `docs/consumers.md`).
const PULL_MAX: usize = 256;

/// A handler that counts the calls in flight, waits for a pass from the test (`gate`), then
/// takes `work` and acknowledges.
#[derive(Clone)]
struct Counted {
    in_flight: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
    done: Arc<AtomicUsize>,
    gate: Arc<Semaphore>,
    work: Duration,
}

impl Handle<Order> for Counted {
    async fn handle(
        &self,
        _order: &Order,
        _outs: &(),
        _ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        self.gate
            .acquire()
            .await
            .expect("the gate stays open")
            .forget();
        tokio::time::sleep(self.work).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.done.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_n_handlers_run_and_the_pull_stays_within_free_slots_plus_the_lookahead() {
    const N: usize = 6;
    const MESSAGES: u64 = 2_000;
    let (server, _client, js) = jetstream_server().await;
    publish_orders(&js, "orders.created", 1..=MESSAGES).await;
    let handler = Counted {
        in_flight: Arc::default(),
        most: Arc::default(),
        done: Arc::default(),
        gate: Arc::new(Semaphore::new(0)),
        work: Duration::from_millis(2),
    };
    let running = start_on(&server, |b| {
        b.include(
            JetStreamSubject::new("orders.created", STREAM)
                .durable("workers")
                .handler(handler.clone()),
        )
        .concurrency(NonZeroUsize::new(N).expect("not zero"));
    })
    .await;

    // Every handler held at the gate: all N slots are taken, and no more.
    wait_until(PATIENCE, "N handlers in flight", || {
        handler.in_flight.load(Ordering::SeqCst) == N
    })
    .await;
    // What the server sent the instance: the N in flight, and what the pull asked for ahead of
    // them (it asks for more only as handlers take messages; none is taken now).
    let held = consumer_until(&js, STREAM, "workers", "the N in flight sent", |i| {
        i.num_ack_pending >= N
    })
    .await;
    println!(
        "held at the gate: {} in flight, server: {} pending ack, {} waiting requests, {} \
         delivered",
        handler.in_flight.load(Ordering::SeqCst),
        held.num_ack_pending,
        held.num_waiting,
        held.delivered.consumer_sequence
    );
    assert_eq!(handler.most.load(Ordering::SeqCst), N, "never more than N");
    // The lookahead starts at N, a request tops it up once no more than half of it is still to
    // come, and it at most doubles per request: taking the first N asks for N, then (at the
    // N/2-th) tops up to 2 N. So at most N + 2 N were sent, far from the 2 000 stored.
    assert!(
        held.delivered.consumer_sequence <= 3 * N as u64,
        "sent {} with {N} slots busy and none free",
        held.delivered.consumer_sequence
    );

    // Under load: the gate open, 2 ms a message. What the server sent is what the handlers
    // finished, plus at most N in flight, plus what was asked for and not taken yet (at most the
    // largest lookahead). The count of finished handlers is read after the server's info, so
    // it can only be higher than when the server answered.
    handler.gate.add_permits(Semaphore::MAX_PERMITS / 2);
    let mut most_pending = 0;
    let mut most_waiting = 0;
    let mut most_ahead = 0;
    let give_up = std::time::Instant::now() + PATIENCE * 6;
    loop {
        assert!(
            std::time::Instant::now() < give_up,
            "every message handled within {:?}",
            PATIENCE * 6
        );
        let info = consumer_info(&js, STREAM, "workers").await;
        let done = handler.done.load(Ordering::SeqCst) as u64;
        let sent = info.delivered.consumer_sequence;
        most_pending = most_pending.max(info.num_ack_pending);
        most_waiting = most_waiting.max(info.num_waiting);
        most_ahead = most_ahead.max(sent.saturating_sub(done));
        assert!(
            sent <= done + (N + PULL_MAX) as u64,
            "{sent} sent with {done} handled and {N} slots: {info:#?}"
        );
        if info.ack_floor.stream_sequence >= MESSAGES {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    running.stop().await.expect("a drained stop");
    println!(
        "under load: at most {} handlers in flight, at most {most_ahead} sent beyond those \
         handled, at most {most_pending} pending ack, at most {most_waiting} waiting requests",
        handler.most.load(Ordering::SeqCst)
    );
    assert_eq!(handler.done.load(Ordering::SeqCst) as u64, MESSAGES);
    assert_eq!(
        handler.most.load(Ordering::SeqCst),
        N,
        "never more than N in flight"
    );
    let info = consumer_info(&js, STREAM, "workers").await;
    assert_eq!(info.delivered.consumer_sequence, MESSAGES, "each sent once");
}
