//! What the scenarios publish: the 512-byte order, and the receipts handlers publish.

use std::sync::OnceLock;
use std::time::Instant;

use bytes::Bytes;
use ruststream::{HandlerOutcome, Outgoing};
use serde::{Deserialize, Serialize};

/// The message every scenario publishes: 512 bytes of JSON, decoded into this struct by the raw
/// loop and by the RustStream handler alike.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Order {
    pub id: u64,
    /// When it was published, in nanoseconds since the program started (latency scenarios).
    pub sent_ns: u64,
    customer: String,
    email: String,
    currency: String,
    amount_cents: u64,
    items: Vec<Item>,
    note: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Item {
    sku: String,
    quantity: u32,
    price_cents: u64,
}

pub const PAYLOAD_BYTES: usize = 512;

/// The id of the burst scenario's end marker (see `scenarios::burst`); no order has it.
pub const SENTINEL_ID: u64 = u64::MAX;

pub fn order(id: u64, sent_ns: u64) -> Order {
    Order {
        id,
        sent_ns,
        customer: "Ada Lovelace".to_owned(),
        email: "ada.lovelace@example.com".to_owned(),
        currency: "EUR".to_owned(),
        amount_cents: 129_900,
        items: vec![
            Item {
                sku: "ANALYTICAL-ENGINE-001".to_owned(),
                quantity: 1,
                price_cents: 99_900,
            },
            Item {
                sku: "PUNCHED-CARDS-500".to_owned(),
                quantity: 3,
                price_cents: 10_000,
            },
        ],
        note: String::new(),
    }
}

/// `order(id, sent_ns)` as exactly [`PAYLOAD_BYTES`] of JSON (the note pads it).
/// How many keys the ordering-lanes scenario spreads its orders over.
pub const LANE_KEYS: u64 = 64;

/// The ordering key of order `id` in the lanes scenario: consecutive ids have different keys,
/// and each key has an order every [`LANE_KEYS`] ids.
pub fn lane_key(id: u64) -> u64 {
    id % LANE_KEYS
}

pub fn payload(id: u64, sent_ns: u64) -> Bytes {
    let mut value = order(id, sent_ns);
    let bare = serde_json::to_vec(&value).expect("encodes").len();
    value.note = "x".repeat(PAYLOAD_BYTES.saturating_sub(bare));
    let bytes = serde_json::to_vec(&value).expect("encodes");
    debug_assert_eq!(bytes.len(), PAYLOAD_BYTES);
    Bytes::from(bytes)
}

/// What a replying handler publishes per order: [`CoreReceipt`] or [`StoredReceipt`].
pub trait Receipt: Outgoing + 'static {
    fn for_order(order: &Order) -> Self;
}

/// What the reply scenario publishes per delivery (Core, nothing stores it).
#[derive(Debug, Serialize)]
pub struct CoreReceipt {
    id: u64,
    accepted: bool,
}

impl Outgoing for CoreReceipt {
    const SUBJECT: &'static str = "bench.receipts";
}

impl Receipt for CoreReceipt {
    fn for_order(order: &Order) -> Self {
        Self {
            id: order.id,
            accepted: true,
        }
    }
}

/// What the confirmed reply scenario publishes per delivery: a stream stores its subject.
#[derive(Debug, Serialize)]
pub struct StoredReceipt {
    id: u64,
    accepted: bool,
}

impl Outgoing for StoredReceipt {
    const SUBJECT: &'static str = "bench.stored-receipts";
}

impl Receipt for StoredReceipt {
    fn for_order(order: &Order) -> Self {
        Self {
            id: order.id,
            accepted: true,
        }
    }
}

/// The stream storing [`StoredReceipt`]s.
pub const RECEIPTS_STREAM: &str = "BENCH_RECEIPTS";

/// What the request/reply responder publishes as an event besides the response.
#[derive(Debug, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "bench.rpc.answered")]
pub struct Answered {
    pub id: u64,
    pub accepted: bool,
}

/// The request/reply responder: answers each order's request with a receipt.
#[ruststream::subscriber("bench.rpc", reply)]
pub async fn answer(order: &Order) -> Result<Answered, HandlerOutcome> {
    Ok(Answered {
        id: order.id,
        accepted: true,
    })
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Starts the clock of [`now_ns`].
pub fn start_clock() {
    let _ = epoch();
}

/// Nanoseconds since [`start_clock`]: the time stamp of the latency scenarios.
pub fn now_ns() -> u64 {
    u64::try_from(epoch().elapsed().as_nanos()).unwrap_or(u64::MAX)
}
