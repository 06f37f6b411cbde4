//! Latency, publish -> handler: orders published at a steady rate, each stamped with the time
//! it was published; the handler records the time it took to reach it (same process, same
//! clock). Core, and JetStream (published to the stream's subject, read by a durable consumer).

use crate::counter::{Counter, Record};
use crate::publish::{self, fill_stream, unique};
use crate::report::{LatencyRow, by_side};
use crate::scenarios::jetstream::{self, Consume, Work};
use crate::scenarios::{Bench, core_round};

const CORE: &str = "bench.latency";
const STREAM: &str = "BENCH_LATENCY";
const JS_SUBJECT: &str = "bench.js.latency";

/// Messages per second.
const RATE: u64 = 2_000;

pub async fn run(bench: &Bench<'_>) -> Vec<LatencyRow> {
    let n = bench
        .args
        .messages(6_000)
        .min(if bench.args.quick { 1_000 } else { u64::MAX });
    let mut rows = Vec::new();
    for (jetstream_model, name) in [(false, "Core"), (true, "JetStream")] {
        eprintln!("latency, {name}, {n} messages at {RATE}/s ...");
        let rounds = by_side(
            bench.args.rounds,
            &bench.args.sides(),
            |side, i| async move {
                let counter = Counter::new(n, Record::Latency);
                let url = bench.url.to_owned();
                if jetstream_model {
                    // A stream of its own per round, empty.
                    fill_stream(bench.js, STREAM, JS_SUBJECT, 0).await;
                    let consume = Consume {
                        stream: STREAM,
                        subject: JS_SUBJECT,
                        durable: unique(&format!("latency-{side:?}-{i}")),
                        work: Work::Ack,
                        concurrency: 1,
                    };
                    jetstream::round(bench.url, side, &consume, &counter, || {
                        Some(publish::paced(url, JS_SUBJECT, n, RATE))
                    })
                    .await;
                } else {
                    core_round(bench.url, CORE, side.into(), &counter, || {
                        publish::paced(url, CORE, n, RATE)
                    })
                    .await;
                }
                counter.latencies()
            },
        )
        .await;
        rows.push(LatencyRow {
            name,
            messages: n,
            rate: RATE,
            rounds,
        });
    }
    rows
}
