//! Issue 13's goal "zero per-message allocations in the settlement decision", counted: every
//! decision the runtime makes after a handler (`decide`, each `OnFailure`, the arrival past the
//! cap, the undecodable payload, a failed dead letter), for both delivery models, every attempt
//! around the cap, with and without a dead-letter subject and a copy target, allocates nothing.
//!
//! The allocator counts the allocations of the thread that asks, so the binary's other test
//! (which runs on a thread of its own) and the harness's threads do not disturb the count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::num::NonZeroU32;
use std::time::Duration;

use ruststream::HandlerOutcome;
use ruststream::registration::OnFailure;
use ruststream::settle::{
    Facts, decide, decide_arrival, decide_dead_letter_failed, decide_undecodable,
};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded to the system allocator unchanged; the count is a
// thread-local `Cell` with a const initialiser, which allocates nothing itself.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

/// Every combination of facts a delivery can bring: both models, attempts 1 to 5 against caps
/// none, 1 and 3, with and without a dead-letter subject and a copy target.
fn all_facts() -> Vec<Facts> {
    let mut all = Vec::new();
    for attempt in 1..=5 {
        let attempt = NonZeroU32::new(attempt).expect("from 1");
        for model in [Facts::jetstream(attempt), Facts::core(attempt)] {
            for cap in [None, Some(1), Some(3)] {
                let facts = match cap.and_then(NonZeroU32::new) {
                    Some(cap) => model.with_cap(cap),
                    None => model,
                };
                for dead_letter in [false, true] {
                    for copy_target in [false, true] {
                        let mut facts = facts;
                        if dead_letter {
                            facts = facts.with_dead_letter();
                        }
                        if copy_target {
                            facts = facts.with_copy_target();
                        }
                        all.push(facts);
                    }
                }
            }
        }
    }
    all
}

#[test]
fn the_settlement_decision_allocates_nothing() {
    let facts = all_facts();
    let outcomes = [
        HandlerOutcome::ack(),
        HandlerOutcome::retry(),
        HandlerOutcome::retry_after(Duration::from_millis(250)),
        HandlerOutcome::drop(),
    ];
    let failures = [
        OnFailure::DeadLetterOrDrop,
        OnFailure::Drop,
        OnFailure::Retry,
        OnFailure::RetryAfter(Duration::from_secs(1)),
    ];

    let before = allocations();
    let mut decided = 0_usize;
    for facts in &facts {
        for outcome in &outcomes {
            std::hint::black_box(decide(std::hint::black_box(outcome), facts));
            decided += 1;
        }
        for failure in &failures {
            std::hint::black_box(std::hint::black_box(failure).decide(facts));
            decided += 1;
        }
        std::hint::black_box(decide_arrival(std::hint::black_box(facts)));
        std::hint::black_box(decide_undecodable(std::hint::black_box(facts)));
        std::hint::black_box(decide_dead_letter_failed(std::hint::black_box(facts)));
        decided += 3;
    }
    let made = allocations() - before;

    assert_eq!(decided, facts.len() * 11);
    assert_eq!(
        made, 0,
        "{decided} settlement decisions made {made} allocations; the decision must not allocate"
    );
}

/// The counter itself works: without this, a count of zero above proves nothing.
#[test]
fn the_counter_sees_an_allocation() {
    let before = allocations();
    let boxed = std::hint::black_box(Box::new([0_u8; 64]));
    let made = allocations() - before;
    drop(boxed);
    assert_eq!(made, 1);
}
