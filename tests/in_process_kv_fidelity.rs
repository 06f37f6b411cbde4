//! Key-value change handlers on both servers with one body each: the production app on
//! `TestApp` (NATS in process, paused clock) and on a real nats-server. A change is written as a
//! client writes it to the bucket's stream (`$KV.<bucket>.<key>`, a delete with
//! `KV-Operation: DEL`). A purge's rollup and the bucket's own API (history, `kv.get`) are
//! live only: `tests/toolkit_kv_changes.rs`.

mod support;

use std::convert::Infallible;

use ruststream::Headers;
use ruststream_nats::prelude::*;
use ruststream_nats::testing::ConsumerFacts;
use ruststream_test_server::client::nak_with;
use support::fidelity::DELAY;
use support::fidelity::app::AppWire;
use support::kv::{Change, Changes, change};

/// Records every change; asks for a retry of key `bad` after [`DELAY`], acknowledges the rest.
#[subscriber(KvChanges::new("config").durable("watch"))]
async fn watch(
    change: &KvChange<u32>,
    Ctx(attempt): Ctx<Attempt>,
    State(seen): State<Changes>,
) -> HandlerOutcome {
    seen.push(Change::of(change, attempt));
    if change.key == "bad" {
        HandlerOutcome::retry_after(DELAY)
    } else {
        HandlerOutcome::ack()
    }
}

fn kv_app(url: &str, seen: Changes) -> impl ruststream::App + use<> {
    RustStream::new(AppInfo::new("kv-fidelity", "0.1.0"))
        .on_startup(async move |()| Ok::<_, Infallible>(seen))
        .with_broker(NatsBroker::new(url), |b| {
            b.include(watch)
                .max_attempts(nonzero!(2))
                .dead_letter("config.dead");
        })
}

async fn put(wire: &AppWire, key: &str, value: u32) {
    wire.publish_raw(
        &format!("$KV.config.{key}"),
        Headers::new(),
        value.to_string().into_bytes(),
    )
    .await;
}

async fn delete(wire: &AppWire, key: &str) {
    let headers = Headers::from_iter([("KV-Operation", "DEL")]);
    wire.publish_raw(&format!("$KV.config.{key}"), headers, Vec::new())
        .await;
}

/// Runs `body` on the app in process (paused clock) and live (real server and clock).
macro_rules! both {
    ($($name:ident),* $(,)?) => {
        mod in_process {
            $(
                #[tokio::test(start_paused = true)]
                async fn $name() {
                    let seen = super::Changes::default();
                    let app = |url: &str| super::kv_app(url, seen.clone());
                    let wire = crate::support::fidelity::app::AppWire::in_process(app).await;
                    super::$name(&wire, &seen).await;
                    wire.shutdown().await;
                }
            )*
        }
        mod live {
            $(
                #[tokio::test]
                async fn $name() {
                    let seen = super::Changes::default();
                    let app = |url: &str| super::kv_app(url, seen.clone());
                    let wire = crate::support::fidelity::app::AppWire::live(app).await;
                    super::$name(&wire, &seen).await;
                    wire.shutdown().await;
                }
            )*
        }
    };
}

both!(
    puts_and_deletes_arrive_in_revision_order,
    a_retry_is_the_same_revision_and_the_cap_dead_letters_it,
);

async fn puts_and_deletes_arrive_in_revision_order(wire: &AppWire, seen: &Changes) {
    put(wire, "app.timeout", 30).await;
    put(wire, "app.retries", 3).await;
    delete(wire, "app.timeout").await;
    wire.wait_until(|w| w.acks("KV_config", "watch").len() == 3)
        .await;

    assert_eq!(
        seen.all(),
        [
            change("app.timeout", 1, "put 30", 1),
            change("app.retries", 2, "put 3", 1),
            change("app.timeout", 3, "delete", 1),
        ]
    );
    assert_eq!(wire.acks("KV_config", "watch"), ["+ACK", "+ACK", "+ACK"]);
    assert_eq!(
        wire.consumer_info("KV_config", "watch").await,
        ConsumerFacts::new(3, 3, 0, 0, 0)
    );
    let stored = wire.stream_messages("KV_config").await;
    assert_eq!(stored.len(), 3);
    assert_eq!(stored[2].headers.get("KV-Operation"), Some("DEL"));
}

async fn a_retry_is_the_same_revision_and_the_cap_dead_letters_it(wire: &AppWire, seen: &Changes) {
    put(wire, "bad", 1).await;
    put(wire, "good", 2).await;
    wire.wait_until(|w| w.acks("KV_config", "watch").len() == 3)
        .await;

    // One at a time (`max_ack_pending` 1): the next revision waits for the retried one.
    assert_eq!(
        seen.all(),
        [
            change("bad", 1, "put 1", 1),
            change("bad", 1, "put 1", 2),
            change("good", 2, "put 2", 1)
        ]
    );
    assert_eq!(
        wire.acks("KV_config", "watch"),
        [nak_with(DELAY), "+TERM".to_owned(), "+ACK".to_owned()]
    );
    assert_eq!(wire.published::<u32>("config.dead"), [1]);
    assert_eq!(
        wire.consumer_info("KV_config", "watch").await,
        ConsumerFacts::new(3, 2, 0, 0, 0)
    );
}
