//! Told of every handled delivery ([`Observer`]): what the handler said and what was decided.
//! `TestApp` records outcomes through it. Reached as `ruststream::app::Observer` too.

use crate::delivery::Delivery;
use crate::handled::Handled;
use crate::settle::Decision;

/// Told of every delivery a handler took, with what it said and what was decided. `TestApp`
/// uses it to record outcomes.
pub trait Observer: Send + Sync + 'static {
    /// One delivery was handled.
    fn handled(&self, handling: &Handling<'_>);
}

/// One handled delivery, as an [`Observer`] sees it.
#[derive(Debug)]
#[non_exhaustive]
pub struct Handling<'a> {
    /// The registration's name.
    pub registration: &'a str,
    /// The delivery, as it arrived.
    pub delivery: &'a Delivery,
    /// What the handler said.
    pub handled: &'a Handled,
    /// What the runtime decided to do.
    pub decision: &'a Decision,
}
