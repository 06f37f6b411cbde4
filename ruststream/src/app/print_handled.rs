//! What `run --embedded` prints for each delivery: what the handler did and what the runtime
//! sent.

use std::fmt::Write as _;

use crate::app::{Handling, Observer};
use crate::handled::Handled;
use crate::settle::Settle;

/// Prints what each handler did, for `run --embedded`.
pub(super) struct PrintHandled;

impl Observer for PrintHandled {
    fn handled(&self, handling: &Handling<'_>) {
        println!("{}", handled_line(handling));
    }
}

/// One line saying what a handler did with a delivery and what the runtime sent.
fn handled_line(handling: &Handling<'_>) -> String {
    let delivery = handling.delivery;
    let count = delivery
        .delivered()
        .map_or_else(String::new, |d| format!(" (delivered {d})"));
    let said = match handling.handled {
        Handled::Outcome(outcome) => format!("returned {outcome:?}"),
        Handled::Undecodable(error) => format!("did not run: the payload does not decode: {error}"),
        other => format!("{other:?}"),
    };
    let decision = handling.decision;
    let mut sent = match decision.settle {
        Settle::Send(kind) => format!("sent {kind}"),
        Settle::Unsupported(_) | Settle::Nothing => "nothing to acknowledge".to_owned(),
    };
    if decision.dead_letter {
        sent.push_str(", dead-lettered");
    }
    if let Some(copy) = &decision.copy {
        let _ = write!(sent, ", retry copy {}", copy.retry_count);
    }
    format!(
        "[embedded] {registration} on {subject}{count}: {said}; {sent}",
        registration = handling.registration,
        subject = delivery.subject(),
    )
}
