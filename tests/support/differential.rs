//! The differential test of the in-process NATS (`tests/in_process_differential.rs`): generated
//! sequences of operations, run by one interpreter on the emulation and on a real nats-server,
//! and what a client could observe of each compared line by line.
//!
//! - this file: the operations, how they are generated and printed (a shrunk case prints as
//!   one operation a line);
//! - [`server`]: the two servers behind one interface (the [`Transport`] trait where it has the
//!   operation, the test's own client where it has not, as the fidelity tests do);
//! - [`run`]: the interpreter;
//! - [`known`]: the known differences between the servers, each named, and how the comparison
//!   leaves each out.
//!
//! [`Transport`]: ruststream_nats::transport::Transport

pub mod known;
pub mod run;
pub mod server;

use std::fmt;
use std::time::Duration;

use proptest::prelude::*;

/// The consumers' ack_wait: long enough that no delivery runs out of it between two explicit
/// waits of a case, short enough that a wait past it is cheap on the real clock.
pub const ACK_WAIT: Duration = Duration::from_millis(1500);
/// How long a fetch waits for a batch it cannot fill.
pub const FETCH_EXPIRES: Duration = Duration::from_millis(50);
/// How long past a deadline the interpreter waits before it counts on the server having acted.
pub const MARGIN: Duration = Duration::from_millis(250);

/// One of the two subjects of a case's stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    A,
    B,
}

impl Subject {
    pub fn token(self) -> &'static str {
        match self {
            Self::A => "a",
            Self::B => "b",
        }
    }
}

/// A `Nats-Expected-*` header on a publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    Nothing,
    /// `Nats-Expected-Stream`: the case's stream, or another name.
    Stream {
        right: bool,
    },
    /// `Nats-Expected-Last-Sequence`.
    LastSeq(u64),
    /// `Nats-Expected-Last-Msg-Id`: `m<n>`, or empty.
    LastMsgId(Option<u8>),
}

/// How a delivery in hand is settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    Ack,
    Nak,
    /// `-NAK {"delay": ns}`, milliseconds.
    NakDelay(u64),
    Term,
    Wpi,
}

impl How {
    /// The wire form.
    pub fn wire(self) -> String {
        match self {
            Self::Ack => "+ACK".to_owned(),
            Self::Nak => "-NAK".to_owned(),
            Self::NakDelay(ms) => {
                ruststream_test_server::client::nak_with(Duration::from_millis(ms))
            }
            Self::Term => "+TERM".to_owned(),
            Self::Wpi => "+WPI".to_owned(),
        }
    }
}

/// One operation of a case. Consumer 0 is durable `all` (every subject of the stream),
/// consumer 1 durable `a` (subject `a` only); both exist when a case starts. Keys are `k0`..`k2`
/// of the case's bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// A JetStream publish of payload `p<op index>`, with message id `m<id>` when given.
    Publish {
        subject: Subject,
        id: Option<u8>,
        expect: Expect,
    },
    /// One pull request of up to `batch` messages, expiring after [`FETCH_EXPIRES`].
    Fetch {
        consumer: u8,
        batch: u8,
    },
    /// Settles delivery number `pick` (modulo how many) of those the consumer's fetches handed
    /// over and nothing settled for good yet, as a confirmed acknowledgement.
    Settle {
        consumer: u8,
        pick: u8,
        how: How,
    },
    /// Waits until every ack_wait started so far ran out.
    WaitAckWait,
    CreateConsumer {
        consumer: u8,
    },
    DeleteConsumer {
        consumer: u8,
    },
    /// Writes `v<value>` to a key that holds none.
    KvCreate {
        key: u8,
        value: u8,
    },
    /// Writes `v<value>` to a key expecting its last revision seen plus `offset`.
    KvUpdate {
        key: u8,
        value: u8,
        offset: i8,
    },
    KvDelete {
        key: u8,
    },
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Publish {
                subject,
                id,
                expect,
            } => {
                write!(f, "publish {}", subject.token())?;
                if let Some(id) = id {
                    write!(f, " id=m{id}")?;
                }
                match expect {
                    Expect::Nothing => Ok(()),
                    Expect::Stream { right } => {
                        write!(
                            f,
                            " expect-stream={}",
                            if *right { "ours" } else { "other" }
                        )
                    }
                    Expect::LastSeq(n) => write!(f, " expect-last-seq={n}"),
                    Expect::LastMsgId(Some(id)) => write!(f, " expect-last-id=m{id}"),
                    Expect::LastMsgId(None) => write!(f, " expect-last-id=\"\""),
                }
            }
            Self::Fetch { consumer, batch } => {
                write!(f, "fetch {} batch={batch}", consumer_name(*consumer))
            }
            Self::Settle {
                consumer,
                pick,
                how,
            } => {
                write!(
                    f,
                    "settle {} #{pick} {}",
                    consumer_name(*consumer),
                    how.wire()
                )
            }
            Self::WaitAckWait => f.write_str("wait past ack_wait"),
            Self::CreateConsumer { consumer } => {
                write!(f, "create consumer {}", consumer_name(*consumer))
            }
            Self::DeleteConsumer { consumer } => {
                write!(f, "delete consumer {}", consumer_name(*consumer))
            }
            Self::KvCreate { key, value } => write!(f, "kv create k{key}=v{value}"),
            Self::KvUpdate { key, value, offset } => {
                write!(f, "kv update k{key}=v{value} at last revision{offset:+}")
            }
            Self::KvDelete { key } => write!(f, "kv delete k{key}"),
        }
    }
}

/// The name of consumer `n` (0 or 1).
pub fn consumer_name(n: u8) -> &'static str {
    if n == 0 { "all" } else { "a" }
}

/// A generated case: its operations in order.
#[derive(Clone, PartialEq, Eq)]
pub struct Case(pub Vec<Op>);

impl fmt::Debug for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} operations:", self.0.len())?;
        for (i, op) in self.0.iter().enumerate() {
            writeln!(f, "  {i:>2}. {op}")?;
        }
        Ok(())
    }
}

fn expect() -> impl Strategy<Value = Expect> {
    prop_oneof![
        6 => Just(Expect::Nothing),
        1 => any::<bool>().prop_map(|right| Expect::Stream { right }),
        1 => (0u64..5).prop_map(Expect::LastSeq),
        1 => proptest::option::of(0u8..3).prop_map(Expect::LastMsgId),
    ]
}

fn how() -> impl Strategy<Value = How> {
    prop_oneof![
        3 => Just(How::Ack),
        2 => Just(How::Nak),
        2 => (5u64..80).prop_map(How::NakDelay),
        1 => Just(How::Term),
        1 => Just(How::Wpi),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (
            prop_oneof![Just(Subject::A), Just(Subject::B)],
            proptest::option::weighted(0.4, 0u8..3),
            expect()
        )
            .prop_map(|(subject, id, expect)| Op::Publish { subject, id, expect }),
        5 => (0u8..2, 1u8..4).prop_map(|(consumer, batch)| Op::Fetch { consumer, batch }),
        6 => (0u8..2, 0u8..4, how()).prop_map(|(consumer, pick, how)| Op::Settle {
            consumer,
            pick,
            how
        }),
        1 => Just(Op::WaitAckWait),
        1 => (0u8..2).prop_map(|consumer| Op::CreateConsumer { consumer }),
        1 => (0u8..2).prop_map(|consumer| Op::DeleteConsumer { consumer }),
        2 => (0u8..3, 0u8..10).prop_map(|(key, value)| Op::KvCreate { key, value }),
        2 => (0u8..3, 0u8..10, -1i8..=1).prop_map(|(key, value, offset)| Op::KvUpdate {
            key,
            value,
            offset
        }),
        1 => (0u8..3).prop_map(|key| Op::KvDelete { key }),
    ]
}

/// Cases of 1 to `max_ops` operations.
pub fn cases(max_ops: usize) -> impl Strategy<Value = Case> {
    proptest::collection::vec(op(), 1..=max_ops).prop_map(Case)
}
