//! The cases of Watermill's universal pub/sub tests that apply to a RustStream registration,
//! live: consumer groups, topic isolation, continue after close, concurrent close, continue
//! after errors. (Publish-subscribe, resend on error and no-ack blocking are
//! `nats_settlement`'s and `nats_retries`'s; reconnect under load is `recovery_reconnect`.)
//!
//! `RUSTSTREAM_UNIVERSAL_STRESS=N` runs each body N times in parallel (each with its own server).

mod nats_support;

use std::collections::BTreeMap;
use std::future::Future;

use futures::future::join_all;
use nats_support::*;
use ruststream::HandlerOutcome;
use ruststream_nats::{CoreSubject, JetStreamSubject};
use ruststream_test_server::client::eventually;

const N: u64 = 200;

/// How many times each body runs at once.
fn parallel() -> usize {
    std::env::var("RUSTSTREAM_UNIVERSAL_STRESS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1)
}

async fn stressed<F: Future<Output = ()>>(body: impl Fn() -> F) {
    join_all((0..parallel()).map(|_| body())).await;
}

fn counts(handlers: &[&Scripted]) -> BTreeMap<u64, usize> {
    let mut counts = BTreeMap::new();
    for handler in handlers {
        for seen in handler.seen() {
            *counts.entry(seen.id).or_default() += 1;
        }
    }
    counts
}

/// `orders.created` through durable `name`, with a short ack_wait: a pull request a stopped
/// instance left on the server can take a message after the stop (nobody handles it); it comes
/// back after ack_wait.
fn closing(name: &str) -> JetStreamSubject {
    created(name).ack_wait(millis(1_000))
}

async fn publish_n(
    js: &async_nats::jetstream::Context,
    subject: &str,
    ids: std::ops::RangeInclusive<u64>,
) {
    for id in ids {
        publish_stored(js, subject, order(id)).await;
    }
}

#[tokio::test]
async fn consumer_groups_two_instances_on_one_durable_share_the_messages() {
    stressed(|| async {
        let (server, _client, js) = jetstream_server().await;
        let (a, b) = (
            Scripted::always(HandlerOutcome::ack()),
            Scripted::always(HandlerOutcome::ack()),
        );
        let first = start_on(&server, |r| {
            r.include(created("group").handler(a.clone()));
        })
        .await;
        let second = start_on(&server, |r| {
            r.include(created("group").handler(b.clone()));
        })
        .await;
        publish_n(&js, "orders.created", 1..=N).await;
        until_settled(&js, "group", N, "all settled").await;
        let counts = counts(&[&a, &b]);
        assert_eq!(counts.len(), usize::try_from(N).expect("small"));
        assert!(counts.values().all(|&n| n == 1), "each once: {counts:?}");
        first.stop().await.expect("a clean stop");
        second.stop().await.expect("a clean stop");
    })
    .await;
}

#[tokio::test]
async fn topic_isolation_each_registration_gets_only_its_subject() {
    stressed(|| async {
        let (server, client, js) = jetstream_server().await;
        let (created_h, shipped_h, core_h) = (
            Scripted::always(HandlerOutcome::ack()),
            Scripted::always(HandlerOutcome::ack()),
            Scripted::always(HandlerOutcome::ack()),
        );
        let running = start_on(&server, |r| {
            r.include(created("created").handler(created_h.clone()))
                .name("created");
            r.include(
                JetStreamSubject::new("orders.shipped", STREAM)
                    .durable("shipped")
                    .handler(shipped_h.clone()),
            )
            .name("shipped");
            r.include(CoreSubject::new("alerts.one").handler(core_h.clone()))
                .name("alerts");
        })
        .await;
        publish_n(&js, "orders.created", 1..=20).await;
        publish_n(&js, "orders.shipped", 101..=120).await;
        for id in 201..=220 {
            publish_core(&client, "alerts.one", &[], order(id)).await;
            publish_core(&client, "alerts.two", &[], order(id + 100)).await;
        }
        created_h.until_seen(20).await;
        shipped_h.until_seen(20).await;
        core_h.until_seen(20).await;
        running.stop().await.expect("a clean stop");
        assert!(created_h.seen().iter().all(|s| (1..=20).contains(&s.id)));
        assert!(shipped_h.seen().iter().all(|s| (101..=120).contains(&s.id)));
        assert!(core_h.seen().iter().all(|s| (201..=220).contains(&s.id)));
        assert_eq!(core_h.seen().len(), 20);
    })
    .await;
}

#[tokio::test]
async fn continue_after_close_a_new_instance_handles_the_rest() {
    stressed(|| async {
        let (server, _client, js) = jetstream_server().await;
        let before = Scripted::always(HandlerOutcome::ack());
        let running = start_on(&server, |r| {
            r.include(closing("resume").handler(before.clone()));
        })
        .await;
        publish_n(&js, "orders.created", 1..=N / 2).await;
        before.until_seen(10).await;
        running.stop().await.expect("a clean stop");

        publish_n(&js, "orders.created", N / 2 + 1..=N).await;
        let after = Scripted::always(HandlerOutcome::ack());
        let running = start_on(&server, |r| {
            r.include(closing("resume").handler(after.clone()));
        })
        .await;
        until_settled(&js, "resume", N, "all settled").await;
        running.stop().await.expect("a clean stop");
        let counts = counts(&[&before, &after]);
        assert_eq!(counts.len(), usize::try_from(N).expect("small"));
        // A clean stop settles or releases what it took: nothing is handled twice.
        assert!(counts.values().all(|&n| n == 1), "{counts:?}");
    })
    .await;
}

#[tokio::test]
async fn concurrent_close_of_two_instances_loses_nothing() {
    stressed(|| async {
        let (server, _client, js) = jetstream_server().await;
        let (a, b) = (
            Scripted::always(HandlerOutcome::ack()).slow(std::time::Duration::from_millis(2)),
            Scripted::always(HandlerOutcome::ack()).slow(std::time::Duration::from_millis(2)),
        );
        let first = start_on(&server, |r| {
            r.include(closing("closing").handler(a.clone()));
        })
        .await;
        let second = start_on(&server, |r| {
            r.include(closing("closing").handler(b.clone()));
        })
        .await;
        publish_n(&js, "orders.created", 1..=N).await;
        eventually(PATIENCE, "both under way", || async {
            (a.seen().len() + b.seen().len() >= 20).then_some(())
        })
        .await;
        let (x, y) = tokio::join!(first.stop(), second.stop());
        x.expect("a clean stop");
        y.expect("a clean stop");

        let rest = Scripted::always(HandlerOutcome::ack());
        let running = start_on(&server, |r| {
            r.include(closing("closing").handler(rest.clone()));
        })
        .await;
        until_settled(&js, "closing", N, "all settled").await;
        running.stop().await.expect("a clean stop");
        let counts = counts(&[&a, &b, &rest]);
        assert_eq!(counts.len(), usize::try_from(N).expect("small"));
    })
    .await;
}

#[tokio::test]
async fn continue_after_errors_failures_do_not_stop_the_others() {
    stressed(|| async {
        let (server, _client, js) = jetstream_server().await;
        // Every third order fails on its first delivery (a retry; a panic for every ninth).
        let handler = Scripted::new(|seen| {
            if seen.id % 3 == 0 && seen.delivered == Some(1) {
                if seen.id % 9 == 0 {
                    None
                } else {
                    Some(HandlerOutcome::retry())
                }
            } else {
                Some(HandlerOutcome::ack())
            }
        });
        let running = start_on(&server, |r| {
            r.include(created("errors").handler(handler.clone()));
        })
        .await;
        publish_n(&js, "orders.created", 1..=N).await;
        until_settled(&js, "errors", N, "all settled").await;
        running.stop().await.expect("a clean stop");
        let counts = counts(&[&handler]);
        for (id, n) in counts {
            assert_eq!(n, if id % 3 == 0 { 2 } else { 1 }, "order {id}");
        }
    })
    .await;
}
