//! The 512-byte order of `throughput.rs` in each codec: encode and decode, nanoseconds per
//! message and bytes on the wire.
//!
//! ```text
//! cargo bench -p ruststream-nats --all-features --bench codecs
//! cargo bench -p ruststream-nats --all-features --bench codecs -- --rounds 9 --messages 200000
//! ```
//!
//! Each round runs every codec one after the other (interleaved, so that a noisy neighbour
//! slows them alike); the table shows the median of the rounds and the ratio to JSON.

use std::hint::black_box;
use std::time::Instant;

use ruststream::codec::{Codec, Format, Proto};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Item {
    sku: String,
    quantity: u32,
    price_cents: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Order {
    id: u64,
    customer: String,
    email: String,
    items: Vec<Item>,
    note: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct PbItem {
    #[prost(string, tag = "1")]
    sku: String,
    #[prost(uint32, tag = "2")]
    quantity: u32,
    #[prost(uint64, tag = "3")]
    price_cents: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct PbOrder {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(string, tag = "2")]
    customer: String,
    #[prost(string, tag = "3")]
    email: String,
    #[prost(message, repeated, tag = "4")]
    items: Vec<PbItem>,
    #[prost(string, tag = "5")]
    note: String,
}

/// An order whose JSON is 512 bytes, as in `throughput.rs`.
fn order() -> Order {
    let mut o = Order {
        id: 1_234_567,
        customer: "Ada Lovelace".into(),
        email: "ada@example.com".into(),
        items: vec![
            Item {
                sku: "BOOK-ANALYTICAL-ENGINE".into(),
                quantity: 1,
                price_cents: 4_200,
            },
            Item {
                sku: "PUNCH-CARDS-100".into(),
                quantity: 3,
                price_cents: 990,
            },
        ],
        note: String::new(),
    };
    let len = serde_json::to_vec(&o).map_or(0, |v| v.len());
    o.note = "x".repeat(512usize.saturating_sub(len));
    o
}

fn proto(o: &Order) -> PbOrder {
    PbOrder {
        id: o.id,
        customer: o.customer.clone(),
        email: o.email.clone(),
        items: o
            .items
            .iter()
            .map(|i| PbItem {
                sku: i.sku.clone(),
                quantity: i.quantity,
                price_cents: i.price_cents,
            })
            .collect(),
        note: o.note.clone(),
    }
}

/// Nanoseconds per encode + decode of `messages` orders in `format`, and the payload size.
fn run(format: Format, messages: u32, order: &Order, pb: &Proto<PbOrder>) -> (f64, usize) {
    let started = Instant::now();
    let mut size = 0;
    for _ in 0..messages {
        if format == Format::Protobuf {
            let bytes = format.encode(black_box(pb)).expect("encodes");
            size = bytes.len();
            let back: Proto<PbOrder> = format.decode(black_box(&bytes)).expect("decodes");
            black_box(back);
        } else {
            let bytes = format.encode(black_box(order)).expect("encodes");
            size = bytes.len();
            let back: Order = format.decode(black_box(&bytes)).expect("decodes");
            black_box(back);
        }
    }
    (
        started.elapsed().as_nanos() as f64 / f64::from(messages),
        size,
    )
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn arg(name: &str, default: u32) -> u32 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let rounds = arg("--rounds", 5).max(1);
    let messages = arg("--messages", 50_000).max(1);
    let order = order();
    let pb = Proto(proto(&order));
    let formats = [
        Format::Json,
        Format::MessagePack,
        Format::Cbor,
        Format::Protobuf,
    ];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); formats.len()];
    let mut sizes = vec![0; formats.len()];
    for _ in 0..rounds {
        for (i, format) in formats.iter().enumerate() {
            let (ns, size) = run(*format, messages, &order, &pb);
            times[i].push(ns);
            sizes[i] = size;
        }
    }
    let medians: Vec<f64> = times.iter_mut().map(|t| median(t)).collect();
    println!("| codec | bytes | encode + decode, ns/msg (median of {rounds}) | / JSON |");
    println!("| --- | --- | --- | --- |");
    for (i, format) in formats.iter().enumerate() {
        println!(
            "| {} | {} | {:.0} | {:.2} |",
            format.content_type(),
            sizes[i],
            medians[i],
            medians[i] / medians[0]
        );
    }
}
