//! Request/reply: a requester on a second connection sends orders as requests one after the
//! other; the responder decodes the order, publishes an event and answers with a receipt. Raw:
//! an async-nats subscriber doing that; RustStream: a `#[subscriber("bench.rpc", reply)]`
//! handler. Counts answered requests per second. The same with many requests in flight
//! (`request-many`): requesters at once, each one request at a time, so the responder has a
//! backlog to answer.

use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use ruststream::{App as _, Env, Outgoing};

use crate::args::Side;
use crate::counter::{Counter, Record, Sample};
use crate::handlers::{app, raw_publish};
use crate::payload::{Answered, Order, answer, order, payload};
use crate::publish::{join, off_the_books, round_trip};
use crate::report::{Row, by_side};
use crate::scenarios::{Bench, PATIENCE};

const SUBJECT: &str = "bench.rpc";

/// How many requests are in flight in `request-many`.
const IN_FLIGHT: u64 = 32;

async fn round(side: Side, url: &str, n: u64, in_flight: u64) -> Sample {
    let counter = Counter::new(n, Record::Window);
    let responder = async_nats::connect(url).await.expect("connects");
    let (task, running) = match side {
        Side::Raw => {
            let mut requests = responder.subscribe(SUBJECT).await.expect("subscribed");
            round_trip(&responder).await;
            let client = responder.clone();
            let extra = crate::report::extra_ns();
            let task = tokio::spawn(async move {
                while let Some(request) = requests.next().await {
                    let order: Order = serde_json::from_slice(&request.payload).expect("decodes");
                    crate::report::extra_work(extra);
                    let answered = Answered {
                        id: order.id,
                        accepted: true,
                    };
                    let body = Bytes::from(serde_json::to_vec(&answered).expect("encodes"));
                    raw_publish(&client, Answered::SUBJECT, body.clone())
                        .await
                        .expect("the event is sent");
                    if let Some(inbox) = request.reply {
                        raw_publish(&client, inbox, body).await.expect("answered");
                    }
                }
            });
            (Some(task), None)
        }
        Side::Ours => {
            let running = app(url, |b| {
                b.include(answer);
            })
            .start(Env::new())
            .await
            .expect("the app starts");
            (None, Some(running))
        }
    };
    let c = Arc::clone(&counter);
    let requester = off_the_books({
        let url = url.to_owned();
        move || async move {
            let client = async_nats::connect(url)
                .await
                .expect("the requester connects");
            let body = payload(0, 0);
            let order = order(0, 0);
            // `n` requests shared by `in_flight` requesters, each one at a time.
            let requesters = (0..in_flight).map(|i| {
                let (client, body, c, order) = (&client, &body, &c, &order);
                let share = n / in_flight + u64::from(i < n % in_flight);
                async move {
                    for _ in 0..share {
                        let response = client
                            .request(SUBJECT, body.clone())
                            .await
                            .expect("answered");
                        debug_assert!(!response.payload.is_empty());
                        c.hit(order);
                    }
                }
            });
            futures::future::join_all(requesters).await;
        }
    });
    counter.wait("request/reply", PATIENCE).await;
    join(requester);
    if let Some(task) = task {
        task.abort();
    }
    if let Some(running) = running {
        running.stop().await.expect("a clean stop");
    }
    counter.result()
}

pub async fn run(bench: &Bench<'_>) -> Row {
    let n = bench.args.messages(20_000);
    eprintln!("request/reply round trip, {n} requests ...");
    let rounds = by_side(bench.args.rounds, &bench.args.sides(), |side, _| {
        round(side, bench.url, n, 1)
    })
    .await;
    Row {
        scenario: format!("Request/reply round trip, one at a time ({n} requests)"),
        rounds,
    }
}

pub async fn run_many(bench: &Bench<'_>) -> Row {
    let n = bench.args.messages(100_000);
    eprintln!("request/reply, {IN_FLIGHT} in flight, {n} requests ...");
    let rounds = by_side(bench.args.rounds, &bench.args.sides(), |side, _| {
        round(side, bench.url, n, IN_FLIGHT)
    })
    .await;
    Row {
        scenario: format!("Request/reply, {IN_FLIGHT} requests in flight ({n} requests)"),
        rounds,
    }
}
