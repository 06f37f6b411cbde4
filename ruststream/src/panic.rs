//! The guard around user code the runtime calls for a delivery (the handler, its middleware,
//! a lane key, an idempotency key, an observer): a panic in any of it becomes
//! [`Handled::Panicked`], settled as the registration's `on_panic` says. One guard for all of
//! it, so a panic anywhere gets the same decision. Broker crates reach it (and the message of a
//! caught panic) as `ruststream::__private::{guard, guard_async, guard_user_code}`.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures::FutureExt;

use crate::handled::Handled;

/// Runs `f`; its panic becomes [`Handled::Panicked`] with the panic's message.
///
/// # Errors
///
/// `f` panicked.
pub fn guard<T>(f: impl FnOnce() -> T) -> Result<T, Handled> {
    std::panic::catch_unwind(AssertUnwindSafe(f)).map_err(|panic| panicked(None, &*panic))
}

/// [`guard`] for user code other than the handler: the message names `what` panicked (`the
/// lane key (.by_key)`), since the log line says the delivery's code panicked.
///
/// # Errors
///
/// `f` panicked.
pub fn guard_user_code<T>(what: &str, f: impl FnOnce() -> T) -> Result<T, Handled> {
    std::panic::catch_unwind(AssertUnwindSafe(f)).map_err(|panic| panicked(Some(what), &*panic))
}

/// [`guard`] for a future: its panic, while polled, becomes [`Handled::Panicked`].
pub fn guard_async<F: Future>(f: F) -> impl Future<Output = Result<F::Output, Handled>> {
    AssertUnwindSafe(f)
        .catch_unwind()
        .map(|ran| ran.map_err(|panic| panicked(None, &*panic)))
}

fn panicked(what: Option<&str>, panic: &(dyn Any + Send)) -> Handled {
    let message = panic_message(panic);
    Handled::Panicked(match what {
        Some(what) => format!("{what} panicked: {message}"),
        None => message.to_owned(),
    })
}

/// The text a panic carried: its `&str` or `String` payload, or a fixed sentence for any
/// other payload.
pub fn panic_message(panic: &(dyn Any + Send)) -> &str {
    if let Some(s) = panic.downcast_ref::<&str>() {
        s
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s
    } else {
        "a panic with a non-string payload"
    }
}

#[cfg(test)]
mod tests {
    use super::{guard, guard_async, guard_user_code, panic_message};
    use crate::handled::Handled;

    #[test]
    fn a_guarded_panic_becomes_a_handler_panic() {
        assert_eq!(guard(|| 1), Ok(1));
        assert_eq!(
            guard(|| -> u8 { panic!("boom") }),
            Err(Handled::Panicked("boom".to_owned()))
        );
        assert_eq!(
            guard_user_code("the lane key", || -> u8 { panic!("boom") }),
            Err(Handled::Panicked("the lane key panicked: boom".to_owned()))
        );
        let ran = futures::executor::block_on(guard_async(async { panic!("late") }));
        assert_eq!(ran, Err::<(), _>(Handled::Panicked("late".to_owned())));
    }

    #[test]
    fn panic_payloads_become_their_text() {
        let caught = |f: fn()| std::panic::catch_unwind(f).expect_err("the closure panics");
        assert_eq!(panic_message(&*caught(|| panic!("boom"))), "boom");
        assert_eq!(panic_message(&*caught(|| panic!("{}", 42))), "42");
        assert_eq!(
            panic_message(&*caught(|| std::panic::panic_any(7_u8))),
            "a panic with a non-string payload"
        );
    }
}
