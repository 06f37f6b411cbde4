//! The message of a caught panic: one function for every place that catches one (the handler
//! call in `registration/call.rs`, a broker's source task). Broker crates reach it as
//! `ruststream::__private::panic_message`.

use std::any::Any;

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
    use super::panic_message;

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
