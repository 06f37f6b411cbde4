//! Rounds, statistics and the tables.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::args::Side;
use crate::counter::{Burst, Sample};

/// Runs `round` for each of `variants`, `rounds` times, interleaved and counterbalanced: the
/// even rounds in the order of `variants`, the odd ones in the reverse order (a, b, b, a, a,
/// b, ...), so that no variant always runs first or always right after another (a machine
/// that warms up or slows down within a pair, a server whose state grows round by round, would
/// otherwise favour one side every time). The results per variant, in the order of
/// `variants`, each variant's in the order they ran. The one round runner every scenario uses.
pub async fn interleaved<V, F, Fut, T>(rounds: u16, variants: &[V], mut round: F) -> Vec<Vec<T>>
where
    V: Copy,
    F: FnMut(V, u16) -> Fut,
    Fut: Future<Output = T>,
{
    let mut results: Vec<Vec<T>> = variants.iter().map(|_| Vec::new()).collect();
    for i in 0..rounds {
        for at in run_order(variants.len(), i) {
            results[at].push(round(variants[at], i).await);
        }
    }
    results
}

/// The order round `round` runs `count` variants in: as given on even rounds, reversed on odd
/// ones.
fn run_order(count: usize, round: u16) -> impl Iterator<Item = usize> {
    let reversed = round % 2 == 1;
    (0..count).map(move |at| if reversed { count - 1 - at } else { at })
}

/// The rounds of both sides of one scenario; a side not run (`--side`) has none.
pub struct Sides<T> {
    pub raw: Vec<T>,
    pub ours: Vec<T>,
}

/// `--raw-against-raw`: the RustStream column runs the raw side too.
pub static RAW_AGAINST_RAW: AtomicBool = AtomicBool::new(false);

/// `--raw-extra-ns`: the CPU raw's one-at-a-time responders add to each message in the
/// RustStream column's rounds of an A/A run ([`extra_work`]); 0 for none.
pub static EXTRA_NS: AtomicU64 = AtomicU64::new(0);

/// Whether the round running now is one of the RustStream column's (set by [`by_side`]; the
/// rounds run one at a time).
static SECOND_COLUMN: AtomicBool = AtomicBool::new(false);

/// [`interleaved`] over `sides` (both, or the one `--side` names). With
/// [`RAW_AGAINST_RAW`], the RustStream column's rounds run the raw side as well.
pub async fn by_side<F, Fut, T>(rounds: u16, sides: &[Side], mut round: F) -> Sides<T>
where
    F: FnMut(Side, u16) -> Fut,
    Fut: Future<Output = T>,
{
    let raw_twice = RAW_AGAINST_RAW.load(Ordering::Relaxed);
    let round = move |side, index| {
        SECOND_COLUMN.store(side == Side::Ours, Ordering::Relaxed);
        round(if raw_twice { Side::Raw } else { side }, index)
    };
    let mut results = interleaved(rounds, sides, round).await.into_iter();
    let mut raw = Vec::new();
    let mut ours = Vec::new();
    for &side in sides {
        let rounds = results.next().unwrap_or_default();
        match side {
            Side::Raw => raw = rounds,
            Side::Ours => ours = rounds,
        }
    }
    Sides { raw, ours }
}

/// What a raw one-at-a-time responder calls before it answers: a busy wait of
/// [`EXTRA_NS`] in the RustStream column's rounds (only ever set in an A/A run), nothing
/// otherwise. Read once per round (`extra_ns`), not per message.
pub fn extra_ns() -> u64 {
    if SECOND_COLUMN.load(Ordering::Relaxed) {
        EXTRA_NS.load(Ordering::Relaxed)
    } else {
        0
    }
}

/// Spends `ns` nanoseconds of CPU, without yielding (see [`extra_ns`]).
pub fn extra_work(ns: u64) {
    if ns == 0 {
        return;
    }
    let started = std::time::Instant::now();
    while started.elapsed() < std::time::Duration::from_nanos(ns) {
        std::hint::spin_loop();
    }
}

pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.is_empty() {
        f64::NAN
    } else if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

/// The RustStream / raw ratio of each pair of rounds (the two rounds of one round index, run
/// next to each other, in alternating order): what a drift of the machine over the run cancels
/// out of.
pub fn pair_ratios(raw: &[f64], ours: &[f64]) -> Vec<f64> {
    raw.iter()
        .zip(ours)
        .filter(|(raw, _)| **raw > 0.0)
        .map(|(raw, ours)| ours / raw)
        .collect()
}

/// The coverage the pair-ratio intervals aim for: at least this, as close to it as the number
/// of pairs allows.
const COVERAGE: f64 = 0.90;

/// A distribution-free confidence interval for the median of `values` (the sign test's): the
/// k-th smallest and the k-th largest value, with k the largest for which the interval still
/// covers the true median with probability at least [`COVERAGE`] (or k = 1, the smallest and
/// the largest, when even that covers less: then its coverage says so). `(low, high,
/// coverage)`; `None` for fewer than two values. It assumes only that the pairs are independent
/// and alike, not that their ratios are normally distributed: one slow round moves it by one
/// rank, not by its size.
pub fn median_interval(values: &[f64]) -> Option<(f64, f64, f64)> {
    let n = values.len();
    if n < 2 {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    // P(B <= j) for B ~ Binomial(n, 1/2), j = 0, 1, ...
    let mut below = Vec::with_capacity(n);
    let (mut term, mut sum) = (0.5_f64.powi(n as i32), 0.0);
    for j in 0..n {
        sum += term;
        below.push(sum);
        term *= (n - j) as f64 / (j + 1) as f64;
    }
    let coverage = |k: usize| 1.0 - 2.0 * below[k - 1];
    let mut k = 1;
    while k < n / 2 && coverage(k + 1) >= COVERAGE {
        k += 1;
    }
    Some((sorted[k - 1], sorted[n - k], coverage(k)))
}

/// `median [low, high]` of the pair ratios, with the interval's coverage, or `—`.
pub fn ratio_interval(raw: &[f64], ours: &[f64]) -> String {
    let ratios = pair_ratios(raw, ours);
    match median_interval(&ratios) {
        Some((low, high, coverage)) => format!(
            "{:.2} [{low:.2}, {high:.2}] {:.0} %",
            median(&ratios),
            coverage * 100.0
        ),
        None => "—".to_owned(),
    }
}

pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

pub fn rate(r: f64) -> String {
    if r >= 10_000.0 {
        format!("{:.1} k", r / 1000.0)
    } else {
        format!("{r:.0}")
    }
}

fn micros(ns: f64) -> String {
    format!("{:.0} µs", ns / 1000.0)
}

/// Median, slowest and fastest round's rate, and the median allocations per message.
#[derive(Debug, Clone, Copy)]
pub struct Stats {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub allocs: f64,
}

/// Each round's rate, in the order the rounds ran.
fn rates(samples: &[Sample]) -> Vec<f64> {
    samples.iter().map(|s| s.rate).collect()
}

impl Stats {
    pub fn of(samples: &[Sample]) -> Self {
        let rates = rates(samples);
        let allocs: Vec<f64> = samples.iter().map(|s| s.allocs).collect();
        Self {
            median: median(&rates),
            min: rates.iter().copied().fold(f64::INFINITY, f64::min),
            max: rates.iter().copied().fold(0.0, f64::max),
            allocs: median(&allocs),
        }
    }

    /// `median (min–max)`.
    fn spread(&self) -> String {
        format!(
            "{} ({}–{})",
            rate(self.median),
            rate(self.min),
            rate(self.max)
        )
    }
}

/// One row of the throughput table.
pub struct Row {
    pub scenario: String,
    pub rounds: Sides<Sample>,
}

pub const THROUGHPUT_HEADER: &str = "| scenario | raw async-nats msg/s, median (min–max) | RustStream msg/s, median (min–max) | RustStream / raw | pairs: RustStream / raw, median [interval] coverage | raw allocs/msg | RustStream allocs/msg |\n|---|---|---|---|---|---|---|";

impl Row {
    pub fn print(&self) {
        let both = !self.rounds.raw.is_empty() && !self.rounds.ours.is_empty();
        if both {
            let raw = Stats::of(&self.rounds.raw);
            let ours = Stats::of(&self.rounds.ours);
            println!(
                "| {} | {} | {} | {:.2} | {} | {:.1} | {:.1} |",
                self.scenario,
                raw.spread(),
                ours.spread(),
                ours.median / raw.median,
                ratio_interval(&rates(&self.rounds.raw), &rates(&self.rounds.ours)),
                raw.allocs,
                ours.allocs,
            );
            return;
        }
        // One side only (profiling): print what there is.
        for (side, samples) in [("raw", &self.rounds.raw), ("RustStream", &self.rounds.ours)] {
            if !samples.is_empty() {
                let stats = Stats::of(samples);
                println!(
                    "| {} [{side}] | {} | allocs/msg {:.1} |",
                    self.scenario,
                    stats.spread(),
                    stats.allocs
                );
            }
        }
    }

    pub fn ours_median(&self) -> f64 {
        Stats::of(&self.rounds.ours).median
    }
}

/// The middleware row: RustStream without layers and with one no-op layer, and raw for scale.
pub struct MiddlewareRow {
    pub scenario: String,
    pub raw: Vec<Sample>,
    pub none: Vec<Sample>,
    pub noop: Vec<Sample>,
}

impl MiddlewareRow {
    pub fn print(&self) {
        println!(
            "| scenario | raw async-nats msg/s | RustStream, no layer | RustStream, one no-op layer | one layer / none | allocs/msg raw, none, one layer |"
        );
        println!("|---|---|---|---|---|---|");
        let fmt = |samples: &[Sample]| {
            if samples.is_empty() {
                ("—".to_owned(), f64::NAN, f64::NAN)
            } else {
                let stats = Stats::of(samples);
                (stats.spread(), stats.median, stats.allocs)
            }
        };
        let (raw, _, raw_allocs) = fmt(&self.raw);
        let (none, none_median, none_allocs) = fmt(&self.none);
        let (noop, noop_median, noop_allocs) = fmt(&self.noop);
        println!(
            "| {} | {raw} | {none} | {noop} | {:.2} | {raw_allocs:.1}, {none_allocs:.1}, {noop_allocs:.1} |",
            self.scenario,
            noop_median / none_median,
        );
    }
}

/// The burst scenario's rounds.
pub struct BurstRow {
    pub scenario: String,
    pub rounds: Sides<Burst>,
}

impl BurstRow {
    pub fn print(&self) {
        println!(
            "| burst | side | lost per round | rounds with a loss | median lost | received msg/s, median (min–max) |"
        );
        println!("|---|---|---|---|---|---|");
        for (side, rounds) in [("raw", &self.rounds.raw), ("RustStream", &self.rounds.ours)] {
            if rounds.is_empty() {
                continue;
            }
            let lost: Vec<String> = rounds.iter().map(|r| r.lost.to_string()).collect();
            let with_loss = rounds.iter().filter(|r| r.lost > 0).count();
            let lost_f: Vec<f64> = rounds.iter().map(|r| r.lost as f64).collect();
            let rates: Vec<Sample> = rounds
                .iter()
                .map(|r| Sample {
                    rate: r.rate,
                    allocs: 0.0,
                })
                .collect();
            println!(
                "| {} | {side} | {} | {with_loss} of {} | {:.0} | {} |",
                self.scenario,
                lost.join(", "),
                rounds.len(),
                median(&lost_f),
                Stats::of(&rates).spread(),
            );
        }
    }
}

/// One row of the latency table: each round's sorted latencies, per side.
pub struct LatencyRow {
    pub name: &'static str,
    pub messages: u64,
    pub rate: u64,
    pub rounds: Sides<Vec<u64>>,
}

pub const LATENCY_HEADER: &str = "| latency, publish → handler | rate | raw p50 | raw p99 | RustStream p50 | RustStream p99 | pairs: p50 RustStream / raw, median [interval] coverage |\n|---|---|---|---|---|---|---|";

impl LatencyRow {
    pub fn print(&self) {
        // Each round's percentile `q`, in the order the rounds ran.
        let per_round = |rounds: &[Vec<u64>], q: f64| -> Vec<f64> {
            rounds.iter().map(|r| percentile(r, q) as f64).collect()
        };
        // The median over the rounds of each round's percentile.
        let p = |rounds: &[Vec<u64>], q: f64| {
            let per_round = per_round(rounds, q);
            if per_round.is_empty() {
                "—".to_owned()
            } else {
                micros(median(&per_round))
            }
        };
        println!(
            "| {} ({} msgs) | {}/s | {} | {} | {} | {} | {} |",
            self.name,
            self.messages,
            self.rate,
            p(&self.rounds.raw, 50.0),
            p(&self.rounds.raw, 99.0),
            p(&self.rounds.ours, 50.0),
            p(&self.rounds.ours, 99.0),
            ratio_interval(
                &per_round(&self.rounds.raw, 50.0),
                &per_round(&self.rounds.ours, 50.0)
            ),
        );
    }
}

/// What the runtime's workers did over the whole run, per message when `--messages` was given:
/// wake-ups, tasks scheduled, stolen and scheduled from outside, busy time. Read with one
/// `--scenario` and one `--side`: it counts everything the process ran. Built only with
/// `RUSTFLAGS="--cfg tokio_unstable"` (docs/benchmarks.md, "Profiling").
#[cfg(tokio_unstable)]
pub fn runtime_counters(metrics: &tokio::runtime::RuntimeMetrics, messages: Option<u64>) {
    let workers = metrics.num_workers();
    let sum = |count: &dyn Fn(usize) -> u64| (0..workers).map(count).sum::<u64>();
    let parks = sum(&|w| metrics.worker_park_count(w));
    let scheduled = sum(&|w| metrics.worker_local_schedule_count(w));
    let steals = sum(&|w| metrics.worker_steal_count(w));
    let busy: std::time::Duration = (0..workers)
        .map(|w| metrics.worker_total_busy_duration(w))
        .sum();
    eprintln!(
        "runtime counters: {workers} workers; parks {parks}, local schedules {scheduled}, steals {steals}, remote schedules {}, forced yields {}, busy {busy:?}",
        metrics.remote_schedule_count(),
        metrics.budget_forced_yield_count(),
    );
    for w in 0..workers {
        eprintln!(
            "  worker {w}: polls {}, parks {}, local schedules {}, steals {}, busy {:?}",
            metrics.worker_poll_count(w),
            metrics.worker_park_count(w),
            metrics.worker_local_schedule_count(w),
            metrics.worker_steal_count(w),
            metrics.worker_total_busy_duration(w),
        );
    }
    if let Some(n) = messages.filter(|&n| n > 0) {
        let per = |count: u64| count as f64 / n as f64;
        eprintln!(
            "  per message ({n}): parks {:.2}, local schedules {:.2}, busy {:.2} us",
            per(parks),
            per(scheduled),
            busy.as_secs_f64() * 1e6 / n as f64,
        );
    }
}
