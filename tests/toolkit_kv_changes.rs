//! Key-value change handlers (`KvChanges`, `&KvChange<T>`), live: every revision and the latest
//! per key, a retry bringing the same revision back and the cap sending it to the dead letter,
//! a restart going on where it stopped, a key deleted while its put waits for its retry. Each
//! asserts what the server saw (the consumer's ack floor and pending counts, the dead-letter
//! stream) as well as what the handler saw.

mod support;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use ruststream::{App as _, Env};
use ruststream_nats::prelude::*;
use ruststream_test_server::client::stream_messages;

use support::kv::{Change, Changes, change};
use support::nats::{NatsServer, attempts, consumer_until, create_stream, live_server};

/// The `#[subscriber]` form: every revision of bucket `config`, through durable `watch`.
#[subscriber(KvChanges::new("config").durable("watch"))]
async fn watch(
    change: &KvChange<u32>,
    Ctx(attempt): Ctx<Attempt>,
    State(seen): State<Changes>,
) -> HandlerOutcome {
    seen.push(Change::of(change, attempt));
    HandlerOutcome::ack()
}

type Script = dyn Fn(&KvChange<u32>, u32) -> HandlerOutcome + Send + Sync;

/// A manual handler: records each change, then answers what its script says.
#[derive(Clone)]
struct Scripted {
    seen: Changes,
    script: Arc<Script>,
}

impl Scripted {
    fn new(script: impl Fn(&KvChange<u32>, u32) -> HandlerOutcome + Send + Sync + 'static) -> Self {
        Self {
            seen: Changes::default(),
            script: Arc::new(script),
        }
    }

    fn acking() -> Self {
        Self::new(|_, _| HandlerOutcome::ack())
    }
}

impl<S: Send + Sync + 'static> Handle<KvChange<u32>, (), S> for Scripted {
    async fn handle(
        &self,
        change: &KvChange<u32>,
        _outs: &(),
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        let attempt = ctx.attempt().get();
        self.seen.push(Change::of(change, attempt));
        match (self.script)(change, attempt) {
            HandlerOutcome::Ack => Ok(()),
            other => Err(other),
        }
    }
}

/// [`Scripted`], which deletes the key of a put on its first attempt before answering.
#[derive(Clone)]
struct DeletesOnFirstPut {
    inner: Scripted,
    store: kv::Store,
}

impl<S: Send + Sync + 'static> Handle<KvChange<u32>, (), S> for DeletesOnFirstPut {
    async fn handle(
        &self,
        change: &KvChange<u32>,
        outs: &(),
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        if matches!(change.op, KvOp::Put(_)) && ctx.attempt().get() == 1 {
            self.store.delete(&change.key).await.expect("deleted");
        }
        Handle::<KvChange<u32>, (), S>::handle(&self.inner, change, outs, ctx).await
    }
}

/// Bucket `config`, keeping ten revisions of each key: its stream made as async-nats's
/// `create_key_value` makes it, without the account query whose answer 2.9 servers word
/// differently.
async fn bucket(js: &jetstream::Context) -> kv::Store {
    js.create_stream(jetstream::stream::Config {
        name: "KV_config".to_owned(),
        subjects: vec!["$KV.config.>".to_owned()],
        max_messages_per_subject: 10,
        allow_rollup: true,
        deny_delete: true,
        allow_direct: true,
        discard: jetstream::stream::DiscardPolicy::New,
        ..Default::default()
    })
    .await
    .expect("the bucket's stream is created");
    js.get_key_value("config").await.expect("the bucket opens")
}

async fn put(store: &kv::Store, key: &str, value: u32) -> u64 {
    store
        .put(key, value.to_string().into())
        .await
        .expect("the put is stored")
}

/// An app on `server` whose one registration `mount` makes, in an app whose state is `Changes`.
async fn start(
    server: &NatsServer,
    seen: Changes,
    mount: impl FnOnce(&mut ruststream::Scope<Changes>),
) -> Result<ruststream::RunningApp, ruststream::Error> {
    RustStream::new(AppInfo::new("kv-tests", "0.1.0"))
        .on_startup(async move |()| Ok::<_, Infallible>(seen))
        .with_broker(NatsBroker::new(server.url()), mount)
        .start(Env::new())
        .await
}

/// Waits until consumer `durable` of the bucket's stream settled everything up to revision
/// `revision`, nothing left to deliver, and returns its info.
async fn until_settled(
    js: &jetstream::Context,
    durable: &str,
    revision: u64,
) -> jetstream::consumer::Info {
    consumer_until(
        js,
        "KV_config",
        durable,
        &format!("revision {revision} settled"),
        |i| i.num_ack_pending == 0 && i.num_pending == 0 && i.ack_floor.stream_sequence >= revision,
    )
    .await
}

#[tokio::test]
async fn every_revision_reaches_the_handler_in_order_with_key_revision_and_operation() {
    let (server, client) = live_server().await;
    let js = jetstream::new(client);
    let store = bucket(&js).await;
    let seen = Changes::default();
    let app = start(&server, seen.clone(), |b| {
        b.include(watch);
    })
    .await
    .expect("the app starts");

    assert_eq!(put(&store, "app.timeout", 30).await, 1);
    assert_eq!(put(&store, "app.retries", 3).await, 2);
    assert_eq!(put(&store, "app.timeout", 45).await, 3);
    store.delete("app.retries").await.expect("deleted");
    // Purged once the earlier changes were handled: the purge's rollup removes the key's
    // earlier revisions from the stream.
    seen.until(4).await;
    store.purge("app.timeout").await.expect("purged");

    let all = seen.until(5).await;
    assert_eq!(
        all,
        [
            change("app.timeout", 1, "put 30", 1),
            change("app.retries", 2, "put 3", 1),
            change("app.timeout", 3, "put 45", 1),
            change("app.retries", 4, "delete", 1),
            change("app.timeout", 5, "purge", 1),
        ]
    );
    let info = until_settled(&js, "watch", 5).await;
    assert_eq!(info.config.filter_subject, "$KV.config.>");
    assert_eq!(info.delivered.stream_sequence, 5);
    // What the bucket's stream holds now: the retries put and its delete marker, and the purge
    // marker that replaced every revision of `app.timeout`.
    let stored: Vec<(String, u64)> = stream_messages(&js, "KV_config")
        .await
        .into_iter()
        .map(|m| (m.subject.to_string(), m.sequence))
        .collect();
    assert_eq!(
        stored,
        [
            ("$KV.config.app.retries".to_owned(), 2),
            ("$KV.config.app.retries".to_owned(), 4),
            ("$KV.config.app.timeout".to_owned(), 5),
        ]
    );
    app.stop().await.expect("the app stops");
}

#[tokio::test]
async fn latest_per_key_starts_with_each_keys_last_revision() {
    let (server, client) = live_server().await;
    let js = jetstream::new(client);
    let store = bucket(&js).await;
    for value in [1, 2, 3] {
        put(&store, "limits.a", value).await;
    }
    put(&store, "limits.b", 10).await; // 4
    put(&store, "other.c", 7).await; // 5: not under the keys read
    put(&store, "limits.b", 11).await; // 6

    let handler = Scripted::acking();
    let app = start(&server, Changes::default(), |b| {
        b.include(
            KvChanges::new("config")
                .keys("limits.*")
                .durable("latest")
                .latest_per_key()
                .handler(handler.clone()),
        );
    })
    .await
    .expect("the app starts");
    handler.seen.until(2).await;
    let info = until_settled(&js, "latest", 6).await;
    assert_eq!(
        handler.seen.all(),
        [
            change("limits.a", 3, "put 3", 1),
            change("limits.b", 6, "put 11", 1),
        ],
        "only the latest revision of each key read"
    );
    assert_eq!(
        info.config.deliver_policy,
        jetstream::consumer::DeliverPolicy::LastPerSubject
    );
    assert_eq!(info.config.filter_subject, "$KV.config.limits.*");
    assert_eq!(info.delivered.consumer_sequence, 2, "two deliveries in all");

    // A change after the start arrives as every change does.
    put(&store, "limits.a", 4).await; // 7
    handler.seen.until(3).await;
    until_settled(&js, "latest", 7).await;
    assert_eq!(handler.seen.all()[2], change("limits.a", 7, "put 4", 1));
    app.stop().await.expect("the app stops");
}

#[tokio::test]
async fn a_retry_brings_the_same_revision_back_and_the_cap_sends_it_to_the_dead_letter() {
    let (server, client) = live_server().await;
    let js = jetstream::new(client);
    let store = bucket(&js).await;
    create_stream(&js, "DEAD", ["config.dead"]).await;
    put(&store, "app.bad", 1).await; // 1
    put(&store, "app.good", 2).await; // 2

    let handler = Scripted::new(|change, _| {
        if change.key == "app.bad" {
            HandlerOutcome::retry_after(Duration::from_millis(100))
        } else {
            HandlerOutcome::ack()
        }
    });
    let app = start(&server, Changes::default(), |b| {
        b.include(
            KvChanges::new("config")
                .durable("capped")
                .handler(handler.clone()),
        )
        .max_attempts(attempts(2))
        .dead_letter("config.dead");
    })
    .await
    .expect("the app starts");

    handler.seen.until(3).await;
    let info = until_settled(&js, "capped", 2).await;
    assert_eq!(
        handler.seen.all(),
        [
            change("app.bad", 1, "put 1", 1),
            change("app.bad", 1, "put 1", 2),
            change("app.good", 2, "put 2", 1),
        ],
        "the same revision again, attempt 2; the next one only after it (max_ack_pending 1)"
    );
    assert_eq!(info.num_redelivered, 0, "nothing waits for a redelivery");
    let dead = stream_messages(&js, "DEAD").await;
    assert_eq!(dead.len(), 1, "one dead letter: {dead:?}");
    assert_eq!(&dead[0].payload[..], b"1", "the put's value, as it arrived");
    // The revision left the consumer (terminated after the dead letter was stored) and stays
    // in the bucket.
    let bad = store.entry("app.bad").await.expect("read").expect("kept");
    assert_eq!(bad.revision, 1);
    app.stop().await.expect("the app stops");
}

#[tokio::test]
async fn a_restart_goes_on_where_it_stopped() {
    let (server, client) = live_server().await;
    let js = jetstream::new(client);
    let store = bucket(&js).await;
    let mount = |handler: Scripted| {
        move |b: &mut ruststream::Scope<Changes>| {
            b.include(KvChanges::new("config").durable("resume").handler(handler));
        }
    };

    let first = Scripted::acking();
    let app = start(&server, Changes::default(), mount(first.clone()))
        .await
        .expect("the app starts");
    for (key, value) in [("a", 1), ("b", 2), ("a", 3)] {
        put(&store, key, value).await;
    }
    first.seen.until(3).await;
    until_settled(&js, "resume", 3).await;
    app.stop().await.expect("the app stops");

    // Written while no app reads the bucket.
    put(&store, "b", 4).await;
    store.delete("a").await.expect("deleted"); // 5
    let stopped = support::nats::consumer_info(&js, "KV_config", "resume").await;
    assert_eq!(
        (stopped.ack_floor.stream_sequence, stopped.num_pending),
        (3, 2),
        "the durable kept its place, two changes waiting: {stopped:?}"
    );

    let second = Scripted::acking();
    let app = start(&server, Changes::default(), mount(second.clone()))
        .await
        .expect("the app starts again");
    second.seen.until(2).await;
    until_settled(&js, "resume", 5).await;
    assert_eq!(
        first.seen.all(),
        [
            change("a", 1, "put 1", 1),
            change("b", 2, "put 2", 1),
            change("a", 3, "put 3", 1)
        ]
    );
    assert_eq!(
        second.seen.all(),
        [change("b", 4, "put 4", 1), change("a", 5, "delete", 1)],
        "nothing acknowledged before the stop handled again, nothing written during it lost"
    );
    app.stop().await.expect("the app stops");
}

#[tokio::test]
async fn a_key_deleted_while_its_put_waits_for_its_retry_is_deleted_after_the_retry() {
    let (server, client) = live_server().await;
    let js = jetstream::new(client);
    let store = bucket(&js).await;

    // On the put's first attempt the handler deletes the key itself, then asks for a retry:
    // the delete is stored while the put waits.
    let handler = DeletesOnFirstPut {
        inner: Scripted::new(|change, attempt| match (&change.op, attempt) {
            (KvOp::Put(_), 1) => HandlerOutcome::retry_after(Duration::from_millis(200)),
            _ => HandlerOutcome::ack(),
        }),
        store: store.clone(),
    };
    let app = start(&server, Changes::default(), |b| {
        b.include(
            KvChanges::new("config")
                .durable("deleted")
                .handler(handler.clone()),
        )
        .max_attempts(attempts(3));
    })
    .await
    .expect("the app starts");
    put(&store, "app.flag", 1).await; // 1, deleted as 2 by the handler

    handler.inner.seen.until(3).await;
    let info = until_settled(&js, "deleted", 2).await;
    assert_eq!(
        handler.inner.seen.all(),
        [
            change("app.flag", 1, "put 1", 1),
            change("app.flag", 1, "put 1", 2),
            change("app.flag", 2, "delete", 1),
        ],
        "the put's retry (same revision), then the delete"
    );
    assert_eq!(info.delivered.stream_sequence, 2);
    assert!(
        store.get("app.flag").await.expect("read").is_none(),
        "the key stays deleted"
    );
    app.stop().await.expect("the app stops");
}

#[tokio::test]
async fn a_missing_bucket_stops_the_start_naming_it_and_the_fix() {
    let (server, _client) = live_server().await;
    let err = start(&server, Changes::default(), |b| {
        b.include(watch);
    })
    .await
    .expect_err("no bucket `config`");
    let message = err.to_string();
    assert!(
        message.contains("key-value bucket `config`") && message.contains("nats kv add config"),
        "{message}"
    );
}

#[tokio::test]
async fn a_dead_letter_under_kv_is_refused_before_anything_connects() {
    let err = RustStream::new(AppInfo::new("kv-tests", "0.1.0"))
        .on_startup(async move |()| Ok::<_, Infallible>(Changes::default()))
        .with_broker(NatsBroker::new("nats://127.0.0.1:1"), |b| {
            b.include(watch).dead_letter("$KV.config.dead");
        })
        .start(Env::new())
        .await
        .expect_err("refused");
    assert_eq!(err.kind(), ruststream::ErrorKind::Config, "{err}");
    assert!(err.to_string().contains("reserved prefix `$KV.`"), "{err}");
}

#[test]
fn describe_and_the_asyncapi_document_name_the_bucket_and_which_changes() {
    let app = RustStream::new(AppInfo::new("kv-tests", "0.1.0"))
        .on_startup(async move |()| Ok::<_, Infallible>(Changes::default()))
        .with_broker(NatsBroker::new("nats://localhost:4222"), |b| {
            b.include(watch).max_attempts(attempts(3));
            b.include(
                KvChanges::new("config")
                    .keys("limits.*")
                    .durable("latest")
                    .latest_per_key()
                    .handler(Scripted::acking()),
            );
        });
    let table = ruststream::app::cli::describe(&app);
    assert!(
        table.contains("$KV.config.>")
            && table.contains("jetstream, changes of bucket config (every revision)")
            && table.contains("KV_config/watch"),
        "{table}"
    );
    assert!(
        table.contains("$KV.config.limits.*")
            && table.contains("changes of bucket config (latest per key)"),
        "{table}"
    );
    let json = ruststream::app::cli::describe_json(&app);
    let watch = &json["registrations"][0];
    assert_eq!(
        (
            &watch["subject"],
            &watch["stream"],
            &watch["bucket"]["name"],
            &watch["bucket"]["changes"]
        ),
        (
            &"$KV.config.>".into(),
            &"KV_config".into(),
            &"config".into(),
            &"every revision".into()
        ),
        "{json}"
    );
    let doc = ruststream::asyncapi::document(&app);
    let channel = doc["channels"]
        .as_object()
        .expect("channels")
        .values()
        .find(|c| c["address"] == "$KV.config.limits.*")
        .expect("the bucket's keys are a channel");
    assert_eq!(
        channel["x-ruststream-jetstream"],
        serde_json::json!({"stream": "KV_config", "consumer": "latest", "bucket": "config", "changes": "latest per key"})
    );
    // The message is the value a put carries.
    assert_eq!(
        channel["messages"]
            .as_object()
            .expect("messages")
            .values()
            .next()
            .expect("one message")["payload"]["type"],
        "integer"
    );
}
