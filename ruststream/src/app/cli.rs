//! The command line of the `main` that `#[ruststream::app]` writes: `run` (the default),
//! `check` and `describe`.
//!
//! Settings an operator changes per deployment follow one order: the command-line flag, else
//! the environment variable, else what the code says.
//!
//! | setting | flag | environment | default |
//! | --- | --- | --- | --- |
//! | broker URL | `run --url URL`, `check --url URL` | `NATS_URL` | the URL in `app()` |
//! | embedded NATS | `run --embedded` | `RUSTSTREAM_EMBEDDED=1` | off |
//! | log filter | | `RUST_LOG` | `info` |
//! | log format | `--log-format human\|json` | `RUSTSTREAM_LOG_FORMAT` | `human` |
//! | metrics and health | `run --metrics-addr HOST:PORT` | `RUSTSTREAM_METRICS_ADDR` | not served |
//! | drain timeout | `run --drain-timeout SECONDS` | `RUSTSTREAM_DRAIN_TIMEOUT` | the app's `.drain_timeout(..)`, 30 s |

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, CommandFactory as _, FromArgMatches as _, Parser, Subcommand};

use crate::app::App;
use crate::broker::{BrokerUrl, Embedded, Env, InputEnded};

pub use super::describe::{describe, describe_json};

/// The environment variable `run --url` overrides.
pub const URL_ENV: &str = "NATS_URL";
/// The environment variable that turns on `run --embedded`.
pub const EMBEDDED_ENV: &str = "RUSTSTREAM_EMBEDDED";
/// The environment variable `run --metrics-addr` overrides.
pub const METRICS_ADDR_ENV: &str = "RUSTSTREAM_METRICS_ADDR";
/// The environment variable `run --drain-timeout` overrides.
pub const DRAIN_TIMEOUT_ENV: &str = "RUSTSTREAM_DRAIN_TIMEOUT";
/// The environment variable `--log-format` overrides.
pub const LOG_FORMAT_ENV: &str = "RUSTSTREAM_LOG_FORMAT";

const SETTINGS_HELP: &str = "\
Settings (a flag overrides the environment, which overrides the code):
  run --url URL    NATS_URL               the broker URL (else the URL in the app's code)
  run --embedded   RUSTSTREAM_EMBEDDED=1  the embedded NATS: in the process, nothing persisted
  run --metrics-addr HOST:PORT
                   RUSTSTREAM_METRICS_ADDR  serve /metrics (Prometheus), /healthz and /readyz
  run --drain-timeout SECONDS
                   RUSTSTREAM_DRAIN_TIMEOUT  how long a stop waits for handlers in flight
  --log-format human|json
                   RUSTSTREAM_LOG_FORMAT  log lines for people (default) or JSON lines
                   RUST_LOG               the log filter (info by default)";

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Log lines for people (`human`, the default) or one JSON object a line (`json`);
    /// overrides RUSTSTREAM_LOG_FORMAT.
    #[arg(long, global = true, value_name = "FORMAT")]
    log_format: Option<String>,
}

#[derive(Subcommand)]
enum Command {
    /// Connect and handle messages until SIGINT or SIGTERM (the default).
    Run(RunArgs),
    /// Run every startup check (registrations offline, then streams and durable consumers on
    /// the server) without handling a message; exit non-zero with the error `run` would print.
    Check(UrlArg),
    /// Print every registration (subject, model, queue group, stream and consumer, ack_wait,
    /// cap, concurrency, dead letter and whether a declared stream stores it, retry target) and
    /// the declared streams.
    Describe {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Print the app's AsyncAPI 3.0 document (JSON): servers, a channel per subject read or
    /// published, the operations, the payload schemas the registrations declare.
    Asyncapi {
        /// Print YAML instead of JSON.
        #[arg(long)]
        yaml: bool,
        /// Print a standalone HTML page of the document, to open in a browser.
        #[arg(long, conflicts_with = "yaml")]
        html: bool,
        /// Write the document to FILE instead of printing it.
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: Option<PathBuf>,
    },
}

#[derive(Default, Args)]
struct UrlArg {
    /// The broker URL; overrides the NATS_URL environment variable and the URL in the code.
    #[arg(long, value_name = "URL")]
    url: Option<String>,
}

#[derive(Default, Args)]
struct RunArgs {
    #[command(flatten)]
    url: UrlArg,
    /// Run on the embedded NATS, inside the process (also RUSTSTREAM_EMBEDDED=1): for
    /// development, nothing persisted. Reads `publish SUBJECT JSON` lines on standard input.
    #[arg(long, conflicts_with = "url")]
    embedded: bool,
    /// With --embedded: publish the messages of FILE (one `publish SUBJECT JSON` a line) once the
    /// app started.
    #[arg(long, value_name = "FILE")]
    seed: Option<PathBuf>,
    /// Serve Prometheus metrics at /metrics, liveness at /healthz and readiness at /readyz on
    /// HOST:PORT (e.g. 0.0.0.0:9464); overrides RUSTSTREAM_METRICS_ADDR.
    #[arg(long, value_name = "HOST:PORT")]
    metrics_addr: Option<String>,
    /// How long a stop (SIGTERM, SIGINT) waits for handlers in flight, in seconds (fractions
    /// allowed); overrides RUSTSTREAM_DRAIN_TIMEOUT and the app's `.drain_timeout(..)`.
    #[arg(long, value_name = "SECONDS")]
    drain_timeout: Option<String>,
}

/// The generated `main`: parses the command line, installs logging and runs the app.
pub fn main<A: App, F: FnOnce() -> A>(app: F) -> ExitCode {
    main_from(app, std::env::args_os())
}

/// [`main`] with the command line given (the program's name first), for a `main` that reads
/// its arguments elsewhere, and for tests.
pub fn main_from<A, F, I, T>(app: F, args: I) -> ExitCode
where
    A: App,
    F: FnOnce() -> A,
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let app = app();
    let info = app.info().clone();
    // Leaked once, for the life of the process: clap wants `'static` names.
    let name: &'static str = Box::leak(info.name().to_owned().into_boxed_str());
    let version: &'static str = Box::leak(info.version().to_owned().into_boxed_str());
    let about: &'static str =
        Box::leak(format!("{name} {version}: a RustStream service").into_boxed_str());
    let command = Cli::command()
        .name(name)
        .version(version)
        .about(about)
        .after_help(SETTINGS_HELP);
    let cli = match Cli::from_arg_matches(&command.get_matches_from(args)) {
        Ok(cli) => cli,
        Err(err) => err.exit(),
    };
    let log_format = match log_format(cli.log_format) {
        Ok(format) => format,
        Err(message) => return fail(&message),
    };
    match cli
        .command
        .unwrap_or_else(|| Command::Run(RunArgs::default()))
    {
        Command::Describe { json } => {
            if json {
                println!("{}", describe_json(&app));
            } else {
                print!("{}", describe(&app));
            }
            ExitCode::SUCCESS
        }
        Command::Asyncapi { yaml, html, output } => {
            let document = crate::asyncapi::document(&app);
            let text = if html {
                crate::asyncapi::to_html(&document)
            } else if yaml {
                match crate::asyncapi::to_yaml(&document) {
                    Ok(text) => text,
                    Err(err) => return fail(&format!("cannot write the document as YAML: {err}")),
                }
            } else {
                match serde_json::to_string_pretty(&document) {
                    Ok(text) => text + "\n",
                    Err(err) => return fail(&format!("cannot write the document as JSON: {err}")),
                }
            };
            match output {
                None => print!("{text}"),
                Some(path) => {
                    if let Err(err) = std::fs::write(&path, text) {
                        return fail(&format!(
                            "cannot write the AsyncAPI document to {}: {err}",
                            path.display()
                        ));
                    }
                }
            }
            ExitCode::SUCCESS
        }
        Command::Check(url) => {
            install_tracing_as(log_format);
            let env = match url_env(Env::new(), url.url) {
                Ok(env) => env,
                Err(message) => return fail(&message),
            };
            let Some(runtime) = runtime() else {
                return ExitCode::FAILURE;
            };
            match runtime.block_on(app.check(env)) {
                Ok(done) => {
                    for line in done {
                        if line.starts_with("warning: ") {
                            println!("{line}");
                        } else {
                            println!("ok: {line}");
                        }
                    }
                    println!("{name} {version}: every startup check passed");
                    ExitCode::SUCCESS
                }
                Err(err) => fail(&err.to_string()),
            }
        }
        Command::Run(args) => {
            // The log lines, and the OTLP trace export the `OTEL_EXPORTER_OTLP_*` variables ask for.
            let export = super::otlp::install(log_format, &info);
            let embedded = args.embedded || env_flag(EMBEDDED_ENV);
            // Notified by the embedded NATS only, once its standard input ended.
            let input_ended = InputEnded::default();
            let env = if embedded {
                if args.url.url.is_some() {
                    return fail(
                        "`--url` and the embedded NATS exclude each other: unset RUSTSTREAM_EMBEDDED to connect to a server",
                    );
                }
                Env::new()
                    .with(Embedded {
                        seed: args.seed,
                        stdin: true,
                        input_ended: input_ended.clone(),
                    })
                    .with_observer(Arc::new(super::print_handled::PrintHandled))
            } else {
                if args.seed.is_some() {
                    return fail("`--seed FILE` publishes to the embedded NATS: add `--embedded`");
                }
                match url_env(Env::new(), args.url.url) {
                    Ok(env) => env,
                    Err(message) => return fail(&message),
                }
            };
            let metrics_addr = match metrics_addr(args.metrics_addr) {
                Ok(addr) => addr,
                Err(message) => return fail(&message),
            };
            let env = match drain_timeout(args.drain_timeout) {
                Ok(Some(timeout)) => env.with(crate::telemetry::DrainTimeout(timeout)),
                Ok(None) => env,
                Err(message) => return fail(&message),
            };
            let Some(runtime) = runtime() else {
                return ExitCode::FAILURE;
            };
            let run = async move {
                let (env, server) = match metrics_addr {
                    Some(addr) => {
                        let (env, server) = serve_operations(env, addr).await?;
                        (env, Some(server))
                    }
                    None => (env, None),
                };
                let running = app.start(env).await?;
                input_ended.started.notify_one();
                tokio::select! {
                    () = super::shutdown_signal() => {}
                    () = input_ended.ended.notified() => {}
                }
                let stopped = running.stop().await;
                // Served through the drain (`/readyz` says so), closed once the app stopped.
                if let Some(server) = server {
                    server.shutdown().await;
                }
                stopped
            };
            let ran = runtime.block_on(run);
            // The spans of the last deliveries sent before the process exits.
            if let Some(export) = export {
                export.finish();
            }
            match ran {
                Ok(()) => ExitCode::SUCCESS,
                // Printed once, here: `start` returns its error without logging it.
                Err(err) => fail(&err.to_string()),
            }
        }
    }
}

fn fail(message: &str) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::FAILURE
}

fn runtime() -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => Some(rt),
        Err(err) => {
            eprintln!("error: cannot start the tokio runtime: {err}");
            None
        }
    }
}

/// Whether environment variable `name` is set to something other than empty, `0` or `false`.
fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| {
        let v = v.trim();
        !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false")
    })
}

/// Adds the broker URL of `--url`, else of `NATS_URL`, to `env`; without either the brokers
/// use the URL in the code.
fn url_env(env: Env, flag: Option<String>) -> Result<Env, String> {
    Ok(match broker_url(flag)? {
        Some(url) => env.with(url),
        None => env,
    })
}

/// The broker URL of `--url`, else of `NATS_URL` (set and not blank).
fn broker_url(flag: Option<String>) -> Result<Option<BrokerUrl>, String> {
    if let Some(url) = flag {
        return Ok(Some(BrokerUrl { url, from: "--url" }));
    }
    match std::env::var(URL_ENV) {
        Ok(url) if !url.trim().is_empty() => Ok(Some(BrokerUrl { url, from: URL_ENV })),
        Ok(_) | Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(format!(
            "the {URL_ENV} environment variable is not valid UTF-8; set it to a URL such as nats://localhost:4222"
        )),
    }
}

/// The log format of `--log-format`, else of `RUSTSTREAM_LOG_FORMAT`, else human.
fn log_format(flag: Option<String>) -> Result<LogFormat, String> {
    let (value, from) = match flag {
        Some(value) => (value, "--log-format"),
        None => match std::env::var(LOG_FORMAT_ENV) {
            Ok(value) if !value.trim().is_empty() => (value, LOG_FORMAT_ENV),
            _ => return Ok(LogFormat::Human),
        },
    };
    match value.trim().to_ascii_lowercase().as_str() {
        "human" | "text" => Ok(LogFormat::Human),
        "json" => Ok(LogFormat::Json),
        other => Err(format!(
            "{from} is `{other}`, which is not a log format; use `human` or `json`"
        )),
    }
}

/// The address of `--metrics-addr`, else of `RUSTSTREAM_METRICS_ADDR`; none when neither is set.
fn metrics_addr(flag: Option<String>) -> Result<Option<std::net::SocketAddr>, String> {
    let (value, from) = match flag {
        Some(value) => (value, "--metrics-addr"),
        None => match std::env::var(METRICS_ADDR_ENV) {
            Ok(value) if !value.trim().is_empty() => (value, METRICS_ADDR_ENV),
            _ => return Ok(None),
        },
    };
    use std::net::ToSocketAddrs as _;
    match value.trim().to_socket_addrs().map(|mut a| a.next()) {
        Ok(Some(addr)) => Ok(Some(addr)),
        _ => Err(format!(
            "{from} is `{value}`, which is not an address to listen on; use HOST:PORT such as 127.0.0.1:9464 or 0.0.0.0:9464"
        )),
    }
}

/// The drain timeout of `--drain-timeout`, else of `RUSTSTREAM_DRAIN_TIMEOUT`; none when
/// neither is set.
fn drain_timeout(flag: Option<String>) -> Result<Option<std::time::Duration>, String> {
    let (value, from) = match flag {
        Some(value) => (value, "--drain-timeout"),
        None => match std::env::var(DRAIN_TIMEOUT_ENV) {
            Ok(value) if !value.trim().is_empty() => (value, DRAIN_TIMEOUT_ENV),
            _ => return Ok(None),
        },
    };
    match value.trim().parse::<f64>() {
        Ok(seconds) if (0.0..=86_400.0).contains(&seconds) => {
            Ok(Some(std::time::Duration::from_secs_f64(seconds)))
        }
        _ => Err(format!(
            "{from} is `{value}`, which is not a number of seconds; use a number such as 30 or 2.5 (at most 86400)"
        )),
    }
}

/// Installs the Prometheus recorder (feature `prometheus`), serves `/metrics`, `/healthz` and
/// `/readyz` on `addr`, and adds the [`Health`](crate::telemetry::Health) the app reports to
/// `env`.
async fn serve_operations(
    env: Env,
    addr: std::net::SocketAddr,
) -> Result<(Env, crate::telemetry::Server), crate::Error> {
    let health = crate::telemetry::Health::new();
    #[cfg(feature = "prometheus")]
    let render = Some(crate::telemetry::install_prometheus()?);
    #[cfg(not(feature = "prometheus"))]
    let render = None;
    let metrics = render.is_some();
    let server = crate::telemetry::serve(addr, health.clone(), render).await?;
    let at = server.local_addr();
    if metrics {
        tracing::info!(
            "metrics at http://{at}/metrics, liveness at http://{at}/healthz, readiness at http://{at}/readyz"
        );
    } else {
        tracing::info!(
            "liveness at http://{at}/healthz, readiness at http://{at}/readyz (metrics are not compiled in: enable the `prometheus` feature of ruststream)"
        );
    }
    Ok((env.with(health), server))
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// For people: one line per event, spans' fields before the message.
    #[default]
    Human,
    /// One JSON object a line, with the current span and its parents.
    Json,
}

/// Installs a `tracing` subscriber reading `RUST_LOG`, `info` when unset. Does nothing when one
/// is already installed.
pub fn install_tracing() {
    install_tracing_as(LogFormat::Human);
}

/// [`install_tracing`] writing `format`.
pub fn install_tracing_as(format: LogFormat) {
    use std::io::IsTerminal as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let colors = std::io::stdout().is_terminal();
    let _ = log_subscriber(format, std::io::stdout, colors).try_init();
}

/// The subscriber [`install_tracing_as`] installs, writing its lines to `writer`: `RUST_LOG`
/// (`info` when unset) and the `fmt` layer in `format`, with colors (ANSI escapes) when `colors`
/// (the generated `main`: when standard output is a terminal; a file or a pipe gets plain
/// text). The benchmark's `--telemetry` installs this one, writing to nowhere without colors.
pub fn log_subscriber<W>(format: LogFormat, writer: W, colors: bool) -> tracing::Dispatch
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    use tracing_subscriber::layer::SubscriberExt as _;
    // A global filter, not the `fmt` layer's own: the delivery span is then not made at all (a
    // per-layer filter keeps the registry's span and leaves only its formatting out).
    use super::subscriber::{fmt_layer, log_filter, not_the_delivery_span};
    tracing_subscriber::registry()
        .with(log_filter())
        .with(not_the_delivery_span())
        .with(fmt_layer(format, writer, colors))
        .into()
}
