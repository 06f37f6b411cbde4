//! Sizing: how many orders per second 1, 2 and 3 instances of `examples/orders_worker.rs` (each
//! a child process, release build) take from one durable consumer on one nats-server, side by
//! side in the same run (`docs/deployment.md`).
//!
//! ```text
//! cargo bench --bench scale                       # 3 rounds of 20 000 orders per instance count
//! cargo bench --bench scale -- --rounds 5 --messages 50000
//! ```
//!
//! Each round: the instances stopped, the consumer deleted, the stream refilled with M orders,
//! then N instances started on them; the rate is `(M - 1) / (time from the first fulfilled
//! order to the M-th)`, as the test's own subscription to `orders.fulfilled` sees them (every
//! order is fulfilled, replied and acknowledged). Rounds are interleaved (1, 2, 3, 1, 2, 3, ...)
//! and the table shows the median with the slowest and fastest round. After each round the
//! server must report every order acknowledged, or the run fails.

#[path = "../tests/support/scale.rs"]
mod scale_support;

use std::time::Instant;

use scale_support::*;

/// The command line of `cargo bench --bench scale -- ...`.
#[derive(clap::Parser)]
#[command(about = "Orders per second of 1, 2 and 3 instances of the orders worker")]
struct Args {
    /// Interleaved rounds per instance count.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Orders in the stream per round.
    #[arg(long, default_value_t = 20_000)]
    messages: u64,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

fn main() {
    let args = <Args as clap::Parser>::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(run(args.rounds, args.messages));
}

async fn run(rounds: usize, m: u64) {
    let (server, _monitor, _client, js, fulfilled) = orders_server().await;
    let stream = js.get_stream(ORDERS).await.expect("the stream");
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    println!("{cores} cores, {m} orders a round, {rounds} rounds");

    let counts = [1usize, 2, 3];
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); counts.len()];
    for round in 0..rounds {
        for (slot, &instances) in counts.iter().enumerate() {
            // A fresh start: no consumer, an empty stream, then M orders waiting.
            let _ = stream.delete_consumer(FULFIL).await;
            stream.purge().await.expect("the stream is purged");
            let base = (round * counts.len() + slot) as u64 * m;
            publish_orders(&js, PLACED, base + 1..=base + m).await;
            let before = fulfilled.distinct() as u64;

            let mut workers: Vec<Worker> = (1..=instances)
                .map(|i| Worker::start(&server.url(), &format!("w{i}")))
                .collect();
            let mut first_at = None;
            let deadline = Instant::now() + patience_for(m * 4);
            loop {
                let done = fulfilled.distinct() as u64 - before;
                if done >= 1 && first_at.is_none() {
                    first_at = Some(Instant::now());
                }
                if done >= m {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{instances} instances fulfilled {done} of {m} orders in time"
                );
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            }
            let elapsed = first_at.map_or(0.0, |t| t.elapsed().as_secs_f64());
            let rate = (m - 1) as f64 / elapsed;
            until_drained(&js, ORDERS, FULFIL, stream_last(&js).await).await;
            for w in &mut workers {
                let status = w.process.terminate();
                assert!(status.success(), "{} stops cleanly: {status}", w.name);
            }
            println!(
                "round {} / {instances} instance(s): {rate:.0} msg/s",
                round + 1
            );
            rates[slot].push(rate);
        }
    }

    println!();
    println!("| instances | orders/s (median) | slowest - fastest | vs 1 instance |");
    println!("| --- | --- | --- | --- |");
    let base = median(&rates[0]);
    for (slot, &instances) in counts.iter().enumerate() {
        let mut sorted = rates[slot].clone();
        sorted.sort_by(f64::total_cmp);
        let med = median(&sorted);
        println!(
            "| {instances} | {med:.0} | {:.0} - {:.0} | {:.2}x |",
            sorted[0],
            sorted[sorted.len() - 1],
            med / base
        );
    }
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}

/// The stream's last sequence.
async fn stream_last(js: &async_nats::jetstream::Context) -> u64 {
    js.get_stream(ORDERS)
        .await
        .expect("the stream")
        .info()
        .await
        .expect("its info")
        .state
        .last_sequence
}
