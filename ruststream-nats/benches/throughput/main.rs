//! What RustStream costs over raw async-nats, measured side by side.
//!
//! ```text
//! cargo bench -p ruststream-nats --bench throughput
//! cargo bench -p ruststream-nats --bench throughput -- --rounds 5 --messages 100000
//! cargo bench -p ruststream-nats --bench throughput -- --quick --rounds 1   # a smoke run
//! cargo bench -p ruststream-nats --bench throughput -- --scenario js-ack --side ours
//! cargo bench -p ruststream-nats --bench throughput -- --telemetry      # spans and metrics on
//! cargo bench -p ruststream-nats --bench throughput -- --metrics-only   # metrics on, no spans
//! cargo bench -p ruststream-nats --bench throughput -- --help
//! ```
//!
//! The program starts its own nats-server (`ruststream_test_server`), and for each scenario
//! runs the raw async-nats loop and the RustStream service doing the same work (decode a
//! 512-byte JSON payload into the same struct, count it, settle it), interleaved round by round
//! and counterbalanced (raw, ours, ours, raw, raw, ours, ...). It prints markdown tables:
//! messages per second (median of the rounds, and the spread min–max), the ratio
//! RustStream / raw of the medians, and the heap allocations per message in the measured window
//! (a counting global allocator; the publisher runs on a thread whose allocations are not
//! counted); messages lost in the unthrottled burst; latency percentiles.
//!
//! Layout: `args` (the command line), `placement` (`--placement`: the server's and the bench's
//! CPUs), `alloc` (the counting allocator), `payload` (the order
//! and the receipts), `counter` (what both sides call per message), `publish` (publishers and
//! stream filling), `handlers` (the RustStream side), `report` (the round runner, statistics,
//! tables), `scenarios/` (one module per scenario). `docs/benchmarks.md` says what each number
//! covers and shows a run.

mod alloc;
mod args;
mod counter;
mod handlers;
mod payload;
mod placement;
mod publish;
mod report;
mod scenarios;

use std::num::NonZeroUsize;

use async_nats::jetstream;
use clap::Parser;
use ruststream_test_server::NatsServer;

use crate::args::{Args, Scenario};
use crate::report::{LATENCY_HEADER, THROUGHPUT_HEADER};
use crate::scenarios::Bench;

#[global_allocator]
static GLOBAL: alloc::Counting = alloc::Counting;

fn main() {
    let args = Args::parse();
    payload::start_clock();
    if let Some(capacity) = args.subscription_capacity {
        let capacity = usize::try_from(capacity).expect("a capacity this machine can address");
        let _ = handlers::SUBSCRIPTION_CAPACITY.set(capacity);
    }
    if args.raw_content_type {
        handlers::RAW_CONTENT_TYPE.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    if args.raw_against_raw {
        report::RAW_AGAINST_RAW.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    if let Some(ns) = args.raw_extra_ns {
        report::EXTRA_NS.store(ns, std::sync::atomic::Ordering::Relaxed);
    }
    // Logs only when asked (`RUST_LOG=ruststream_nats=debug`): a subscriber costs per message.
    if std::env::var_os("RUST_LOG").is_some() {
        ruststream::app::cli::install_tracing();
    } else if args.telemetry {
        // What the generated `main` installs (`RUST_LOG` unset: `info`), writing to nowhere.
        let format = ruststream::app::cli::LogFormat::Human;
        tracing::dispatcher::set_global_default(ruststream::app::cli::log_subscriber(
            format,
            std::io::sink,
            false,
        ))
        .expect("no subscriber installed yet");
    }
    if args.telemetry() {
        ruststream::telemetry::install_prometheus().expect("the recorder installs");
        eprintln!("telemetry on: metrics in the Prometheus recorder, spans with --telemetry");
    }
    // A server of our own, unless one is given (profiling reuses its streams between runs),
    // started on its CPUs before the bench takes its own (`placement.rs`).
    let placed = placement::cpus(args.placement);
    if let Some(cpus) = &placed
        && args.url.is_none()
    {
        placement::pin(&cpus.server);
    }
    let server = args.url.is_none().then(NatsServer::start);
    if let Some(cpus) = &placed {
        placement::pin(&cpus.bench);
        match &server {
            Some(_) => eprintln!(
                "placement {:?}: the server on CPUs {:?}, the bench on {:?}",
                args.placement, cpus.server, cpus.bench
            ),
            None => eprintln!(
                "placement {:?}: the bench on CPUs {:?}; the server given by --url runs where it was put (`taskset -acp {:?} <pid>` places it)",
                args.placement, cpus.bench, cpus.server
            ),
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    // `--messages` as the scenarios count it (`--quick` takes a tenth).
    #[cfg(tokio_unstable)]
    let messages = args.messages.map(|n| args.messages(n));
    runtime.block_on(run(args, server.as_ref()));
    #[cfg(tokio_unstable)]
    report::runtime_counters(&runtime.metrics(), messages);
}

async fn run(args: Args, server: Option<&NatsServer>) {
    let url = args
        .url
        .clone()
        .or_else(|| server.map(NatsServer::url))
        .expect("a server");
    let client = async_nats::connect(&url).await.expect("connects");
    let js = jetstream::new(client.clone());
    let bench = Bench {
        args: &args,
        url: &url,
        js: &js,
    };

    eprintln!(
        "{}; {} rounds per side, interleaved; {} CPUs for the bench",
        NatsServer::version(),
        args.rounds,
        std::thread::available_parallelism().map_or(0, NonZeroUsize::get)
    );
    if let Some(capacity) = handlers::SUBSCRIPTION_CAPACITY.get() {
        eprintln!("subscription capacity {capacity} on both sides (async-nats's default: 65536)");
    }
    if args.raw_content_type {
        eprintln!("the raw side's outputs carry `content-type: application/json`, as RustStream's");
    }
    if args.raw_against_raw {
        eprintln!("raw against raw: the RustStream column runs the raw side (an A/A run)");
    }

    let mut rows = Vec::new();
    if args.runs(Scenario::Core) {
        rows.push(scenarios::subscribe::throughput(&bench).await);
    }
    rows.extend(scenarios::jetstream::throughput(&bench).await);
    if args.runs(Scenario::Request) {
        rows.push(scenarios::request::run(&bench).await);
    }
    if args.runs(Scenario::RequestMany) {
        rows.push(scenarios::request::run_many(&bench).await);
    }
    let io_rows = if args.runs(Scenario::JsIo) {
        scenarios::jetstream::io(&bench).await
    } else {
        Vec::new()
    };
    let burst = if args.runs(Scenario::Burst) {
        Some(scenarios::burst::run(&bench).await)
    } else {
        None
    };
    let middleware = if args.runs(Scenario::Middleware) {
        Some(scenarios::subscribe::middleware(&bench).await)
    } else {
        None
    };
    let latency_rows = if args.runs(Scenario::Latency) {
        scenarios::latency::run(&bench).await
    } else {
        Vec::new()
    };
    drop(client);

    println!();
    if !rows.is_empty() || !io_rows.is_empty() {
        println!("{THROUGHPUT_HEADER}");
        for row in rows.iter().chain(io_rows.iter().map(|(_, row)| row)) {
            row.print();
        }
    }
    if let Some((_, single)) = io_rows.iter().find(|(c, _)| *c == 1)
        && let Some((best_c, best)) = io_rows
            .iter()
            .filter(|(c, _)| *c > 1)
            .max_by(|a, b| a.1.ours_median().total_cmp(&b.1.ours_median()))
        && !single.rounds.ours.is_empty()
    {
        println!();
        println!(
            "1 ms I/O: the best concurrency is {best_c}: {:.1}× the single-flight rate.",
            best.ours_median() / single.ours_median()
        );
    }
    if let Some(burst) = burst {
        println!();
        burst.print();
    }
    if let Some(middleware) = middleware {
        println!();
        middleware.print();
    }
    if !latency_rows.is_empty() {
        println!();
        println!("{LATENCY_HEADER}");
        for row in &latency_rows {
            row.print();
        }
    }
}
