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

use std::time::Duration;

use ruststream_test_server::client::Recorder;
use ruststream_test_server::proxy::Proxy;
use support::mix::*;
use support::nats::*;

fn messages() -> u64 {
    if std::env::var_os("RUSTSTREAM_RECOVERY_FULL").is_some() {
        2_000
    } else {
        240
    }
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

    every_order_ended(&js, &acks, &mix, n).await;
    second.stop().await.expect("a clean stop");
}
