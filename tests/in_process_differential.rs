//! The in-process NATS proven by generated cases: sequences of operations (stored publishes with
//! and without message ids and expectations, fetches, every settlement, waits past ack_wait,
//! consumers created and deleted, key-value writes) run on the emulation and on a real
//! nats-server, and everything a client could observe compared. A difference shrinks to a
//! minimal case, printed one operation a line, with both servers' observations.
//!
//! One nats-server for the whole run, a stream and a bucket of their own for each case. 24
//! cases by default; `RUSTSTREAM_DIFF_CASES=5000` runs more (docs/testing.md, "The differential
//! test", lists the differences found and how each was settled).

mod support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};
use ruststream_nats::testing::InProcessNats;
use ruststream_test_server::NatsServer;
use support::differential::known::{
    Version, blank_duplicate_or_refusal, blank_filtered_stream_positions,
    blank_pending_after_update, normalise,
};
use support::differential::run::{Names, run};
use support::differential::server::{Live, Server};
use support::differential::{Case, Expect, How, Op, Subject, cases};

/// Cases per run unless `RUSTSTREAM_DIFF_CASES` says otherwise.
const DEFAULT_CASES: u32 = 24;
/// The most operations of a case.
const MAX_OPS: usize = 12;

/// Runs `case` on the in-process NATS, on a paused clock of its own.
fn in_process(n: u64, case: &Case) -> Vec<String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a paused runtime");
    runtime.block_on(async {
        let server = Server::InProcess(InProcessNats::new());
        run(&server, Names::new(n), case).await
    })
}

/// Both logs, the first line that differs marked.
fn differences(ours: &[String], theirs: &[String]) -> Option<String> {
    if ours == theirs {
        return None;
    }
    let first = (0..ours.len().max(theirs.len())).find(|&i| ours.get(i) != theirs.get(i))?;
    let mut out = format!(
        "the in-process NATS and {} differ at line {first}:\n",
        NatsServer::version()
    );
    for i in 0..ours.len().max(theirs.len()) {
        let a = ours.get(i).map_or("", String::as_str);
        let b = theirs.get(i).map_or("", String::as_str);
        let mark = if i == first { ">>" } else { "  " };
        if a == b {
            out.push_str(&format!("{mark} {a}\n"));
        } else {
            out.push_str(&format!("{mark} in process: {a}\n{mark} real:       {b}\n"));
        }
    }
    Some(out)
}

/// The known differences (docs/testing.md) that changed a line in this test binary's runs.
static USED: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());

/// The real server's version, asked once.
fn server_version() -> Version {
    static VERSION: OnceLock<Version> = OnceLock::new();
    *VERSION.get_or_init(|| Version::parse(&NatsServer::version()))
}

/// Runs `case` on both servers and compares what a client saw, each known difference of the
/// real server's version left out.
fn compare(
    live: &Server,
    runtime: &tokio::runtime::Runtime,
    n: u64,
    case: &Case,
) -> Option<String> {
    let version = server_version();
    let (ours, used_ours) = normalise(version, &in_process(n, case));
    let (theirs, used_theirs) =
        normalise(version, &runtime.block_on(run(live, Names::new(n), case)));
    let mut used = USED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    used.extend(used_ours.into_iter().chain(used_theirs));
    differences(&ours, &theirs)
}

/// A real server and the runtime its clients live on, for one test.
fn live() -> (tokio::runtime::Runtime, Server) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime for the real server's clients");
    let live = runtime.block_on(Live::start());
    (runtime, Server::Live(Box::new(live)))
}

/// Case numbers (stream and bucket names) unique on the one real server of a test binary.
static CASE: AtomicU64 = AtomicU64::new(1);

fn next_case() -> u64 {
    CASE.fetch_add(1, Ordering::Relaxed)
}

#[test]
fn generated_cases_observe_the_same_on_the_in_process_nats_and_a_real_server() {
    let cases_wanted = std::env::var("RUSTSTREAM_DIFF_CASES")
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("RUSTSTREAM_DIFF_CASES={v} is not a number"))
        })
        .unwrap_or(DEFAULT_CASES);
    let (runtime, server) = live();
    let mut runner = TestRunner::new(Config {
        cases: cases_wanted,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&cases(MAX_OPS), |case| {
        match compare(&server, &runtime, next_case(), &case) {
            Some(diff) => Err(TestCaseError::fail(diff)),
            None => Ok(()),
        }
    });
    eprintln!(
        "{} cases on {}; known differences left out: {:?}",
        cases_wanted,
        NatsServer::version(),
        USED.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    );
    match result {
        Ok(()) => {}
        Err(TestError::Fail(why, case)) => {
            panic!("minimal case: {case:?}\n{why}")
        }
        Err(TestError::Abort(why)) => panic!("the run stopped: {why}"),
    }
}

/// Runs a pinned case on both servers and fails with both logs when they differ.
fn pinned(ops: Vec<Op>) {
    let (runtime, server) = live();
    let case = Case(ops);
    if let Some(diff) = compare(&server, &runtime, next_case(), &case) {
        panic!("case: {case:?}\n{diff}");
    }
}

/// Each kind of operation once, in an order where each has something to act on: the
/// generator's vocabulary, checked on every run whatever it draws.
#[test]
fn every_kind_of_operation_observes_the_same() {
    pinned(vec![
        Op::Publish {
            subject: Subject::A,
            id: Some(0),
            expect: Expect::Nothing,
        },
        Op::Publish {
            subject: Subject::B,
            id: Some(0),
            expect: Expect::Nothing,
        },
        Op::Publish {
            subject: Subject::B,
            id: None,
            expect: Expect::LastSeq(1),
        },
        Op::Fetch {
            consumer: 0,
            batch: 3,
        },
        Op::Settle {
            consumer: 0,
            pick: 0,
            how: How::Wpi,
        },
        Op::Settle {
            consumer: 0,
            pick: 0,
            how: How::Nak,
        },
        Op::Settle {
            consumer: 0,
            pick: 0,
            how: How::NakDelay(20),
        },
        Op::Fetch {
            consumer: 0,
            batch: 3,
        },
        Op::Settle {
            consumer: 0,
            pick: 1,
            how: How::Term,
        },
        Op::Settle {
            consumer: 0,
            pick: 0,
            how: How::Ack,
        },
        Op::WaitAckWait,
        Op::Fetch {
            consumer: 0,
            batch: 3,
        },
        Op::Fetch {
            consumer: 1,
            batch: 2,
        },
        Op::DeleteConsumer { consumer: 1 },
        Op::Fetch {
            consumer: 1,
            batch: 1,
        },
        Op::CreateConsumer { consumer: 1 },
        Op::Fetch {
            consumer: 1,
            batch: 1,
        },
        Op::KvCreate { key: 0, value: 1 },
        Op::KvCreate { key: 0, value: 2 },
        Op::KvUpdate {
            key: 0,
            value: 3,
            offset: 0,
        },
        Op::KvUpdate {
            key: 0,
            value: 4,
            offset: -1,
        },
        Op::KvDelete { key: 0 },
        Op::KvCreate { key: 0, value: 5 },
    ]);
}

#[test]
fn a_known_difference_blanks_only_what_it_names() {
    let line = "    a: delivered=(1, 2) ack_pending=1 redelivered=0 pending=0 ack_floor=(0, 0)";
    assert_eq!(
        blank_filtered_stream_positions(line),
        "    a: delivered=(1, *) ack_pending=1 redelivered=0 pending=0 ack_floor=(0, *)"
    );
    let other = "    all: delivered=(1, 2) ack_pending=1 redelivered=0 pending=0 ack_floor=(0, 0)";
    assert_eq!(blank_filtered_stream_positions(other), other);
    let op = " 1. publish a id=m1 expect-last-seq=2";
    let blanked = "    -> (a duplicate, or refused: the servers differ)";
    assert_eq!(
        blank_duplicate_or_refusal(op, "    -> stored in DIFF1 at 1 (duplicate)"),
        blanked
    );
    assert_eq!(
        blank_duplicate_or_refusal(op, "    -> refused: Expectation"),
        blanked
    );
    let stored = "    -> stored in DIFF1 at 2";
    assert_eq!(blank_duplicate_or_refusal(op, stored), stored);
    let no_id = " 1. publish a expect-last-seq=2";
    let refused = "    -> refused: Expectation";
    assert_eq!(blank_duplicate_or_refusal(no_id, refused), refused);
    let ops = [
        " 7. create consumer all".to_owned(),
        " 8. fetch all batch=2".to_owned(),
    ];
    assert_eq!(
        blank_pending_after_update(
            &ops,
            "    all: delivered=(2, 2) ack_pending=2 redelivered=0 pending=3 ack_floor=(0, 0)"
        ),
        "    all: delivered=(2, 2) ack_pending=2 redelivered=0 pending=* ack_floor=(0, 0)"
    );
    assert_eq!(
        blank_pending_after_update(
            &ops,
            "    -> diff1.b p0 delivered=1 stream_seq=1 consumer_seq=1 pending=2"
        ),
        "    -> diff1.b p0 delivered=1 stream_seq=1 consumer_seq=1 pending=*"
    );
    let other = "    a: delivered=(0, 0) ack_pending=0 redelivered=0 pending=1 ack_floor=(0, 0)";
    assert_eq!(blank_pending_after_update(&ops, other), other);
    assert_eq!(Version::parse("nats-server: v2.9.10"), Version(2, 9, 10));
    assert_eq!(Version::parse("nats-server: v2.15.1"), Version(2, 15, 1));
}

/// Found by the generated cases: a key-value update expecting revision 0 writes a key that
/// holds no message (the server checks the key's last sequence, 0 when there is none); the
/// in-process NATS refused it.
#[test]
fn an_update_expecting_revision_0_writes_a_key_never_written() {
    pinned(vec![Op::KvUpdate {
        key: 0,
        value: 0,
        offset: 0,
    }]);
}

/// A delete leaves a tombstone that is the key's last message: an update expecting the
/// tombstone's revision writes, one expecting the value's before it does not.
#[test]
fn an_update_after_a_delete_expects_the_tombstone_revision() {
    pinned(vec![
        Op::KvCreate { key: 0, value: 1 },
        Op::KvDelete { key: 0 },
        Op::KvUpdate {
            key: 0,
            value: 2,
            offset: 0,
        },
        Op::KvUpdate {
            key: 0,
            value: 3,
            offset: 1,
        },
    ]);
}

/// Found by the generated cases: the server checks `Nats-Expected-Stream` before it looks for a
/// duplicate, so a repeated message id expecting another stream is refused, not acknowledged
/// as a duplicate.
#[test]
fn a_wrong_expected_stream_is_refused_before_the_duplicate_check() {
    pinned(vec![
        Op::Publish {
            subject: Subject::A,
            id: Some(2),
            expect: Expect::Nothing,
        },
        Op::Publish {
            subject: Subject::A,
            id: Some(2),
            expect: Expect::Stream { right: false },
        },
    ]);
}

/// Found by the generated cases: an empty `Nats-Expected-Last-Msg-Id` expects nothing (the
/// server skips an empty expectation); the in-process NATS compared it with the last id.
#[test]
fn an_empty_expected_last_msg_id_expects_nothing() {
    pinned(vec![
        Op::Publish {
            subject: Subject::A,
            id: Some(0),
            expect: Expect::Nothing,
        },
        Op::Publish {
            subject: Subject::A,
            id: None,
            expect: Expect::LastMsgId(None),
        },
    ]);
}

/// A repeated message id with a wrong `Nats-Expected-Last-Sequence`: nats-server 2.9 answers
/// with the duplicate (it looks for one first), 2.10 and later refuse it (they check every
/// expectation first); the in-process NATS follows the current server.
#[test]
fn a_duplicate_with_a_wrong_expected_last_sequence() {
    pinned(vec![
        Op::Publish {
            subject: Subject::A,
            id: Some(1),
            expect: Expect::Nothing,
        },
        Op::Publish {
            subject: Subject::A,
            id: Some(1),
            expect: Expect::LastSeq(2),
        },
    ]);
}

/// As [`a_duplicate_with_a_wrong_expected_last_sequence`], with `Nats-Expected-Last-Msg-Id`.
#[test]
fn a_duplicate_with_a_wrong_expected_last_msg_id() {
    pinned(vec![
        Op::Publish {
            subject: Subject::A,
            id: Some(1),
            expect: Expect::Nothing,
        },
        Op::Publish {
            subject: Subject::A,
            id: Some(1),
            expect: Expect::LastMsgId(Some(2)),
        },
    ]);
}

/// The case in which nats-server 2.9 once reported a `num_pending` one too high after the
/// consumer was created over itself (`num-pending-after-consumer-update`, docs/testing.md).
#[test]
fn a_publish_after_a_consumer_is_created_over_itself() {
    let publish = |subject, id, expect| Op::Publish {
        subject,
        id,
        expect,
    };
    pinned(vec![
        publish(Subject::B, None, Expect::Nothing),
        publish(Subject::B, Some(1), Expect::LastMsgId(Some(2))),
        publish(Subject::B, Some(1), Expect::Stream { right: true }),
        Op::KvDelete { key: 1 },
        publish(Subject::A, None, Expect::Nothing),
        Op::WaitAckWait,
        Op::Fetch {
            consumer: 0,
            batch: 2,
        },
        Op::CreateConsumer { consumer: 0 },
        publish(Subject::B, Some(1), Expect::LastSeq(4)),
        publish(Subject::B, Some(0), Expect::Nothing),
        Op::KvUpdate {
            key: 0,
            value: 5,
            offset: 1,
        },
        Op::Settle {
            consumer: 0,
            pick: 3,
            how: How::Term,
        },
    ]);
}
