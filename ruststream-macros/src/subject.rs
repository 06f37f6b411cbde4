//! The NATS subject rules a literal is checked against at compile time.
//!
//! A copy: the rules' home is `ruststream-nats/src/subject.rs`, which this proc-macro crate
//! cannot depend on. Both are tested against one table, `ruststream-nats/src/subject/table.rs`,
//! so the copy cannot drift from the rules the broker enforces.

/// Why `subject` cannot be published to (or read as one subject), or `None` when it can.
pub fn problem(subject: &str) -> Option<String> {
    // An empty subject names nothing.
    if subject.is_empty() {
        return Some("the subject is empty: name one, like `\"orders.shipped\"`".to_owned());
    }
    // NATS splits a subject on whitespace; a space makes it two words.
    if subject.chars().any(char::is_whitespace) {
        return Some(format!(
            "`{subject}` contains whitespace, which a NATS subject cannot: separate its tokens with dots, like `\"orders.shipped\"`"
        ));
    }
    // `*` and `>` match many subjects: one can read them, never publish to them.
    if subject.split('.').any(|t| t == "*" || t == ">") || subject.contains(['*', '>']) {
        return Some(format!(
            "`{subject}` is a pattern (`*` or `>`), which names many subjects: name exactly one, like `\"orders.shipped\"`"
        ));
    }
    // `a..b`, `.a`, `a.` have an empty token, which the server refuses.
    if subject.split('.').any(str::is_empty) {
        return Some(format!(
            "`{subject}` has an empty token: a dot must sit between two non-empty tokens, like `\"orders.shipped\"`"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::problem;

    include!("../../ruststream-nats/src/subject/table.rs");

    #[test]
    fn every_row_of_the_shared_table() {
        // A literal is one subject a message is published to (or read from as one subject).
        for &(subject, publish, _pattern) in SUBJECT_TABLE {
            assert_eq!(
                problem(subject).is_none(),
                publish,
                "{subject:?}: {:?}",
                problem(subject)
            );
        }
    }

    #[test]
    fn plain_subjects_pass() {
        assert_eq!(problem("orders.shipped"), None);
        assert_eq!(problem("payments"), None);
    }

    #[test]
    fn broken_subjects_are_named() {
        for bad in ["", "a b", "orders.*", "orders.>", "a..b", ".a", "a.", "a*"] {
            assert!(problem(bad).is_some(), "{bad:?} passed");
        }
    }
}
