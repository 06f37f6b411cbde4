//! `cargo bench -p ruststream-nats --bench threads`: the request latency of an async `reply`
//! registration while a CPU-bound registration of the same app (50 ms of computing a message,
//! kept busy at two calls at once) runs on the app's runtime, or on `.threads(2)`; and with
//! nothing else running, for reference. The app's runtime has two workers. Prints a markdown
//! table (docs/benchmarks.md, "CPU-bound handlers on threads of their own").
//!
//! `--requests N` (200 by default) requests per row, one at a time, 2 ms apart.

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ruststream::{App, AppInfo, Context, Env, Handle, HandlerOutcome, Outgoing, RustStream};
use ruststream_nats::{CoreSubject, NatsBroker};
use ruststream_test_server::NatsServer;
use serde::{Deserialize, Serialize};

const CRUNCH: Duration = Duration::from_millis(50);

#[derive(Serialize, Deserialize)]
struct Ping {
    n: u32,
}

#[derive(Serialize, Deserialize, Outgoing)]
#[outgoing(name = "bench.pong")]
struct Pong {
    n: u32,
}

#[ruststream::subscriber("bench.ping", reply)]
async fn echo(ping: &Ping) -> Result<Pong, HandlerOutcome> {
    Ok(Pong { n: ping.n })
}

/// Computes for [`CRUNCH`] without an `.await`.
struct Crunch;

/// Calls of [`Crunch`] finished, for the table: the CPU-bound registration was busy.
static CRUNCHED: AtomicUsize = AtomicUsize::new(0);

impl Handle<Ping> for Crunch {
    async fn handle(
        &self,
        _input: &Ping,
        _outs: &(),
        _ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        let start = Instant::now();
        let mut x: u64 = 1;
        while start.elapsed() < CRUNCH {
            for _ in 0..1000 {
                x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005) | 1);
            }
        }
        CRUNCHED.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Busy {
    Nothing,
    OnTheRuntime,
    OnThreads,
}

fn app(url: &str, busy: Busy) -> impl App + use<> {
    let two = NonZeroUsize::new(2).unwrap_or(NonZeroUsize::MIN);
    RustStream::new(AppInfo::new("bench", "0.1.0")).with_broker(NatsBroker::new(url), |b| {
        b.include(echo);
        let crunch = b
            .include(CoreSubject::new("bench.crunch").handler(Crunch))
            .name("crunch")
            .concurrency(two);
        if busy == Busy::OnThreads {
            crunch.threads(two);
        }
    })
}

/// p50, p99 and the slowest of `requests` round trips, in microseconds, and how many calls of
/// the CPU-bound registration finished meanwhile. The app runs on `app_runtime`; the requests
/// and the feed come from a runtime of their own, which the app's handlers never hold.
fn measure(
    app_runtime: &tokio::runtime::Runtime,
    url: &str,
    busy: Busy,
    requests: u32,
) -> (u128, u128, u128, usize) {
    let running = app_runtime
        .block_on(app(url, busy).start(Env::new()))
        .expect("the app starts");
    let client_runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let measured = client_runtime.block_on(async {
        let client = async_nats::connect(url).await.expect("connect");
        // Keeps both calls of the CPU-bound registration busy: two calls' worth a 50 ms.
        let feeder = (busy != Busy::Nothing).then(|| {
            let client = client.clone();
            tokio::spawn(async move {
                loop {
                    for _ in 0..2 {
                        let _ = client.publish("bench.crunch", r#"{"n":0}"#.into()).await;
                    }
                    tokio::time::sleep(CRUNCH).await;
                }
            })
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        let crunched = CRUNCHED.load(Ordering::Relaxed);
        let mut took = Vec::with_capacity(requests as usize);
        for n in 0..requests {
            let payload = serde_json::to_vec(&Ping { n }).expect("encode");
            let start = Instant::now();
            client
                .request("bench.ping", payload.into())
                .await
                .expect("a response");
            took.push(start.elapsed().as_micros());
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let crunched = CRUNCHED.load(Ordering::Relaxed) - crunched;
        if let Some(feeder) = feeder {
            feeder.abort();
        }
        took.sort_unstable();
        let at = |q: f64| took[((took.len() - 1) as f64 * q).round() as usize];
        (at(0.5), at(0.99), at(1.0), crunched)
    });
    app_runtime.block_on(running.stop()).expect("the app stops");
    measured
}

/// The command line, as clap reads it.
#[derive(clap::Parser)]
struct Args {
    /// Requests per row, one at a time, 2 ms apart.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..))]
    requests: u32,
    /// Passed by `cargo bench` to every bench target; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

fn main() {
    let Args { requests, .. } = <Args as clap::Parser>::parse();
    let server = NatsServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    println!("| the CPU-bound registration | p50 | p99 | slowest | its calls meanwhile |");
    println!("|---|---:|---:|---:|---:|");
    for (busy, label) in [
        (Busy::Nothing, "none (reference)"),
        (Busy::OnTheRuntime, "busy, on the app's runtime"),
        (Busy::OnThreads, "busy, on `.threads(2)`"),
    ] {
        let (p50, p99, max, crunched) = measure(&runtime, &server.url(), busy, requests);
        println!(
            "| {label} | {:.2} ms | {:.2} ms | {:.2} ms | {crunched} |",
            p50 as f64 / 1000.0,
            p99 as f64 / 1000.0,
            max as f64 / 1000.0
        );
    }
}
