//! The command line of the `main` that `#[ruststream::app]` writes: `run` (the default) and
//! `describe`.

use std::fmt::Write as _;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::app::App;
use crate::registration::RegistrationInfo;
use crate::settle::DeliveryModel;

#[derive(Debug, Parser)]
#[command(about = "A RustStream service")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Connect and handle messages until SIGINT or SIGTERM (the default).
    Run,
    /// Print every registration: subject, model, stream and consumer, ack_wait, cap, dead
    /// letter, retry target.
    Describe,
}

/// The generated `main`: parses the command line, installs logging and runs the app.
pub fn main<A: App, F: FnOnce() -> A>(app: F) -> ExitCode {
    let cli = Cli::parse();
    match cli.command.unwrap_or(Command::Run) {
        Command::Describe => {
            print!("{}", describe(&app()));
            ExitCode::SUCCESS
        }
        Command::Run => {
            install_tracing();
            let runtime = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(err) => {
                    eprintln!("error: cannot start the tokio runtime: {err}");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(async { app().run().await }) {
                Ok(()) => ExitCode::SUCCESS,
                Err(err) => {
                    tracing::error!(%err, "the app stopped with an error");
                    eprintln!("error: {err}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// Installs a `tracing` subscriber reading `RUST_LOG`, `info` when unset. Does nothing when one
/// is already installed.
pub fn install_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).try_init();
}

/// The `describe` table of `app`.
pub fn describe<A: App>(app: &A) -> String {
    let info = app.info();
    let mut out = String::new();
    let _ = writeln!(out, "{} {}", info.name(), info.version());
    for (kind, address) in app.brokers() {
        let _ = writeln!(out, "broker: {kind} at {address}");
    }
    let header = [
        "handler",
        "subject",
        "model",
        "stream/consumer",
        "ack_wait",
        "cap",
        "dead letter",
        "retry to",
        "replies",
    ];
    let rows: Vec<[String; 9]> = app.registrations().iter().map(row).collect();
    let mut widths = header.map(str::len);
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: &[&str]| {
        let mut l = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i > 0 {
                l.push_str("  ");
            }
            let _ = write!(l, "{cell:<w$}");
        }
        l.trim_end().to_owned()
    };
    let _ = writeln!(out, "{}", line(&header));
    for r in &rows {
        let cells: Vec<&str> = r.iter().map(String::as_str).collect();
        let _ = writeln!(out, "{}", line(&cells));
    }
    out
}

/// The ack_wait cell, with the handler's timeout and automatic progress when declared.
fn ack_wait_cell(r: &RegistrationInfo) -> String {
    let mut cell = r
        .descriptor
        .ack_wait
        .map_or_else(|| "-".to_owned(), |w| format!("{w:?}"));
    if let Some(deadline) = r.policy.progress_until {
        let _ = write!(cell, ", progress up to {deadline:?}");
    }
    if let Some(limit) = r.policy.handler_timeout {
        let _ = write!(cell, ", timeout {limit:?}");
    }
    if r.policy.confirm_acks {
        cell.push_str(", confirmed acks");
    }
    cell
}

fn row(r: &RegistrationInfo) -> [String; 9] {
    let d = &r.descriptor;
    let model = match (d.model, d.wildcard) {
        (DeliveryModel::JetStream, _) => "jetstream".to_owned(),
        (DeliveryModel::Core, true) => "core (pattern)".to_owned(),
        (DeliveryModel::Core, false) => "core".to_owned(),
    };
    let model = match (&d.queue_group, r.batch) {
        (Some(q), _) => format!("{model}, queue {q}"),
        (None, true) => format!("{model}, batch"),
        (None, false) => model,
    };
    let consumer = match (&d.stream, &d.consumer) {
        (Some(s), Some(c)) => format!("{s}/{c}"),
        (Some(s), None) => format!("{s}/(ephemeral)"),
        _ => "-".to_owned(),
    };
    let dash = || "-".to_owned();
    [
        r.name.clone(),
        d.subject.clone(),
        model,
        consumer,
        ack_wait_cell(r),
        r.policy
            .max_attempts
            .map_or_else(|| "none".to_owned(), |n| n.to_string()),
        r.policy.dead_letter.clone().unwrap_or_else(dash),
        match d.model {
            DeliveryModel::JetStream => "(redelivered)".to_owned(),
            DeliveryModel::Core => r.copy_target().map_or_else(dash, str::to_owned),
        },
        if r.publishes.is_empty() {
            dash()
        } else {
            r.publishes.join(", ")
        },
    ]
}
