//! A `retry_after` delay that ends as a pull request expires (the payments demo's 30 s backoff
//! against the 30 s default pull expiry), on a real nats-server.
//!
//! nats-server 2.9 loses such a redelivery: when the delayed message is due and the only
//! waiting pull request just expired, the server takes the message off its redelivery queue,
//! finds no request to send it to, and steps its stream cursor back as if the message were new.
//! The message next delivered is the last one of the stream again, with `delivered` 1, and the
//! delayed one is not delivered again until its `ack_wait` runs out. RustStream keeps a fresh
//! pull request waiting on the server before the last one expires, so there is always one to
//! take the redelivery. Each round below puts the delay's end on a request's expiry.

mod support;

use std::time::Duration;

use ruststream::HandlerOutcome;
use ruststream_test_server::client::eventually;
use support::nats::*;

/// The pull expiry, and the delay the handler asks for: the two end together.
const EXPIRY: Duration = Duration::from_secs(3);
/// Consumers reading the same messages: each is a chance for the coincidence.
const CONSUMERS: usize = 16;
const ROUNDS: u64 = 4;

#[tokio::test]
async fn a_delay_ending_as_a_pull_request_expires_is_delivered_again() {
    let (server, _client, js) = jetstream_server().await;
    let handlers: Vec<Scripted> = (0..CONSUMERS)
        .map(|_| Scripted::first_then_ack(HandlerOutcome::retry_after(EXPIRY)))
        .collect();
    let running = start_on(&server, |b| {
        for (i, handler) in handlers.iter().enumerate() {
            b.include(
                created(&format!("coincide-{i}"))
                    .pull_expiry(EXPIRY)
                    // Long: a redelivery the server lost would only come back after it.
                    .ack_wait(millis(60_000))
                    .handler(handler.clone()),
            )
            .name(format!("coincide-{i}"));
        }
    })
    .await;

    for round in 1..=ROUNDS {
        let seq = publish_stored(&js, "orders.created", &order(round)).await;
        for (i, handler) in handlers.iter().enumerate() {
            let seen = eventually(
                EXPIRY * 3,
                &format!("round {round}: consumer {i} delivered order {round} twice"),
                || async {
                    let mine: Vec<_> = handler
                        .seen()
                        .into_iter()
                        .filter(|s| s.stream_sequence == Some(seq))
                        .collect();
                    (mine.len() >= 2).then_some(mine)
                },
            )
            .await;
            let delivered: Vec<_> = seen.iter().map(|s| s.delivered).collect();
            assert_eq!(
                delivered,
                [Some(1), Some(2)],
                "round {round}, consumer {i}: the held message comes back once, as delivery 2"
            );
        }
        for i in 0..CONSUMERS {
            until_settled(
                &js,
                &format!("coincide-{i}"),
                seq,
                "acknowledged on its second delivery",
            )
            .await;
        }
    }
    for (i, handler) in handlers.iter().enumerate() {
        assert_eq!(
            handler.seen().len() as u64,
            2 * ROUNDS,
            "consumer {i}: no message came back twice"
        );
    }
    running.stop().await.expect("a clean stop");
}
