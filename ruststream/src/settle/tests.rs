//! Over 500 lines on purpose: one test per row of the seeds' tables, kept together so the file
//! reads as the tables do.
//!
//! The settlement decision, row by row against the seeds' tables, then as properties.

use std::fmt::Write as _;

use proptest::prelude::*;

use super::*;
use HandlerOutcome as O;

/// The delay the seeds' examples ask for (a busy bank: 30 seconds).
const D: Duration = Duration::from_secs(30);

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).expect("a test attempt or cap is at least 1")
}

fn jetstream(attempt: u32) -> Facts {
    Facts::jetstream(nz(attempt))
}

/// A Core delivery with a subject for copies to go to: a `CoreSubject`, or a `CoreWildcard` whose
/// registration names one (without one the app refuses to start).
fn core(attempt: u32) -> Facts {
    Facts::core(nz(attempt)).with_copy_target()
}

/// A `CoreWildcard` delivery whose registration names no subject for copies.
fn core_without_target(attempt: u32) -> Facts {
    Facts::core(nz(attempt))
}

/// A cap of `n` deliveries.
fn cap(n: u32) -> NonZeroU32 {
    nz(n)
}

// The expected decisions, spelled the way the seeds say them.

/// Send `kind` to the server, nothing else.
fn send(kind: AckKind) -> Decision {
    Decision::settle(Settle::Send(kind))
}

/// Report `AckError::Unsupported` for `kind`, nothing else.
fn unsupported(kind: AckKind) -> Decision {
    Decision::settle(Settle::Unsupported(kind))
}

/// Nothing at all.
fn nothing() -> Decision {
    Decision::settle(Settle::Nothing)
}

/// The dead-letter publish, then `settle`.
fn dead_letter_then(settle: Settle) -> Decision {
    Decision {
        dead_letter: true,
        copy: None,
        settle,
    }
}

/// A copy published after `after`, carrying `retry_count`, with `settle` for the original.
fn copy(after: Duration, retry_count: u32, settle: Settle) -> Decision {
    Decision {
        dead_letter: false,
        copy: Some(RetryCopy { after, retry_count }),
        settle,
    }
}

/// What the decision is asked about.
#[derive(Debug)]
enum Given {
    Outcome(HandlerOutcome),
    Undecodable,
    Unpublishable,
}

/// One line of a seed table: the sentence it tests, the delivery, the answer, the decision.
struct Row {
    seed: &'static str,
    facts: Facts,
    given: Given,
    expect: Decision,
}

fn row(seed: &'static str, facts: Facts, outcome: HandlerOutcome, expect: Decision) -> Row {
    Row {
        seed,
        facts,
        given: Given::Outcome(outcome),
        expect,
    }
}

fn undecodable(seed: &'static str, facts: Facts, expect: Decision) -> Row {
    Row {
        seed,
        facts,
        given: Given::Undecodable,
        expect,
    }
}

fn unpublishable(seed: &'static str, facts: Facts, expect: Decision) -> Row {
    Row {
        seed,
        facts,
        given: Given::Unpublishable,
        expect,
    }
}

/// Checks every row and reports all the rows that fail at once, each with its seed sentence.
fn check(rows: &[Row]) {
    let mut failures = String::new();
    for row in rows {
        let got = match &row.given {
            Given::Outcome(outcome) => decide(outcome, &row.facts),
            Given::Undecodable => decide_undecodable(&row.facts),
            Given::Unpublishable => decide_unpublishable(&row.facts),
        };
        if got != row.expect {
            let _ = write!(
                failures,
                "\n\n{}\n  given    {:?} on {:?}\n  expected {:?}\n  got      {:?}",
                row.seed, row.given, row.facts, row.expect, got,
            );
        }
    }
    assert!(failures.is_empty(), "rows that fail:{failures}");
}

/// One line of a diagram about the wire: the acknowledgement's wire form, and whether the server
/// sends the message again.
fn wire(seed: &str, kind: AckKind, form: &str, comes_back: bool) {
    assert_eq!(kind.to_string(), form, "{seed}");
    assert_eq!(send(kind).brings_back(), comes_back, "{seed}");
    assert_eq!(
        kind.is_final(),
        !comes_back,
        "{seed}: final unless it comes back"
    );
}

/// Seed 000, "Settlement": the JetStream diagram, rows 4 to 13.
#[test]
fn seed_000_settlement_diagram() {
    use AckKind::*;
    check(&[
        // 4. ack() → +ACK
        row("ack() → +ACK", jetstream(1), O::ack(), send(Ack)),
        row(
            "ack() → +ACK (only a retry consults the cap: an ack at the cap is still +ACK)",
            jetstream(3).with_cap(cap(3)).with_dead_letter(),
            O::ack(),
            send(Ack),
        ),
        // 6. retry() → -NAK
        row("retry() → -NAK", jetstream(1), O::retry(), send(Nak)),
        row(
            "retry() → -NAK (below a declared cap)",
            jetstream(2).with_cap(cap(3)).with_dead_letter(),
            O::retry(),
            send(Nak),
        ),
        // 7. -NAK → sent again now, delivered + 1
        row(
            "-NAK → sent again now, delivered + 1 (the redelivery is the next attempt: \
             with a cap of 2 it is at the cap)",
            jetstream(1).with_cap(cap(2)).redelivered(),
            O::retry(),
            send(Term),
        ),
        // 8. retry_after(d) → -NAK {"delay": …}
        row(
            r#"retry_after(d) → -NAK {"delay": …}"#,
            jetstream(1),
            O::retry_after(D),
            send(NakAfter(D)),
        ),
        row(
            r#"retry_after(d) → -NAK {"delay": …} (a zero delay is a plain -NAK)"#,
            jetstream(1),
            O::retry_after(Duration::ZERO),
            send(Nak),
        ),
        // 9. -NAK {"delay": …} → held for d, then sent again, delivered + 1
        row(
            r#"-NAK {"delay": …} → held for d, then sent again, delivered + 1 (the redelivery is
             the next attempt: with a cap of 2 it is at the cap)"#,
            jetstream(1).with_cap(cap(2)).redelivered(),
            O::retry_after(D),
            send(Term),
        ),
        // 10. drop() → +TERM
        row("drop() → +TERM", jetstream(1), O::drop(), send(Term)),
        row(
            "drop() → +TERM (a drop is never dead-lettered)",
            jetstream(1).with_cap(cap(1)).with_dead_letter(),
            O::drop(),
            send(Term),
        ),
        // 12. no outcome before ack_wait → nothing: a handler that has not answered has no
        // outcome to decide on; the runtime sends nothing and `decide` is not called.
        // 13. nothing → sent again after ack_wait, delivered + 1
        row(
            "nothing → sent again after ack_wait, delivered + 1 (an expired ack_wait counts \
             toward the cap)",
            jetstream(2).with_cap(cap(2)).with_dead_letter(),
            O::retry(),
            dead_letter_then(Settle::Send(Term)),
        ),
    ]);
    // 5. +ACK → finished, never sent again
    wire("+ACK → finished, never sent again", Ack, "+ACK", false);
    // 7. -NAK → sent again now
    wire("-NAK → sent again now", Nak, "-NAK", true);
    // 9. -NAK {"delay": …} → held for d, then sent again
    wire(
        r#"-NAK {"delay": …} → held for d, then sent again"#,
        NakAfter(D),
        r#"-NAK {"delay": 30000000000}"#,
        true,
    );
    // 11. +TERM → ended, never sent again
    wire("+TERM → ended, never sent again", Term, "+TERM", false);
}

/// Seed 000, "Settlement": the sentence under the diagram and the Core table.
#[test]
fn seed_000_core_table() {
    use AckKind::*;
    check(&[
        // "On Core NATS every outcome reports AckError::Unsupported: the server settles nothing"
        // ack, drop → AckError::Unsupported
        row(
            "ack, drop → AckError::Unsupported (ack)",
            core(1).with_cap(cap(3)).with_dead_letter(),
            O::ack(),
            unsupported(Ack),
        ),
        row(
            "ack, drop → AckError::Unsupported (drop)",
            core(1).with_cap(cap(3)).with_dead_letter(),
            O::drop(),
            unsupported(Term),
        ),
        // retry() → AckError::Unsupported; under a declared cap, a copy published at once
        row(
            "retry() → AckError::Unsupported (no cap: nothing comes back)",
            core(1),
            O::retry(),
            unsupported(Nak),
        ),
        row(
            "retry() → AckError::Unsupported; under a declared cap, a copy published at once",
            core(1).with_cap(cap(3)),
            O::retry(),
            copy(Duration::ZERO, 1, Settle::Unsupported(Nak)),
        ),
        row(
            "retry() → under a declared cap, a copy published at once (a copy's copy carries \
             its own attempt)",
            core(2).with_cap(cap(3)),
            O::retry(),
            copy(Duration::ZERO, 2, Settle::Unsupported(Nak)),
        ),
        // retry_after(d) → a copy published after d
        row(
            "retry_after(d) → a copy published after d",
            core(1),
            O::retry_after(D),
            copy(D, 1, Settle::Nothing),
        ),
        row(
            "retry_after(d) → a copy published after d (below a declared cap)",
            core(2).with_cap(cap(3)).with_dead_letter(),
            O::retry_after(D),
            copy(D, 2, Settle::Nothing),
        ),
        // no outcome → nothing: no outcome, no decision.
    ]);
}

/// Seed 000, "Retries": the diagram, rows 1 to 7, and the paragraphs under it.
#[test]
fn seed_000_retries_diagram() {
    use AckKind::*;
    check(&[
        // 1. Below the cap: JetStream: -NAK with the delay, the server holds it
        row(
            "below the cap, JetStream: -NAK with the delay, the server holds it",
            jetstream(2).with_cap(cap(3)).with_dead_letter(),
            O::retry_after(D),
            send(NakAfter(D)),
        ),
        // 1. Below the cap: Core subject: a copy published to the subject
        row(
            "below the cap, Core subject: a copy published to the subject",
            core(2).with_cap(cap(3)).with_dead_letter(),
            O::retry_after(D),
            copy(D, 2, Settle::Nothing),
        ),
        // 1. Below the cap: Core pattern: a copy to the subject the mount site names
        row(
            "below the cap, Core pattern: a copy to the subject the mount site names",
            core(2).with_cap(cap(3)),
            O::retry(),
            copy(Duration::ZERO, 2, Settle::Unsupported(Nak)),
        ),
        row(
            "Core pattern: a copy to the subject the mount site names (none named: no copy; \
             the app refuses to start, the decision stays total)",
            core_without_target(1).with_cap(cap(3)),
            O::retry_after(D),
            nothing(),
        ),
        row(
            "Core pattern: a copy to the subject the mount site names (none named: retry() \
             under a cap is only unsupported)",
            core_without_target(1).with_cap(cap(3)),
            O::retry(),
            unsupported(Nak),
        ),
        // 2. At the cap: Dead-letter subject: the delivery published as it arrived
        row(
            "at the cap, dead-letter subject: the delivery published as it arrived \
             (JetStream: then +TERM)",
            jetstream(3).with_cap(cap(3)).with_dead_letter(),
            O::retry(),
            dead_letter_then(Settle::Send(Term)),
        ),
        row(
            "at the cap, dead-letter subject: the delivery published as it arrived \
             (Core retry_after: no copy)",
            core(3).with_cap(cap(3)).with_dead_letter(),
            O::retry_after(D),
            dead_letter_then(Settle::Nothing),
        ),
        row(
            "at the cap, dead-letter subject: the delivery published as it arrived \
             (Core retry(): still unsupported)",
            core(3).with_cap(cap(3)).with_dead_letter(),
            O::retry(),
            dead_letter_then(Settle::Unsupported(Nak)),
        ),
        // 2. At the cap: No dead letter: +TERM on JetStream, nothing more on Core
        row(
            "at the cap, no dead letter: +TERM on JetStream",
            jetstream(3).with_cap(cap(3)),
            O::retry_after(D),
            send(Term),
        ),
        row(
            "at the cap, no dead letter: nothing more on Core (retry_after)",
            core(3).with_cap(cap(3)),
            O::retry_after(D),
            nothing(),
        ),
        row(
            "at the cap, no dead letter: nothing more on Core (retry())",
            core(3).with_cap(cap(3)),
            O::retry(),
            unsupported(Nak),
        ),
        // 3. A delivery (JetStream counts its deliveries; Core carries a header) → the handler
        // returns retry_after(delay), or retry() under a declaration
        row(
            "retry() under a declaration: without one, a Core retry() is not a retry \
             (no copy, no dead letter)",
            core(5).with_dead_letter(),
            O::retry(),
            unsupported(Nak),
        ),
        row(
            "JetStream counts its deliveries: without a cap a retry comes back forever",
            jetstream(1000).with_dead_letter(),
            O::retry(),
            send(Nak),
        ),
        row(
            "Core carries a header: without a cap retry_after comes back, carrying its attempt",
            core(1000).with_dead_letter(),
            O::retry_after(D),
            copy(D, 1000, Settle::Nothing),
        ),
        // 4. → max_attempts: is this attempt below the cap? (a retry; nothing else asks)
        row(
            "only a retry asks max_attempts: a drop at the cap is +TERM, not dead-lettered",
            jetstream(3).with_cap(cap(3)).with_dead_letter(),
            O::drop(),
            send(Term),
        ),
        row(
            "only a retry asks max_attempts: a Core ack at the cap is not dead-lettered",
            core(3).with_cap(cap(3)).with_dead_letter(),
            O::ack(),
            unsupported(Ack),
        ),
        // 5. is this attempt below the cap? → Below the cap
        row(
            "below the cap: the first delivery counts as one, so a cap of 2 leaves one retry",
            jetstream(1).with_cap(cap(2)).with_dead_letter(),
            O::retry(),
            send(Nak),
        ),
        row(
            "below the cap: the first delivery counts as one (Core)",
            core(1).with_cap(cap(2)).with_dead_letter(),
            O::retry(),
            copy(Duration::ZERO, 1, Settle::Unsupported(Nak)),
        ),
        // 6. is this attempt below the cap? → At the cap
        row(
            "at the cap: the first delivery counts as one, so a cap of 1 leaves no retry",
            jetstream(1).with_cap(cap(1)).with_dead_letter(),
            O::retry(),
            dead_letter_then(Settle::Send(Term)),
        ),
        row(
            "at the cap: the first delivery counts as one (Core)",
            core(1).with_cap(cap(1)),
            O::retry_after(D),
            nothing(),
        ),
        row(
            "at the cap: past it counts as at it (an expired ack_wait counts too)",
            jetstream(7).with_cap(cap(3)),
            O::retry(),
            send(Term),
        ),
        // 7. A Core copy waits for its delay inside the process: a stop before the timer fires
        // loses it (the copy is the runtime's to time; the server holds nothing)
        row(
            "a Core copy waits for its delay inside the process",
            core(1),
            O::retry_after(Duration::from_secs(60)),
            copy(Duration::from_secs(60), 1, Settle::Nothing),
        ),
    ]);
}

/// Seed 002, "Acknowledgement and delivery guarantees": the JetStream table and the Core
/// dashboard.
#[test]
fn seed_002_acknowledgement_table() {
    use AckKind::*;
    check(&[
        // ack → +ACK → forgets the message for this consumer
        row(
            "ack → +ACK: forgets the message for this consumer",
            jetstream(1),
            O::ack(),
            send(Ack),
        ),
        // retry → -NAK → delivers it again at once
        row(
            "retry → -NAK: delivers it again at once",
            jetstream(1),
            O::retry(),
            send(Nak),
        ),
        // retry_after(delay) → -NAK with the delay → holds it and delivers it again after the
        // delay
        row(
            "retry_after(delay) → -NAK with the delay: holds it, delivers it after the delay",
            jetstream(1),
            O::retry_after(D),
            send(NakAfter(D)),
        ),
        // drop → +TERM → never delivers it again
        row(
            "drop → +TERM: never delivers it again",
            jetstream(1),
            O::drop(),
            send(Term),
        ),
        // no settlement → nothing → delivers it again after ack_wait: no outcome, no decision.
        // "An expired ack_wait also counts as a delivery for the attempt cap."
        row(
            "an expired ack_wait also counts as a delivery for the attempt cap",
            jetstream(1).with_cap(cap(2)).redelivered(),
            O::retry_after(D),
            send(Term),
        ),
        // "A retry without a cap comes back forever"
        row(
            "a retry without a cap comes back forever",
            jetstream(u32::MAX),
            O::retry(),
            send(Nak),
        ),
        // "Settling a Core delivery reports AckError::Unsupported"
        row(
            "settling a Core delivery reports AckError::Unsupported",
            core(1),
            O::ack(),
            unsupported(Ack),
        ),
    ]);
}

/// Seed 003, "At most once": the paragraph and the shipping notice.
#[test]
fn seed_003_at_most_once() {
    use AckKind::*;
    check(&[
        // "ack and drop end the delivery."
        row(
            "ack and drop end the delivery (ack)",
            core(1),
            O::ack(),
            unsupported(Ack),
        ),
        row(
            "ack and drop end the delivery (drop)",
            core(1),
            O::drop(),
            unsupported(Term),
        ),
        // "A plain retry ends it too: the server has nothing to deliver again"
        row(
            "a plain retry ends it too: the server has nothing to deliver again",
            core(1).with_dead_letter(),
            O::retry(),
            unsupported(Nak),
        ),
        // "retry_after, or any retry under a cap, makes the framework publish a copy of the
        // message back to the subject, so the message comes back once"
        row(
            "retry_after makes the framework publish a copy back to the subject",
            core(1),
            O::retry_after(D),
            copy(D, 1, Settle::Nothing),
        ),
        row(
            "any retry under a cap makes the framework publish a copy back to the subject",
            core(1).with_cap(cap(5)),
            O::retry(),
            copy(Duration::ZERO, 1, Settle::Unsupported(Nak)),
        ),
        // "That copy waits in the service's memory"
        row(
            "that copy waits in the service's memory (retry_after(0): published at once)",
            core(1),
            O::retry_after(Duration::ZERO),
            copy(Duration::ZERO, 1, Settle::Nothing),
        ),
        // "A shipping notice whose mail server does not answer asks for a retry, and the message
        // is not delivered again."
        row(
            "a shipping notice asks for a retry, and the message is not delivered again",
            core(1),
            O::retry(),
            unsupported(Nak),
        ),
    ]);
}

/// API.md, "Settlement (the seeds' tables, restated)": the table and its bullets.
#[test]
fn api_settlement_table() {
    use AckKind::*;
    check(&[
        // ack() | +ACK | AckError::Unsupported, logged
        row("ack() → +ACK", jetstream(1), O::ack(), send(Ack)),
        row(
            "ack() → AckError::Unsupported, logged",
            core(1),
            O::ack(),
            unsupported(Ack),
        ),
        // retry() | -NAK: sent again now, delivered + 1 | AckError::Unsupported; under a
        // declared cap, a copy published at once
        row(
            "retry() → -NAK: sent again now",
            jetstream(1),
            O::retry(),
            send(Nak),
        ),
        row(
            "retry() → AckError::Unsupported",
            core(1),
            O::retry(),
            unsupported(Nak),
        ),
        row(
            "retry() → AckError::Unsupported; under a declared cap, a copy published at once",
            core(1).with_cap(cap(3)),
            O::retry(),
            copy(Duration::ZERO, 1, Settle::Unsupported(Nak)),
        ),
        // retry_after(d) | -NAK {"delay": nanoseconds}: held for d, same stream sequence | a copy
        // published after d, from a timer in the process
        row(
            r#"retry_after(d) → -NAK {"delay": nanoseconds}: held for d"#,
            jetstream(1),
            O::retry_after(D),
            send(NakAfter(D)),
        ),
        row(
            "retry_after(d) → a copy published after d, from a timer in the process",
            core(1),
            O::retry_after(D),
            copy(D, 1, Settle::Nothing),
        ),
        // drop() | +TERM | AckError::Unsupported, logged
        row("drop() → +TERM", jetstream(1), O::drop(), send(Term)),
        row(
            "drop() → AckError::Unsupported, logged",
            core(1),
            O::drop(),
            unsupported(Term),
        ),
        // nothing before ack_wait | nothing sent | nothing: no outcome, no decision.
        // "The cap (max_attempts) counts the first delivery as one."
        row(
            "the cap counts the first delivery as one",
            jetstream(1).with_cap(cap(1)),
            O::retry(),
            send(Term),
        ),
        // "Below the cap a retry brings the message back"
        row(
            "below the cap a retry brings the message back (JetStream)",
            jetstream(2).with_cap(cap(3)).with_dead_letter(),
            O::retry_after(D),
            send(NakAfter(D)),
        ),
        row(
            "below the cap a retry brings the message back (Core)",
            core(2).with_cap(cap(3)).with_dead_letter(),
            O::retry(),
            copy(Duration::ZERO, 2, Settle::Unsupported(Nak)),
        ),
        // "at the cap it goes to the dead-letter subject as it arrived (payload and headers
        // unchanged), or without one it is +TERMed (JetStream) or let go (Core)"
        row(
            "at the cap it goes to the dead-letter subject as it arrived (JetStream)",
            jetstream(3).with_cap(cap(3)).with_dead_letter(),
            O::retry_after(D),
            dead_letter_then(Settle::Send(Term)),
        ),
        row(
            "at the cap it goes to the dead-letter subject as it arrived (Core)",
            core(3).with_cap(cap(3)).with_dead_letter(),
            O::retry_after(D),
            dead_letter_then(Settle::Nothing),
        ),
        row(
            "or without one it is +TERMed (JetStream)",
            jetstream(3).with_cap(cap(3)),
            O::retry(),
            send(Term),
        ),
        row(
            "or without one it is let go (Core)",
            core(3).with_cap(cap(3)),
            O::retry_after(D),
            nothing(),
        ),
        // "The original is settled only after the dead-letter publish succeeded": the decision
        // carries both, the dead letter first (Decision's execution order).
    ]);
    // retry_after(d) | -NAK {"delay": nanoseconds}
    wire(
        r#"retry_after(d) → -NAK {"delay": nanoseconds}"#,
        NakAfter(Duration::from_millis(1500)),
        r#"-NAK {"delay": 1500000000}"#,
        true,
    );
}

/// A payload that does not decode is never retried: dead-lettered when declared, else `+TERM`ed
/// (JetStream) or let go (Core).
#[test]
fn undecodable_payloads() {
    use AckKind::*;
    check(&[
        undecodable(
            "undecodable, JetStream, no dead letter → +TERM",
            jetstream(1).with_cap(cap(5)),
            send(Term),
        ),
        undecodable(
            "undecodable, JetStream, dead letter → the delivery as it arrived, then +TERM",
            jetstream(1).with_cap(cap(5)).with_dead_letter(),
            dead_letter_then(Settle::Send(Term)),
        ),
        undecodable(
            "undecodable, Core, no dead letter → let go",
            core(1).with_cap(cap(5)),
            nothing(),
        ),
        undecodable(
            "undecodable, Core, dead letter → the delivery as it arrived, nothing more",
            core(1).with_cap(cap(5)).with_dead_letter(),
            dead_letter_then(Settle::Nothing),
        ),
        undecodable(
            "undecodable, no cap → dead letter all the same",
            core(1).with_dead_letter(),
            dead_letter_then(Settle::Nothing),
        ),
    ]);
}

/// A handling whose output can never be published (too large, a subject that is not one) is
/// not retried, whatever the attempt and the cap: dead-lettered when declared, else `+TERM`ed
/// (JetStream) or let go (Core). A transient failure stays a retry (the handler's outcome).
#[test]
fn unpublishable_outputs() {
    use AckKind::*;
    check(&[
        unpublishable(
            "unpublishable, JetStream, no dead letter → +TERM",
            jetstream(1),
            send(Term),
        ),
        unpublishable(
            "unpublishable, JetStream, dead letter, first of five → dead letter, then +TERM",
            jetstream(1).with_cap(cap(5)).with_dead_letter(),
            dead_letter_then(Settle::Send(Term)),
        ),
        unpublishable(
            "unpublishable, JetStream, dead letter, no cap → dead letter, then +TERM",
            jetstream(3).with_dead_letter(),
            dead_letter_then(Settle::Send(Term)),
        ),
        unpublishable(
            "unpublishable, JetStream, at the cap → as below it",
            jetstream(5).with_cap(cap(5)).with_dead_letter(),
            dead_letter_then(Settle::Send(Term)),
        ),
        unpublishable(
            "unpublishable, Core, no dead letter → let go",
            core(1).with_cap(cap(3)),
            nothing(),
        ),
        unpublishable(
            "unpublishable, Core, dead letter → the delivery as it arrived, no copy",
            core(1).with_cap(cap(3)).with_dead_letter(),
            dead_letter_then(Settle::Nothing),
        ),
        row(
            "a transient publish failure (the reply path's retry) → -NAK",
            jetstream(1).with_dead_letter(),
            HandlerOutcome::retry(),
            send(Nak),
        ),
    ]);
}

/// API.md, "Connection and outcomes": `dead_letter()` ends the delivery now, on any attempt,
/// and publishes it to the dead-letter subject (JetStream: `+TERM` after the publish; Core: the
/// publish); without a dead-letter subject it drops the message (`+TERM` on JetStream).
#[test]
fn the_handler_chooses_the_dead_letter() {
    use AckKind::*;
    let dead = O::dead_letter();
    check(&[
        row(
            "dead_letter(), JetStream, first of three → the dead-letter publish, then +TERM",
            jetstream(1).with_cap(cap(3)).with_dead_letter(),
            dead.clone(),
            dead_letter_then(Settle::Send(Term)),
        ),
        row(
            "dead_letter(), JetStream, no cap → the dead-letter publish, then +TERM",
            jetstream(1).with_dead_letter(),
            dead.clone(),
            dead_letter_then(Settle::Send(Term)),
        ),
        row(
            "dead_letter(), JetStream, at the cap → as a retry at the cap",
            jetstream(3).with_cap(cap(3)).with_dead_letter(),
            dead.clone(),
            decide(
                &O::retry(),
                &jetstream(3).with_cap(cap(3)).with_dead_letter(),
            ),
        ),
        row(
            "dead_letter(), JetStream, no dead-letter subject → +TERM",
            jetstream(1).with_cap(cap(3)),
            dead.clone(),
            send(Term),
        ),
        row(
            "dead_letter(), Core, first of three → the dead-letter publish, no copy",
            core(1).with_cap(cap(3)).with_dead_letter(),
            dead.clone(),
            dead_letter_then(Settle::Nothing),
        ),
        row(
            "dead_letter(), Core pattern without a copy target → the dead-letter publish",
            core_without_target(1).with_dead_letter(),
            dead.clone(),
            dead_letter_then(Settle::Nothing),
        ),
        row(
            "dead_letter(), Core, no dead-letter subject → let go",
            core(2).with_cap(cap(3)),
            dead,
            nothing(),
        ),
    ]);
}

/// Runs a handler that always answers `outcome` on a fresh delivery, following the way the
/// message comes back (a `-NAK` redelivery, or a Core copy), and returns how often the handler
/// ran and the last decision. Stops after `limit` runs.
fn run(outcome: &HandlerOutcome, first: Facts, limit: u32) -> (u32, Decision) {
    let mut facts = first;
    let mut runs = 0;
    loop {
        runs += 1;
        let decision = decide(outcome, &facts);
        facts = match (decision.copy, decision.settle) {
            (Some(copy), _) => Facts {
                attempt: copy.attempt(),
                ..facts
            },
            (None, Settle::Send(AckKind::Nak | AckKind::NakAfter(_))) => facts.redelivered(),
            _ => return (runs, decision),
        };
        if runs == limit {
            return (runs, decision);
        }
    }
}

#[test]
fn a_cap_of_three_runs_the_handler_three_times() {
    let jetstream = jetstream(1).with_cap(cap(3)).with_dead_letter();
    let (runs, last) = run(&O::retry(), jetstream, 10);
    assert_eq!(runs, 3);
    assert_eq!(last, dead_letter_then(Settle::Send(AckKind::Term)));

    let core = core(1).with_cap(cap(3)).with_dead_letter();
    let (runs, last) = run(&O::retry(), core, 10);
    assert_eq!(runs, 3);
    assert_eq!(last, dead_letter_then(Settle::Unsupported(AckKind::Nak)));
}

#[test]
fn copy_attempt_saturates() {
    let copy = RetryCopy {
        after: Duration::ZERO,
        retry_count: u32::MAX,
    };
    assert_eq!(copy.attempt().get(), u32::MAX);
    assert_eq!(jetstream(u32::MAX).redelivered().attempt.get(), u32::MAX);
}

fn any_model() -> impl Strategy<Value = DeliveryModel> {
    prop_oneof![Just(DeliveryModel::JetStream), Just(DeliveryModel::Core)]
}

fn any_delay() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::from_secs(60)),
        (0..=60_000_000_000u64).prop_map(Duration::from_nanos),
    ]
}

fn any_outcome() -> impl Strategy<Value = HandlerOutcome> {
    prop_oneof![
        Just(O::ack()),
        Just(O::retry()),
        any_delay().prop_map(O::retry_after),
        Just(O::drop()),
        Just(O::dead_letter()),
    ]
}

fn any_retry() -> impl Strategy<Value = HandlerOutcome> {
    prop_oneof![Just(O::retry()), any_delay().prop_map(O::retry_after)]
}

fn any_facts() -> impl Strategy<Value = Facts> {
    (
        any_model(),
        1..=20u32,
        proptest::option::of(1..=10u32),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(model, attempt, max_attempts, dead_letter, copy_target)| Facts {
                model,
                attempt: nz(attempt),
                max_attempts: max_attempts.map(nz),
                dead_letter,
                copy_target,
            },
        )
}

proptest! {
    #[test]
    fn jetstream_never_gets_a_copy(outcome in any_outcome(), facts in any_facts()) {
        let facts = Facts { model: DeliveryModel::JetStream, ..facts };
        prop_assert_eq!(decide(&outcome, &facts).copy, None);
    }

    #[test]
    fn at_the_cap_nothing_comes_back(outcome in any_outcome(), facts in any_facts()) {
        prop_assume!(facts.is_at_cap());
        let decision = decide(&outcome, &facts);
        prop_assert_eq!(decision.copy, None);
        prop_assert!(
            !matches!(decision.settle, Settle::Send(AckKind::Nak | AckKind::NakAfter(_))),
            "{:?}", decision
        );
        prop_assert!(!decision.brings_back());
    }

    #[test]
    fn below_the_cap_only_the_handler_asks_for_a_dead_letter(
        outcome in any_outcome(),
        facts in any_facts(),
    ) {
        prop_assume!(!facts.is_at_cap());
        let asked = outcome == O::dead_letter() && facts.dead_letter;
        prop_assert_eq!(decide(&outcome, &facts).is_dead_letter(), asked);
    }

    #[test]
    fn the_first_delivery_counts_as_one(
        outcome in any_retry(),
        model in any_model(),
        dead_letter in any::<bool>(),
        copy_target in any::<bool>(),
    ) {
        let facts = Facts {
            model,
            attempt: NonZeroU32::MIN,
            max_attempts: Some(NonZeroU32::MIN),
            dead_letter,
            copy_target,
        };
        prop_assert!(facts.is_at_cap());
        let decision = decide(&outcome, &facts);
        prop_assert!(!decision.brings_back());
        prop_assert_eq!(decision.dead_letter, dead_letter);
    }

    #[test]
    fn a_cap_of_n_runs_an_always_retrying_handler_n_times(
        outcome in any_retry(),
        model in any_model(),
        max_attempts in 1..=10u32,
        dead_letter in any::<bool>(),
    ) {
        let first = Facts {
            model,
            attempt: NonZeroU32::MIN,
            max_attempts: Some(nz(max_attempts)),
            dead_letter,
            copy_target: true,
        };
        let (runs, last) = run(&outcome, first, 100);
        prop_assert_eq!(runs, max_attempts);
        prop_assert_eq!(last.dead_letter, dead_letter);
    }

    #[test]
    fn a_core_copy_carries_the_attempt_it_came_from(
        outcome in any_outcome(),
        facts in any_facts(),
    ) {
        if let Some(copy) = decide(&outcome, &facts).copy {
            prop_assert_eq!(facts.model, DeliveryModel::Core);
            prop_assert!(facts.copy_target);
            prop_assert_eq!(copy.retry_count, facts.attempt.get());
            prop_assert_eq!(copy.attempt(), facts.redelivered().attempt);
            let asked = match outcome {
                HandlerOutcome::RetryAfter(delay) => delay,
                _ => Duration::ZERO,
            };
            prop_assert_eq!(copy.after, asked);
        }
    }

    #[test]
    fn core_never_sends(outcome in any_outcome(), facts in any_facts()) {
        let facts = Facts { model: DeliveryModel::Core, ..facts };
        let decision = decide(&outcome, &facts);
        prop_assert!(!matches!(decision.settle, Settle::Send(_)), "{:?}", decision);
    }

    #[test]
    fn jetstream_is_never_unsupported(outcome in any_outcome(), facts in any_facts()) {
        let facts = Facts { model: DeliveryModel::JetStream, ..facts };
        let decision = decide(&outcome, &facts);
        prop_assert!(!matches!(decision.settle, Settle::Unsupported(_)), "{:?}", decision);
    }

    #[test]
    fn only_a_declared_dead_letter_is_published_and_never_with_a_copy(
        outcome in any_outcome(),
        facts in any_facts(),
    ) {
        let decision = decide(&outcome, &facts);
        if decision.dead_letter {
            prop_assert!(facts.dead_letter);
            prop_assert!(outcome.is_retry() || outcome == O::dead_letter());
            prop_assert_eq!(decision.copy, None);
            if facts.model == DeliveryModel::JetStream {
                prop_assert_eq!(decision.settle, Settle::Send(AckKind::Term));
            }
        }
    }

    #[test]
    fn ack_and_drop_ignore_the_cap(facts in any_facts(), drop in any::<bool>()) {
        let outcome = if drop { O::drop() } else { O::ack() };
        let bare = Facts::new(facts.model, NonZeroU32::MIN);
        prop_assert_eq!(decide(&outcome, &facts), decide(&outcome, &bare));
    }

    #[test]
    fn dead_letter_ignores_the_cap_and_ends_as_a_retry_at_the_cap(facts in any_facts()) {
        let decision = decide(&O::dead_letter(), &facts);
        let bare = Facts::new(facts.model, NonZeroU32::MIN);
        prop_assert_eq!(decision, decide(&O::dead_letter(), &Facts { dead_letter: facts.dead_letter, ..bare }));
        prop_assert!(!decision.brings_back());
        prop_assert_eq!(decision.dead_letter, facts.dead_letter);
        // The end a delayed retry meets at the cap, on either model.
        let at_cap = Facts { max_attempts: Some(facts.attempt), ..facts };
        prop_assert_eq!(decision, decide(&O::retry_after(D), &at_cap));
        prop_assert_eq!(decision, decide_unpublishable(&facts));
    }

    #[test]
    fn undecodable_never_comes_back(facts in any_facts()) {
        let decision = decide_undecodable(&facts);
        prop_assert!(!decision.brings_back());
        prop_assert_eq!(decision.copy, None);
        prop_assert_eq!(decision.dead_letter, facts.dead_letter);
    }

    #[test]
    fn unpublishable_never_comes_back(facts in any_facts()) {
        let decision = decide_unpublishable(&facts);
        prop_assert!(!decision.brings_back());
        prop_assert_eq!(decision.copy, None);
        prop_assert_eq!(decision.dead_letter, facts.dead_letter);
    }

    #[test]
    fn the_delay_is_nanoseconds_in_json(delay in any_delay()) {
        let form = AckKind::NakAfter(delay).to_string();
        let body = form.strip_prefix("-NAK ").expect("a delayed -NAK starts with -NAK");
        let json: serde_json::Value = serde_json::from_str(body).expect("the delay is JSON");
        prop_assert_eq!(json["delay"].as_u64().map(u128::from), Some(delay.as_nanos()));
    }
}

// Arrival past the cap: decided before the handler runs.

#[test]
fn a_delivery_arriving_past_the_cap_does_not_run_the_handler() {
    // (facts, what happens on arrival); `None`: the handler runs.
    let rows: [(Facts, Option<Decision>); 10] = [
        // No cap: every delivery runs the handler, however many there were.
        (jetstream(1), None),
        (jetstream(50), None),
        // Below and at the cap: the handler runs (at the cap a retry is dead-lettered after it).
        (jetstream(1).with_cap(cap(2)), None),
        (jetstream(2).with_cap(cap(2)).with_dead_letter(), None),
        // Past the cap: to the dead-letter subject when declared, then +TERM; the handler
        // does not run.
        (
            jetstream(3).with_cap(cap(2)).with_dead_letter(),
            Some(dead_letter_then(Settle::Send(AckKind::Term))),
        ),
        (jetstream(3).with_cap(cap(2)), Some(send(AckKind::Term))),
        (
            jetstream(u32::MAX).with_cap(cap(1)).with_dead_letter(),
            Some(dead_letter_then(Settle::Send(AckKind::Term))),
        ),
        // Core: the attempt comes from a header anyone can write; never decided on arrival.
        (core(1).with_cap(cap(2)), None),
        (core(3).with_cap(cap(2)).with_dead_letter(), None),
        (core_without_target(9).with_cap(cap(1)), None),
    ];
    let mut failures = String::new();
    for (facts, expected) in rows {
        let got = decide_arrival(&facts);
        if got != expected {
            let _ = writeln!(failures, "{facts:?}: expected {expected:?}, got {got:?}");
        }
    }
    assert!(failures.is_empty(), "{failures}");
}

proptest! {
    #[test]
    fn arrival_decides_exactly_the_jetstream_deliveries_past_the_cap(facts in any_facts()) {
        let decided = decide_arrival(&facts);
        let past = facts.model == DeliveryModel::JetStream
            && facts.max_attempts.is_some_and(|cap| facts.attempt > cap);
        prop_assert_eq!(decided.is_some(), past);
        if let Some(decision) = decided {
            prop_assert!(!decision.brings_back());
            prop_assert_eq!(decision.dead_letter, facts.dead_letter);
            prop_assert_eq!(decision.settle, Settle::Send(AckKind::Term));
        }
    }

    #[test]
    fn a_delivery_past_the_cap_is_never_at_it_and_the_next_is_past_too(facts in any_facts()) {
        if facts.is_past_cap() {
            prop_assert!(facts.redelivered().is_past_cap());
        }
        if facts.is_at_cap() && facts.max_attempts.is_some_and(|cap| facts.attempt == cap) {
            prop_assert!(!facts.is_past_cap());
            prop_assert!(facts.redelivered().is_past_cap() || facts.attempt.get() == u32::MAX);
        }
    }
}

#[test]
fn a_failed_dead_letter_holds_the_original_back_longer_each_time_never_terminates_it() {
    let secs = |n: u64| Settle::Send(AckKind::NakAfter(Duration::from_secs(n)));
    let rows: [(Facts, Settle); 7] = [
        (jetstream(2).with_cap(cap(2)).with_dead_letter(), secs(1)),
        (jetstream(3).with_cap(cap(2)).with_dead_letter(), secs(2)),
        (jetstream(4).with_cap(cap(2)).with_dead_letter(), secs(4)),
        (
            jetstream(13).with_cap(cap(2)).with_dead_letter(),
            secs(2048),
        ),
        (
            jetstream(u32::MAX).with_cap(cap(2)).with_dead_letter(),
            secs(3600),
        ),
        // Undecodable, no cap: counted from the first delivery.
        (jetstream(1).with_dead_letter(), secs(1)),
        (core(3).with_cap(cap(3)).with_dead_letter(), Settle::Nothing),
    ];
    let mut failures = String::new();
    for (facts, expected) in rows {
        let got = decide_dead_letter_failed(&facts);
        if got != expected {
            let _ = writeln!(failures, "{facts:?}: expected {expected:?}, got {got:?}");
        }
    }
    assert!(failures.is_empty(), "{failures}");
}

proptest! {
    #[test]
    fn a_failed_dead_letter_never_terminates_and_is_bounded(facts in any_facts()) {
        match decide_dead_letter_failed(&facts) {
            Settle::Send(AckKind::NakAfter(hold)) => {
                prop_assert_eq!(facts.model, DeliveryModel::JetStream);
                prop_assert!(hold >= DEAD_LETTER_HOLD_FIRST && hold <= DEAD_LETTER_HOLD_MAX);
            }
            Settle::Nothing => prop_assert_eq!(facts.model, DeliveryModel::Core),
            other => prop_assert!(false, "{:?}", other),
        }
    }
}
