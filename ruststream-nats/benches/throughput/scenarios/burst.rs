//! The unthrottled Core burst: a second connection publishes the orders as fast as it can,
//! nothing holds it back; a subscriber slower than the publisher fills async-nats's
//! subscription buffer (65 536 messages) and the client drops what does not fit (or the server
//! cuts a slow consumer off). Reported: messages lost per round, per side. An end marker sent
//! after the burst (again until it arrives) tells when every message has been handled or lost.

use crate::counter::{Burst, Record};
use crate::publish::Pace;
use crate::report::{BurstRow, by_side};
use crate::scenarios::{Bench, CoreSide, core_counted};

const SUBJECT: &str = "bench.burst";

async fn round(url: &str, side: CoreSide, n: u64) -> Burst {
    core_counted(url, SUBJECT, side, n, Record::Burst, Pace::Unthrottled)
        .await
        .burst_result()
}

pub async fn run(bench: &Bench<'_>) -> BurstRow {
    let n = bench.args.messages(200_000);
    eprintln!("Core burst, {n} messages unthrottled ...");
    let rounds = by_side(bench.args.rounds, &bench.args.sides(), |side, _| {
        round(bench.url, side.into(), n)
    })
    .await;
    BurstRow {
        scenario: format!("Core, {n} msgs unthrottled"),
        rounds,
    }
}
