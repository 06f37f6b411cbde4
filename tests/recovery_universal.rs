//! The cases of Watermill's universal pub/sub tests that apply to a RustStream registration,
//! each body run twice: in process (the in-process NATS, `TestApp`, paused clock) and live (a
//! real nats-server, real clock), with the same assertions on what the server (or the
//! emulation) reports. Publish-subscribe, concurrent subscribe, resend on error, no-ack
//! blocking, consumer groups, topic isolation, continue after close, concurrent close, continue
//! after errors, publisher close.
//! (`nats_settlement` proves the same settlements live, row by row.)
//!
//! Not here, because the emulation cannot express them: reconnect under load
//! (`recovery_reconnect`, live only) needs a connection to cut, and the in-process NATS has none;
//! a server-side pull request a stopped instance leaves behind (the reason [`closing`] has a short
//! `ack_wait`) exists only on a real server, so in process a stopped instance takes nothing more.
//!
//! `RUSTSTREAM_UNIVERSAL_STRESS=N` runs each body N times in parallel (each with its own server
//! or emulation): `RUSTSTREAM_UNIVERSAL_STRESS=4 cargo test --test recovery_universal`.

mod support;

use std::collections::BTreeMap;
use std::future::Future;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use futures::future::join_all;
use ruststream::{App as _, AppInfo, Env, HandlerOutcome, Headers, RustStream, Scope};
use ruststream_nats::testing::{ConsumerFacts, InProcessNats, TestApp};
use ruststream_nats::transport::{
    CorePubSub as _, JetStreamPublish as _, StreamAdmin as _, StreamSpec, TransportOverride,
};
use ruststream_nats::{CoreSubject, JetStreamSubject, NatsBroker, NatsClient};
use ruststream_test_server::client::stream_messages;
use support::nats::*;

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

/// Runs each body in process (paused clock) and live (real server, real clock), stressed.
macro_rules! both {
    ($($name:ident),* $(,)?) => {
        mod in_process {
            $(
                #[tokio::test(start_paused = true)]
                async fn $name() {
                    super::stressed(|| super::$name(false)).await;
                }
            )*
        }
        mod live {
            $(
                #[tokio::test]
                async fn $name() {
                    super::stressed(|| super::$name(true)).await;
                }
            )*
        }
    };
}

both!(
    publish_subscribe_every_message_is_handled_once,
    resend_on_error_a_retry_is_delivered_again_and_handled,
    no_ack_blocking_an_unsettled_message_holds_the_next_until_ack_wait,
    consumer_groups_two_instances_on_one_durable_share_the_messages,
    topic_isolation_each_registration_gets_only_its_subject,
    continue_after_close_a_new_instance_handles_the_rest,
    concurrent_close_of_two_instances_loses_nothing,
    continue_after_errors_failures_do_not_stop_the_others,
    concurrent_subscribe_instances_starting_at_once_share_every_message,
    publisher_close_everything_published_before_the_stop_arrives,
);

/// A server whose [`STREAM`] stores `orders.>`: the emulation, or a real one.
#[allow(clippy::large_enum_variant)] // one per test
enum Server {
    InProcess(InProcessNats),
    Live {
        server: NatsServer,
        client: async_nats::Client,
        js: jetstream::Context,
    },
}

/// An app running on a [`Server`].
enum Running {
    InProcess(TestApp),
    Live(ruststream::RunningApp),
}

impl Running {
    async fn stop(self) {
        match self {
            Self::InProcess(t) => t.shutdown().await.expect("a clean stop"),
            Self::Live(running) => running.stop().await.expect("a clean stop"),
        }
    }
}

impl Server {
    async fn new(live: bool) -> Self {
        if live {
            let (server, client, js) = jetstream_server().await;
            Self::Live { server, client, js }
        } else {
            let nats = InProcessNats::new();
            nats.declare_stream(StreamSpec {
                name: STREAM.into(),
                subjects: vec!["orders.>".into()],
            })
            .await
            .expect("declared");
            Self::InProcess(nats)
        }
    }

    /// An app with the registrations `mount` makes, started on this server.
    async fn start(&self, mount: impl FnOnce(&mut Scope<()>)) -> Running {
        match self {
            Self::InProcess(nats) => {
                let app = RustStream::new(AppInfo::new("universal", "0.1.0"))
                    .with_broker(NatsBroker::new("nats://in-process.invalid:4222"), mount);
                Running::InProcess(
                    TestApp::start_on(app, nats.clone())
                        .await
                        .expect("the app starts"),
                )
            }
            Self::Live { server, .. } => Running::Live(start_on(server, mount).await),
        }
    }

    /// An app with no registration, started on this server as production starts one (no
    /// `TestApp` in process either), and the client it publishes with.
    async fn start_publisher(&self) -> (ruststream::RunningApp, NatsClient) {
        let app = RustStream::new(AppInfo::new("publisher", "0.1.0")).with_broker(
            NatsBroker::new(match self {
                Self::InProcess(_) => "nats://in-process.invalid:4222".to_owned(),
                Self::Live { server, .. } => server.url(),
            }),
            |_| {},
        );
        let env = match self {
            Self::InProcess(nats) => Env::new().with(TransportOverride(Arc::new(nats.clone()))),
            Self::Live { .. } => Env::new(),
        };
        let running = app.start(env).await.expect("the publisher starts");
        let client = NatsClient::of(&running).expect("a NATS app has a client");
        (running, client)
    }

    /// Every message [`STREAM`] stores on `subject`.
    async fn stored_on(&self, subject: &str) -> usize {
        match self {
            Self::InProcess(nats) => nats
                .stream_messages(STREAM)
                .iter()
                .filter(|m| &*m.subject == subject)
                .count(),
            Self::Live { js, .. } => stream_messages(js, STREAM)
                .await
                .iter()
                .filter(|m| m.subject.as_str() == subject)
                .count(),
        }
    }

    /// Publishes `{"id": n}` for each of `ids` to `subject`, stored by [`STREAM`].
    async fn publish_n(&self, subject: &str, ids: std::ops::RangeInclusive<u64>) {
        for id in ids {
            match self {
                Self::InProcess(nats) => {
                    nats.publish_stored(Arc::from(subject), Headers::new(), order(id).into())
                        .await
                        .expect("stored");
                }
                Self::Live { js, .. } => {
                    publish_stored(js, subject, order(id)).await;
                }
            }
        }
    }

    /// Publishes `{"id": id}` to `subject` on Core (no stream stores it).
    async fn publish_core(&self, subject: &str, id: u64) {
        match self {
            Self::InProcess(nats) => {
                nats.publish(Arc::from(subject), Headers::new(), order(id).into())
                    .await
                    .expect("published");
            }
            Self::Live { client, .. } => publish_core(client, subject, &[], order(id)).await,
        }
    }

    /// Consumer `durable` of [`STREAM`], as the server reports it.
    async fn consumer(&self, durable: &str) -> ConsumerFacts {
        match self {
            Self::InProcess(nats) => nats.consumer_info(STREAM, durable).expect("the consumer"),
            Self::Live { js, .. } => ConsumerFacts::from(&consumer_info(js, STREAM, durable).await),
        }
    }

    /// Waits until consumer `durable` delivered everything up to stream sequence `seq` and
    /// nothing waits for a settlement (live: the ack floor is at `seq`), and returns its counters.
    async fn until_settled(&self, durable: &str, seq: u64, what: &str) -> ConsumerFacts {
        match self {
            Self::InProcess(_) => {
                eventually(PATIENCE, what, || async {
                    let facts = self.consumer(durable).await;
                    (facts.ack_pending == 0 && facts.delivered_stream == seq && facts.pending == 0)
                        .then_some(facts)
                })
                .await
            }
            Self::Live { js, .. } => {
                let info = until_settled(js, durable, seq, what).await;
                assert_eq!(info.num_pending, 0, "{what}: nothing left to deliver");
                ConsumerFacts::from(&info)
            }
        }
    }
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

fn all_once(counts: &BTreeMap<u64, usize>, n: u64) {
    assert_eq!(
        counts.len(),
        usize::try_from(n).expect("small"),
        "{counts:?}"
    );
    assert!(counts.values().all(|&n| n == 1), "each once: {counts:?}");
}

async fn publish_subscribe_every_message_is_handled_once(live: bool) {
    let server = Server::new(live).await;
    let handler = Scripted::always(HandlerOutcome::ack());
    let running = server
        .start(|r| {
            r.include(created("pubsub").handler(handler.clone()));
        })
        .await;
    server.publish_n("orders.created", 1..=N).await;
    let facts = server.until_settled("pubsub", N, "all settled").await;
    assert_eq!(facts.delivered, N, "each delivered once");
    assert_eq!(facts.redelivered, 0);
    running.stop().await;
    all_once(&counts(&[&handler]), N);
}

async fn resend_on_error_a_retry_is_delivered_again_and_handled(live: bool) {
    let server = Server::new(live).await;
    // The default ack_wait is 30 s: a redelivery within the test's patience is the -NAK's.
    let handler = Scripted::first_then_ack(HandlerOutcome::retry());
    let running = server
        .start(|r| {
            r.include(created("resend").handler(handler.clone()));
        })
        .await;
    server.publish_n("orders.created", 1..=1).await;
    let seen = handler.until_seen(2).await;
    assert_eq!(seen[0].delivered, Some(1));
    assert_eq!(seen[1].delivered, Some(2));
    assert_eq!(seen[1].attempt, 2);
    assert_eq!(seen[0].stream_sequence, Some(1));
    assert_eq!(seen[1].stream_sequence, Some(1), "the same message");
    let facts = server
        .until_settled("resend", 1, "acknowledged after the retry")
        .await;
    assert_eq!(facts.delivered, 2, "delivered twice");
    running.stop().await;
    assert_eq!(handler.seen().len(), 2, "handled, not delivered again");
}

async fn no_ack_blocking_an_unsettled_message_holds_the_next_until_ack_wait(live: bool) {
    let server = Server::new(live).await;
    let ack_wait = Duration::from_millis(1_000);
    // The first delivery of order 1 is not settled within ack_wait (the handler outlives it);
    // every other delivery is acknowledged at once. Two handler slots: only the server's
    // max_ack_pending of 1 can hold order 2 back.
    let handler = Scripted::always(HandlerOutcome::ack()).slow_when(move |seen| {
        if seen.id == 1 && seen.delivered == Some(1) {
            ack_wait * 3
        } else {
            Duration::ZERO
        }
    });
    let running = server
        .start(|r| {
            r.include(
                created("blocking")
                    .ack_wait(millis(1_000))
                    .max_ack_pending(1)
                    .handler(handler.clone()),
            )
            .concurrency(NonZeroUsize::new(2).expect("not zero"));
        })
        .await;
    let published = tokio::time::Instant::now();
    server.publish_n("orders.created", 1..=2).await;
    handler.until_seen(1).await;
    let facts = server.consumer("blocking").await;
    assert_eq!(
        (facts.delivered_stream, facts.ack_pending, facts.pending),
        (1, 1, 1),
        "order 2 waits on the server while order 1 is unsettled"
    );
    let seen = handler.until_seen(3).await;
    assert!(
        published.elapsed() >= ack_wait,
        "order 2 came {:?} after the publish, before ack_wait",
        published.elapsed()
    );
    let order: Vec<_> = seen.iter().map(|s| (s.id, s.delivered)).collect();
    assert_eq!(
        order[..3],
        [(1, Some(1)), (1, Some(2)), (2, Some(1))],
        "order 1 again after ack_wait, then order 2"
    );
    server
        .until_settled("blocking", 2, "both acknowledged")
        .await;
    running.stop().await;
}

async fn consumer_groups_two_instances_on_one_durable_share_the_messages(live: bool) {
    let server = Server::new(live).await;
    let (a, b) = (
        Scripted::always(HandlerOutcome::ack()),
        Scripted::always(HandlerOutcome::ack()),
    );
    let first = server
        .start(|r| {
            r.include(created("group").handler(a.clone()));
        })
        .await;
    let second = server
        .start(|r| {
            r.include(created("group").handler(b.clone()));
        })
        .await;
    server.publish_n("orders.created", 1..=N).await;
    server.until_settled("group", N, "all settled").await;
    all_once(&counts(&[&a, &b]), N);
    first.stop().await;
    second.stop().await;
}

async fn topic_isolation_each_registration_gets_only_its_subject(live: bool) {
    let server = Server::new(live).await;
    let (created_h, shipped_h, core_h) = (
        Scripted::always(HandlerOutcome::ack()),
        Scripted::always(HandlerOutcome::ack()),
        Scripted::always(HandlerOutcome::ack()),
    );
    let running = server
        .start(|r| {
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
    server.publish_n("orders.created", 1..=20).await;
    server.publish_n("orders.shipped", 101..=120).await;
    for id in 201..=220 {
        server.publish_core("alerts.one", id).await;
        server.publish_core("alerts.two", id + 100).await;
    }
    created_h.until_seen(20).await;
    shipped_h.until_seen(20).await;
    core_h.until_seen(20).await;
    // The stream holds 40 messages; each durable settled its own 20 and nothing else waits.
    for durable in ["created", "shipped"] {
        let facts = server.consumer(durable).await;
        assert_eq!(facts.delivered, 20, "{durable}: its own messages only");
        assert_eq!(facts.pending, 0, "{durable}: nothing left");
    }
    running.stop().await;
    assert!(created_h.seen().iter().all(|s| (1..=20).contains(&s.id)));
    assert!(shipped_h.seen().iter().all(|s| (101..=120).contains(&s.id)));
    assert!(core_h.seen().iter().all(|s| (201..=220).contains(&s.id)));
    assert_eq!(core_h.seen().len(), 20);
}

async fn continue_after_close_a_new_instance_handles_the_rest(live: bool) {
    let server = Server::new(live).await;
    let before = Scripted::always(HandlerOutcome::ack());
    let running = server
        .start(|r| {
            r.include(closing("resume").handler(before.clone()));
        })
        .await;
    server.publish_n("orders.created", 1..=N / 2).await;
    before.until_seen(10).await;
    running.stop().await;

    server.publish_n("orders.created", N / 2 + 1..=N).await;
    let after = Scripted::always(HandlerOutcome::ack());
    let running = server
        .start(|r| {
            r.include(closing("resume").handler(after.clone()));
        })
        .await;
    server.until_settled("resume", N, "all settled").await;
    running.stop().await;
    // A clean stop settles or releases what it took: nothing is handled twice.
    all_once(&counts(&[&before, &after]), N);
}

async fn concurrent_close_of_two_instances_loses_nothing(live: bool) {
    let server = Server::new(live).await;
    let (a, b) = (
        Scripted::always(HandlerOutcome::ack()).slow(Duration::from_millis(2)),
        Scripted::always(HandlerOutcome::ack()).slow(Duration::from_millis(2)),
    );
    let first = server
        .start(|r| {
            r.include(closing("closing").handler(a.clone()));
        })
        .await;
    let second = server
        .start(|r| {
            r.include(closing("closing").handler(b.clone()));
        })
        .await;
    server.publish_n("orders.created", 1..=N).await;
    eventually(PATIENCE, "both under way", || async {
        (a.seen().len() + b.seen().len() >= 20).then_some(())
    })
    .await;
    tokio::join!(first.stop(), second.stop());

    let rest = Scripted::always(HandlerOutcome::ack());
    let running = server
        .start(|r| {
            r.include(closing("closing").handler(rest.clone()));
        })
        .await;
    server.until_settled("closing", N, "all settled").await;
    running.stop().await;
    let counts = counts(&[&a, &b, &rest]);
    assert_eq!(counts.len(), usize::try_from(N).expect("small"));
}

async fn continue_after_errors_failures_do_not_stop_the_others(live: bool) {
    let server = Server::new(live).await;
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
    let running = server
        .start(|r| {
            r.include(created("errors").handler(handler.clone()));
        })
        .await;
    server.publish_n("orders.created", 1..=N).await;
    let facts = server.until_settled("errors", N, "all settled").await;
    assert_eq!(
        facts.delivered,
        N + N / 3,
        "each failure delivered once more"
    );
    running.stop().await;
    let counts = counts(&[&handler]);
    assert_eq!(counts.len(), usize::try_from(N).expect("small"));
    for (id, n) in counts {
        assert_eq!(n, if id % 3 == 0 { 2 } else { 1 }, "order {id}");
    }
}

async fn concurrent_subscribe_instances_starting_at_once_share_every_message(live: bool) {
    const INSTANCES: usize = 6;
    let server = Server::new(live).await;
    let handlers: Vec<Scripted> = (0..INSTANCES)
        .map(|_| Scripted::always(HandlerOutcome::ack()))
        .collect();
    let group: Vec<Scripted> = (0..INSTANCES)
        .map(|_| Scripted::always(HandlerOutcome::ack()))
        .collect();
    // Every instance subscribes at once (one durable consumer created and opened by all of
    // them, one Core queue group joined by all of them) while the stream already fills.
    let starts = join_all(handlers.iter().zip(&group).map(|(handler, member)| {
        server.start(|r| {
            r.include(created("concurrent").handler(handler.clone()))
                .name("orders")
                .concurrency(NonZeroUsize::new(4).expect("not zero"));
            r.include(
                CoreSubject::new("alerts.raised")
                    .queue_group("alerting")
                    .handler(member.clone()),
            )
            .name("alerts");
        })
    }));
    let (instances, ()) = tokio::join!(starts, server.publish_n("orders.created", 1..=N / 2));
    server.publish_n("orders.created", N / 2 + 1..=N).await;
    // Core: at most once, to those subscribed; every instance is, once its start returned.
    for id in 1..=N {
        server.publish_core("alerts.raised", id).await;
    }
    let facts = server.until_settled("concurrent", N, "all settled").await;
    assert_eq!(facts.delivered, N, "each delivered once");
    assert_eq!(facts.redelivered, 0);
    let group_refs: Vec<&Scripted> = group.iter().collect();
    eventually(PATIENCE, "every alert handled", || async {
        (counts(&group_refs).len() == usize::try_from(N).expect("small")).then_some(())
    })
    .await;
    for instance in instances {
        instance.stop().await;
    }
    all_once(&counts(&handlers.iter().collect::<Vec<_>>()), N);
    // The queue group gave each alert to one member.
    all_once(&counts(&group_refs), N);
}

async fn publisher_close_everything_published_before_the_stop_arrives(live: bool) {
    const TASKS: u64 = 20;
    let server = Server::new(live).await;
    // The receiving app: a durable on the stored subject, a Core subscriber on the other.
    let (stored, core) = (
        Scripted::always(HandlerOutcome::ack()),
        Scripted::always(HandlerOutcome::ack()),
    );
    let receiver = server
        .start(|r| {
            r.include(
                JetStreamSubject::new("orders.relayed", STREAM)
                    .durable("relayed")
                    .handler(stored.clone()),
            )
            .name("stored");
            r.include(CoreSubject::new("alerts.relayed").handler(core.clone()))
                .name("core");
        })
        .await;
    // The publishing app: 20 tasks publish at once through its client, to a subject a stream
    // stores (confirmed) and to a Core subject (written to the connection, not confirmed).
    let (publisher, client) = server.start_publisher().await;
    join_all((0..TASKS).map(|task| {
        let client = client.clone();
        async move {
            for id in (1..=N).filter(|id| id % TASKS == task) {
                let value = serde_json::json!({ "id": id });
                client
                    .publish_to("orders.relayed", &value)
                    .await
                    .expect("stored");
                client
                    .publish_to("alerts.relayed", &value)
                    .await
                    .expect("published");
            }
        }
    }))
    .await;
    // Closed right after the last publish returned: the client goes first, then the app's
    // stop flushes and drops the connection. Nothing published before is lost.
    drop(client);
    publisher.stop().await.expect("a clean stop");

    assert_eq!(
        server.stored_on("orders.relayed").await,
        usize::try_from(N).expect("small"),
        "the stream stored every confirmed publish"
    );
    server.until_settled("relayed", N, "all settled").await;
    eventually(PATIENCE, "every Core message handled", || async {
        (core.seen().len() >= usize::try_from(N).expect("small")).then_some(())
    })
    .await;
    receiver.stop().await;
    all_once(&counts(&[&stored]), N);
    all_once(&counts(&[&core]), N);
}
