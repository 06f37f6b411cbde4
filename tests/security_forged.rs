//! Forged input against a real nats-server: retry-count headers that no copy of this app
//! carries (huge, negative, not a number) neither put a message past its cap unhandled nor
//! flood the log.

mod support;

use ruststream::HandlerOutcome;
use ruststream_nats::{CoreSubject, NatsBroker, RETRY_COUNT_HEADER};
use ruststream_test_server::NatsServer;
use ruststream_test_server::client::publish_core;
use support::nats::{Scripted, attempts, order, start};
use support::security::capture;

#[tokio::test]
async fn forged_retry_counts_are_clamped_and_logged_once() {
    const FORGED: u64 = 500;
    let captured = capture();
    let server = NatsServer::start();
    let handler = Scripted::always(HandlerOutcome::retry());
    let app = start(NatsBroker::new(server.url()), |b| {
        b.include(CoreSubject::new("forged.orders").handler(handler.clone()))
            .name("forged_orders")
            .max_attempts(attempts(3))
            .dead_letter("forged.dead");
    })
    .await
    .expect("the app starts");
    let client = async_nats::connect(server.url()).await.expect("connects");
    let dead = client.subscribe("forged.dead").await.expect("subscribed");
    client.flush().await.expect("flushed");

    // A huge count: handled once, as the last attempt, then dead-lettered.
    publish_core(
        &client,
        "forged.orders",
        &[(RETRY_COUNT_HEADER, "4000000000")],
        &order(1),
    )
    .await;
    let seen = handler.until_seen(1).await;
    assert_eq!(seen[0].attempt, 3, "clamped to the cap, and handled");
    // Malformed counts: first attempts, each retried up to the cap as usual.
    for (i, forged) in ["-7", "lots", "99999999999999999999999"].iter().enumerate() {
        publish_core(
            &client,
            "forged.orders",
            &[(RETRY_COUNT_HEADER, forged)],
            &order(10 + i as u64),
        )
        .await;
    }
    // A flood of them.
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(RETRY_COUNT_HEADER, "not-a-number");
    for id in 0..FORGED {
        client
            .publish_with_headers("forged.orders", headers.clone(), order(100 + id).into())
            .await
            .expect("published");
    }
    client.flush().await.expect("flushed");
    // 1 + 3 malformed x 3 attempts + the flood x 3 attempts.
    let total = 1 + 3 * 3 + 3 * FORGED as usize;
    let seen = handler.until_seen(total).await;
    for id in 10..13 {
        let attempts: Vec<u32> = seen
            .iter()
            .filter(|s| s.id == id)
            .map(|s| s.attempt)
            .collect();
        assert_eq!(attempts, [1, 2, 3], "order {id}");
    }
    // Every message reached the dead-letter subject once.
    let mut dead = futures::StreamExt::take(dead, 1 + 3 + FORGED as usize);
    let mut letters = 0;
    while tokio::time::timeout(
        ruststream_test_server::client::PATIENCE,
        futures::StreamExt::next(&mut dead),
    )
    .await
    .expect("every dead letter arrives")
    .is_some()
    {
        letters += 1;
    }
    assert_eq!(letters, 1 + 3 + FORGED as usize);
    app.stop().await.expect("the app stops");

    let warnings = captured.lines_with(&["WARN", "forged_orders", "retry-count header"]);
    assert!(!warnings.is_empty(), "the forged header is logged");
    assert!(
        warnings.len() <= 2,
        "{} forged headers, {} lines: {warnings:#?}",
        3 + FORGED,
        warnings.len()
    );
}
