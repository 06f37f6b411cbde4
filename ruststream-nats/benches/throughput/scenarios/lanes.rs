//! Ordering lanes written by hand, the raw side of `--scenario js-lanes`: what a service
//! without `.by_key(..)` writes to handle each key's messages in order and different keys in
//! parallel.

use std::sync::Arc;

use async_nats::jetstream::{self, consumer};
use futures::StreamExt;

use crate::counter::Counter;
use crate::payload::{Order, lane_key};
use crate::scenarios::jetstream::IO;

/// `workers` tasks, each handling (1 ms of I/O, count, ack) the orders whose key hashes to it,
/// in the order the reading loop hands them over; returns once `counter` is complete (the
/// workers finish what they hold).
pub async fn raw(mut messages: consumer::pull::Stream, workers: usize, counter: &Arc<Counter>) {
    let mut lanes = Vec::with_capacity(workers);
    for _ in 0..workers {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<(jetstream::Message, Order)>(16);
        let counter = Arc::clone(counter);
        tokio::spawn(async move {
            while let Some((message, order)) = rx.recv().await {
                tokio::time::sleep(IO).await;
                counter.hit(&order);
                message.ack().await.expect("the ack is sent");
            }
        });
        lanes.push(tx);
    }
    let workers = u64::try_from(workers).expect("a small number");
    while let Some(message) = messages.next().await {
        let Some(message) = super::jetstream::raw_pulled(message) else {
            continue;
        };
        let order: Order = serde_json::from_slice(&message.payload).expect("decodes");
        let lane = usize::try_from(lane_key(order.id) % workers).expect("a lane");
        if lanes[lane].send((message, order)).await.is_err() || counter.complete() {
            break;
        }
    }
}
