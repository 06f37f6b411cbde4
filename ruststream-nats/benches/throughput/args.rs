//! The command line.

use clap::{Parser, ValueEnum};

/// RustStream against raw async-nats on one nats-server, interleaved round by round.
/// `docs/benchmarks.md` says what each number covers.
#[derive(Debug, Clone, Parser)]
#[command(name = "throughput")]
pub struct Args {
    /// Rounds per side (each scenario runs raw, ours, then ours, raw, and so on).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..))]
    pub rounds: u16,
    /// Messages per round (each scenario's default otherwise).
    #[arg(long)]
    pub messages: Option<u64>,
    /// A tenth of the messages (at least 100): a smoke run.
    #[arg(long)]
    pub quick: bool,
    /// The scenarios to run (repeatable); all of them when none is given.
    #[arg(long = "scenario", value_enum)]
    pub scenarios: Vec<Scenario>,
    /// One side only (profiling).
    #[arg(long, value_enum)]
    pub side: Option<Side>,
    /// The concurrency levels of the 1 ms I/O scenario besides 1.
    #[arg(long, value_delimiter = ',', default_values_t = [16, 32, 64])]
    pub concurrency: Vec<usize>,
    /// A running server to use instead of starting one (profiling reuses its streams).
    #[arg(long)]
    pub url: Option<String>,
    /// Spans and metrics on as the generated `main` has them: its log subscriber
    /// (`ruststream::app::cli::log_subscriber`, `RUST_LOG` unset: `info`, human lines, writing
    /// to nowhere) and the Prometheus recorder of `run --metrics-addr`.
    #[arg(long, conflicts_with = "metrics_only")]
    pub telemetry: bool,
    /// Metrics on, no span subscriber.
    #[arg(long)]
    pub metrics_only: bool,
    /// How many Core messages the client holds per subscription, on both sides (raw:
    /// `ConnectOptions::subscription_capacity`; RustStream: the broker's
    /// `.subscription_capacity(..)`); async-nats's default (65 536) otherwise.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub subscription_capacity: Option<u64>,
    /// The raw side labels its outputs as RustStream does: the header
    /// `content-type: application/json` on the receipts of `js-reply`, `js-reply-stored` and
    /// `request` (the event and the response), so both sides put the same bytes on the wire.
    /// Unlabelled otherwise, as a hand-written loop usually is.
    #[arg(long)]
    pub raw_content_type: bool,
    /// Both columns run the raw side (an A/A run): the ratio printed is then what the harness
    /// reads between two runs of the same code, the margin within which a RustStream / raw
    /// ratio of the same scenario and rounds says nothing.
    #[arg(long)]
    pub raw_against_raw: bool,
    /// A calibration for the one-at-a-time rows (`request`, `js-reply-stored`), in an A/A run
    /// only: in the RustStream column's rounds, raw's responder spends this many nanoseconds
    /// of CPU (a busy wait) on each message before it answers. The ratio printed is then what
    /// that much more work on the path reads as.
    #[arg(long, requires = "raw_against_raw", value_parser = clap::value_parser!(u64).range(1..))]
    pub raw_extra_ns: Option<u64>,
    /// Which CPUs the server and the bench run on (Linux). `free`: wherever the scheduler puts
    /// them. `apart`: the server on the last CPU, the bench (both sides) on the others, as a
    /// service and its server on hosts of their own. `shared`: both on the first CPU, so the
    /// rate is what one CPU gets through and every microsecond of either side's work shows.
    /// With `--url` only the bench is placed (place the server with `taskset -acp`).
    #[arg(long, value_enum, default_value_t = Placement::Free)]
    pub placement: Placement,
    /// Passed by `cargo bench` to every bench target; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// Core subscribe, the publisher kept within 4 096 messages of the subscriber.
    Core,
    /// 200 000 Core messages as fast as the publisher can: messages lost per side.
    Burst,
    /// Core with one no-op middleware layer against none.
    Middleware,
    /// JetStream pull, ack each.
    JsAck,
    /// JetStream batch handlers of 10 and 100, ack each message.
    JsBatch,
    /// JetStream, a Core publish per delivery.
    JsReply,
    /// JetStream, a confirmed publish to a stream per delivery.
    JsReplyStored,
    /// JetStream, each delivery's key claimed in a key-value bucket before the handler runs
    /// and recorded after its acknowledgement (`.idempotent_by(..)`).
    JsIdempotent,
    /// JetStream with 1 ms of I/O per message, 16 at once, each key's messages in order
    /// (ordering lanes: `.by_key(..)` against worker tasks per key written by hand).
    JsLanes,
    /// Request/reply round trips, one at a time.
    Request,
    /// Request/reply with 32 requests in flight (32 requesters, each one at a time).
    RequestMany,
    /// JetStream with 1 ms of I/O per message, at several concurrencies.
    JsIo,
    /// Publish -> handler latency at 2 000 msg/s, Core and JetStream.
    Latency,
}

/// Where the server and the bench run (`--placement`; `placement.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Placement {
    /// Wherever the scheduler puts them.
    Free,
    /// The server on the last CPU, the bench on the others.
    Apart,
    /// Both on the first CPU.
    Shared,
}

/// Which implementation a round runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Side {
    /// The async-nats loop a service would write by hand.
    Raw,
    /// The RustStream service.
    Ours,
}

impl Args {
    pub fn runs(&self, scenario: Scenario) -> bool {
        self.scenarios.is_empty() || self.scenarios.contains(&scenario)
    }

    /// `default` messages, or `--messages`, a tenth with `--quick`.
    pub fn messages(&self, default: u64) -> u64 {
        let n = self.messages.unwrap_or(default);
        if self.quick { (n / 10).max(100) } else { n }
    }

    /// The sides to run: both, or the one `--side` names.
    pub fn sides(&self) -> Vec<Side> {
        match self.side {
            Some(side) => vec![side],
            None => vec![Side::Raw, Side::Ours],
        }
    }

    pub fn telemetry(&self) -> bool {
        self.telemetry || self.metrics_only
    }
}
