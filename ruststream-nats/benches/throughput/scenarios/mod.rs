//! The scenarios, one module each; what they share: the bench's setting and the Core round
//! (a subscriber, raw or RustStream, and a publisher on a second connection).

pub mod burst;
pub mod jetstream;
pub mod lanes;
pub mod latency;
pub mod request;
pub mod subscribe;

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::Context as JetStream;
use futures::StreamExt;
use ruststream::{App as _, Env};
use ruststream_nats::CoreSubject;

use crate::args::{Args, Side};
use crate::counter::{Counter, Record};
use crate::handlers::{CountAck, Noop, app, raw_client};
use crate::payload::Order;
use crate::publish::{self, Pace, join, round_trip};

/// What every scenario runs against.
pub struct Bench<'a> {
    pub args: &'a Args,
    pub url: &'a str,
    pub js: &'a JetStream,
}

/// How long a round may take before the run fails: a round that lost messages it must not lose
/// ends here, with the count.
pub const PATIENCE: Duration = Duration::from_secs(120);

/// The subscriber of a Core round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoreSide {
    /// An async-nats subscriber loop: decode, count.
    Raw,
    /// A `CoreSubject` registration whose handler decodes, counts and returns `Ok(())`, inside
    /// `layers` no-op middleware layers.
    Ours { layers: usize },
}

impl From<Side> for CoreSide {
    fn from(side: Side) -> Self {
        match side {
            Side::Raw => Self::Raw,
            Side::Ours => Self::Ours { layers: 0 },
        }
    }
}

/// One Core round of `n` orders published at `pace`: what the counter (recording `record`)
/// saw.
pub async fn core_counted(
    url: &str,
    subject: &'static str,
    side: CoreSide,
    n: u64,
    record: Record,
    pace: Pace,
) -> Arc<Counter> {
    let counter = Counter::new(n, record);
    let url_for_publisher = url.to_owned();
    let c = Arc::clone(&counter);
    core_round(url, subject, side, &counter, move || {
        publish::core(url_for_publisher, subject, n, pace, c)
    })
    .await;
    counter
}

/// One Core round: the subscriber on `subject` until `counter` is complete, the publisher
/// `publish` starts once it is subscribed.
pub async fn core_round(
    url: &str,
    subject: &'static str,
    side: CoreSide,
    counter: &Arc<Counter>,
    publish: impl FnOnce() -> std::thread::JoinHandle<()>,
) {
    match side {
        CoreSide::Raw => {
            let client = raw_client(url).await;
            let mut subscriber = client.subscribe(subject).await.expect("subscribes");
            round_trip(&client).await;
            let c = Arc::clone(counter);
            let task = tokio::spawn(async move {
                while let Some(message) = subscriber.next().await {
                    let order: Order = serde_json::from_slice(&message.payload).expect("decodes");
                    c.hit(&order);
                    if c.complete() {
                        break;
                    }
                }
            });
            let publisher = publish();
            counter.wait("raw Core", PATIENCE).await;
            task.await.expect("the raw loop ends");
            join(publisher);
        }
        CoreSide::Ours { layers } => {
            let handler = CountAck {
                counter: Arc::clone(counter),
                io: None,
            };
            let running = app(url, move |b| {
                let registration = b.include(CoreSubject::new(subject).handler(handler));
                for _ in 0..layers {
                    registration.layer(Noop);
                }
            })
            .start(Env::new())
            .await
            .expect("the app starts");
            let publisher = publish();
            counter.wait("RustStream Core", PATIENCE).await;
            running.stop().await.expect("a clean stop");
            join(publisher);
        }
    }
}
