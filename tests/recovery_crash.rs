//! The app process killed with `SIGKILL` in the middle of a handler, then started again, live:
//! the message in flight is delivered again and handled, nothing else is delivered twice.
//!
//! The app runs as a child process: this test binary's ignored test `worker_child`, started by
//! `ruststream_test_server::service_process::ServiceProcess::test_entry` with the server's URL
//! and a file to record into. It records every delivery as it starts and as it ends.

mod support;

use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use async_nats::jetstream::stream;
use ruststream::{App as _, AppInfo, Context, Handle, HandlerOutcome, RustStream};
use ruststream_nats::{JetStreamSubject, NatsBroker};
use ruststream_test_server::client::eventually;
use ruststream_test_server::service_process::ServiceProcess;
use support::nats::*;

const URL: &str = "RUSTSTREAM_CRASH_WORKER_URL";
const RECORDS: &str = "RUSTSTREAM_CRASH_WORKER_RECORDS";

/// The order the worker hangs on, the first time it is delivered.
const HANGS: u64 = 3;

/// Appends `started <id> <delivered>` and `done <id> <delivered>` lines to a file.
struct Recording(PathBuf);

impl Recording {
    fn record(&self, line: &str) {
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.0)
            .expect("the records file opens");
        writeln!(file, "{line}").expect("the record is written");
        file.sync_data().expect("the record reaches the disk");
    }
}

impl Handle<Order> for Recording {
    async fn handle(
        &self,
        order: &Order,
        _outs: &(),
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        let delivered = ctx.delivered().unwrap_or(0);
        self.record(&format!("started {} {delivered}", order.id));
        if order.id == HANGS && delivered == 1 {
            // Mid-handler: the test kills the process here.
            tokio::time::sleep(Duration::from_secs(600)).await;
        }
        self.record(&format!("done {} {delivered}", order.id));
        Ok(())
    }
}

#[tokio::test]
#[ignore = "the worker process of `a_worker_killed_mid_handler_redelivers_only_the_message_in_flight`, which starts it"]
async fn worker_child() {
    let url = std::env::var(URL).expect("the crash test sets the server's URL");
    let records = std::env::var(RECORDS).expect("the crash test sets the records file");
    RustStream::new(AppInfo::new("crash-worker", "0.1.0"))
        .with_broker(NatsBroker::new(url), |b| {
            b.include(
                JetStreamSubject::new("orders.created", STREAM)
                    .durable("worker")
                    .ack_wait(millis(2_000))
                    .handler(Recording(PathBuf::from(records))),
            );
        })
        .run_until(std::future::pending())
        .await
        .expect("the worker runs");
}

/// The records so far, as (what, id, delivered).
fn records(path: &std::path::Path) -> Vec<(String, u64, u64)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let mut parts = line.split(' ');
            let what = parts.next()?.to_owned();
            let id = parts.next()?.parse().ok()?;
            let delivered = parts.next()?.parse().ok()?;
            Some((what, id, delivered))
        })
        .collect()
}

#[tokio::test]
async fn a_worker_killed_mid_handler_redelivers_only_the_message_in_flight() {
    eprintln!("running against {}", NatsServer::version());
    let server = NatsServer::start();
    let (_client, js) = connect_jetstream(&server).await;
    js.create_stream(stream::Config {
        name: STREAM.to_owned(),
        subjects: vec!["orders.>".to_owned()],
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await
    .expect("the stream is created");
    // In the server's temporary directory, removed with it.
    let path = server.log_path().with_file_name("worker-records");
    let path_text = path.to_string_lossy().into_owned();
    let url = server.url();
    let env = [(URL, url.as_str()), (RECORDS, path_text.as_str())];

    for id in 1..=HANGS {
        publish_stored(&js, "orders.created", order(id)).await;
    }
    let mut worker = ServiceProcess::test_entry("worker_child", &env);
    eventually(
        PATIENCE * 3,
        "the worker is in the middle of order 3",
        || async {
            records(&path)
                .contains(&("started".to_owned(), HANGS, 1))
                .then_some(())
        },
    )
    .await;
    // Orders 1 and 2 are settled on the server. (A settlement still in the client's buffer when
    // the process dies is lost with it, and its message comes again: docs/guarantees.md.)
    consumer_until(&js, STREAM, "worker", "orders 1 and 2 acknowledged", |i| {
        i.ack_floor.stream_sequence >= 2
    })
    .await;
    worker.kill();
    // The server drops the dead worker's pull requests once it has seen its connection close;
    // until then it would hand a new message to the dead process (delivered again after
    // ack_wait, as any message in flight to it). Seen under load: order 4 went to the killed
    // worker's pull and came back as a second delivery.
    consumer_until(
        &js,
        STREAM,
        "worker",
        "the killed worker's pulls gone",
        |i| i.num_waiting == 0,
    )
    .await;

    // Published while no worker runs.
    for id in HANGS + 1..=5 {
        publish_stored(&js, "orders.created", order(id)).await;
    }
    let mut again = ServiceProcess::test_entry("worker_child", &env);
    let done = eventually(PATIENCE * 3, "every order handled to the end", || async {
        let done: Vec<(u64, u64)> = records(&path)
            .into_iter()
            .filter(|(what, _, _)| what == "done")
            .map(|(_, id, delivered)| (id, delivered))
            .collect();
        (1..=5)
            .all(|id| done.iter().any(|(d, _)| *d == id))
            .then_some(done)
    })
    .await;
    until_settled(&js, "worker", 5, "everything settled").await;
    again.kill();

    // The message in flight came again and was handled; every other was delivered once. (The
    // one in flight may have been delivered again to the first worker too, if its ack_wait ran
    // out before the kill; that worker never started it.)
    let all = std::fs::read_to_string(&path).unwrap_or_default();
    let mut started: Vec<(u64, u64)> = records(&path)
        .into_iter()
        .filter(|(what, _, _)| what == "started")
        .map(|(_, id, delivered)| (id, delivered))
        .collect();
    started.sort_unstable();
    let mut done = done;
    done.sort_unstable();
    let again_delivered = started
        .iter()
        .find(|&&(id, delivered)| id == HANGS && delivered > 1)
        .map(|&(_, delivered)| delivered);
    let Some(again_delivered) = again_delivered else {
        panic!("order {HANGS} was not delivered again: {all}");
    };
    assert_eq!(
        started,
        [(1, 1), (2, 1), (3, 1), (3, again_delivered), (4, 1), (5, 1)],
        "records:\n{all}"
    );
    assert_eq!(
        done,
        [(1, 1), (2, 1), (3, again_delivered), (4, 1), (5, 1)],
        "records:\n{all}"
    );
}
