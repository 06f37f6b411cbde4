//! Core subscribe, handler acks: a publisher on a second connection publishes the orders, never
//! more than 4 096 ahead of the subscriber (so that no side loses one); the subscriber decodes
//! and counts each. Also with one no-op middleware layer (`--scenario middleware`).

use crate::args::Side;
use crate::counter::{Record, Sample};
use crate::publish::Pace;
use crate::report::{MiddlewareRow, Row, by_side, interleaved};
use crate::scenarios::{Bench, CoreSide, core_counted};

const SUBJECT: &str = "bench.core";

async fn round(url: &str, side: CoreSide, n: u64) -> Sample {
    core_counted(url, SUBJECT, side, n, Record::Window, Pace::Windowed)
        .await
        .result()
}

/// Raw against RustStream.
pub async fn throughput(bench: &Bench<'_>) -> Row {
    let n = bench.args.messages(200_000);
    eprintln!("Core subscribe, {n} messages ...");
    let rounds = by_side(bench.args.rounds, &bench.args.sides(), |side, _| {
        round(bench.url, side.into(), n)
    })
    .await;
    Row {
        scenario: format!("Core subscribe, handler acks ({n} msgs)"),
        rounds,
    }
}

/// RustStream with one no-op layer against none, raw for scale, interleaved.
pub async fn middleware(bench: &Bench<'_>) -> MiddlewareRow {
    let n = bench.args.messages(200_000);
    eprintln!("Core subscribe, no middleware and one no-op layer, {n} messages ...");
    let mut variants = Vec::new();
    if bench.args.sides().contains(&Side::Raw) {
        variants.push(CoreSide::Raw);
    }
    if bench.args.sides().contains(&Side::Ours) {
        variants.extend([CoreSide::Ours { layers: 0 }, CoreSide::Ours { layers: 1 }]);
    }
    let results = interleaved(bench.args.rounds, &variants, |side, _| {
        round(bench.url, side, n)
    })
    .await;
    let mut row = MiddlewareRow {
        scenario: format!("Core subscribe, handler acks ({n} msgs)"),
        raw: Vec::new(),
        none: Vec::new(),
        noop: Vec::new(),
    };
    for (side, samples) in variants.into_iter().zip(results) {
        match side {
            CoreSide::Raw => row.raw = samples,
            CoreSide::Ours { layers: 0 } => row.none = samples,
            CoreSide::Ours { .. } => row.noop = samples,
        }
    }
    row
}
