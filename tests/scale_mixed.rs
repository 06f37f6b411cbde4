//! Instances sharing one durable, live, with a handler that answers every kind of outcome: three
//! instances of the service handle stored orders answered `ack` (with a stored output), `retry`,
//! `retry_after`, `drop` or a panic under a cap with a dead-letter subject; one is dropped
//! without a stop mid-run (its handlers abandoned, as in a crash of its task), another is
//! stopped and replaced (a rolling restart). Every order is handled at least once and ends on the
//! wire; every acknowledged one has its output stored, every terminated one was dropped or is in
//! the dead-letter stream, and nothing is left on the consumer.
//!
//! 600 messages by default; `RUSTSTREAM_SCALE_MESSAGES=N` runs N.

mod support;

use ruststream_test_server::client::Recorder;
use support::mix::*;
use support::nats::*;

fn messages() -> u64 {
    std::env::var("RUSTSTREAM_SCALE_MESSAGES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(600)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_on_one_durable_end_every_kind_of_answer_through_a_crash_and_a_rolling_restart() {
    eprintln!("running against {}", NatsServer::version());
    let (server, client, js) = jetstream_server().await;
    create_stream(&js, "OUT", ["out.>"]).await;
    create_stream(&js, "DEAD", ["dead.orders"]).await;
    let acks = Recorder::start(&client, ["$JS.ACK.ORDERS.mix.>"]).await;
    let n = messages();
    for id in 1..=n {
        publish_stored(&js, "orders.created", order(id)).await;
    }
    let n_usize = usize::try_from(n).expect("fits");

    let mix = Mix::default();
    let first = instance(server.url(), &mix).await;
    let second = instance(server.url(), &mix).await;
    let third = instance(server.url(), &mix).await;

    // One instance goes away without a stop: what it held comes again after `ack_wait`.
    mix.until_handled(n_usize / 3, "a third handled").await;
    drop(first);

    // A rolling restart of another.
    mix.until_handled(2 * n_usize / 3, "two thirds handled after the crash")
        .await;
    second.stop().await.expect("a clean stop");
    let fourth = instance(server.url(), &mix).await;

    every_order_ended(&js, &acks, &mix, n).await;
    third.stop().await.expect("a clean stop");
    fourth.stop().await.expect("a clean stop");
}
