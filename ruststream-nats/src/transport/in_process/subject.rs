//! NATS subject rules: which subjects a pattern matches, and which subjects are valid.
//!
//! A subject is dot-separated tokens. In a pattern, `*` matches exactly one token and `>` (only
//! as the last token) matches one or more tokens.

/// Whether `pattern` matches the concrete `subject`.
pub(crate) fn matches(pattern: &str, subject: &str) -> bool {
    let mut p = pattern.split('.');
    let mut s = subject.split('.');
    loop {
        match (p.next(), s.next()) {
            (Some(">"), Some(_)) => return true,
            (Some("*"), Some(_)) => {}
            (Some(a), Some(b)) if a == b => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// Whether some subject matches both patterns.
pub(crate) fn overlaps(a: &str, b: &str) -> bool {
    let mut a = a.split('.');
    let mut b = b.split('.');
    loop {
        match (a.next(), b.next()) {
            (Some(">"), Some(_)) | (Some(_), Some(">")) => return true,
            (Some("*"), Some(_)) | (Some(_), Some("*")) => {}
            (Some(x), Some(y)) if x == y => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// Why a subject cannot be used, if it cannot; `wildcards` allows `*` and `>`.
pub(crate) fn invalid(subject: &str, wildcards: bool) -> Option<&'static str> {
    if subject.is_empty() {
        return Some("the subject is empty");
    }
    if subject.chars().any(char::is_whitespace) {
        return Some("a subject has no whitespace");
    }
    let tokens: Vec<&str> = subject.split('.').collect();
    for (i, token) in tokens.iter().enumerate() {
        if token.is_empty() {
            return Some("a subject has no empty token (`..`, or a leading or trailing `.`)");
        }
        let wild = *token == "*" || *token == ">";
        if wild && !wildcards {
            return Some("a message is published to a concrete subject, without `*` or `>`");
        }
        if *token == ">" && i + 1 != tokens.len() {
            return Some("`>` is only valid as the last token");
        }
    }
    None
}

/// Why a stream or consumer name cannot be used, if it cannot.
pub(crate) fn invalid_name(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        return Some("the name is empty");
    }
    if name
        .chars()
        .any(|c| c.is_whitespace() || matches!(c, '.' | '*' | '>' | '/' | '\\'))
    {
        return Some("a name has no whitespace, `.`, `*`, `>`, `/` or `\\`");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_star_matches_one_token() {
        assert!(matches("orders.*", "orders.shipped"));
        assert!(!matches("orders.*", "orders.shipped.eu"));
        assert!(!matches("orders.*", "orders"));
        assert!(matches("*.shipped", "orders.shipped"));
    }

    #[test]
    fn a_tail_matches_one_or_more_tokens() {
        assert!(matches("orders.>", "orders.shipped"));
        assert!(matches("orders.>", "orders.shipped.eu"));
        assert!(!matches("orders.>", "orders"));
        assert!(matches(">", "anything.at.all"));
    }

    #[test]
    fn literals_match_themselves() {
        assert!(matches("orders.shipped", "orders.shipped"));
        assert!(!matches("orders.shipped", "orders.placed"));
        assert!(!matches("orders.shipped", "orders.shipped.eu"));
    }

    #[test]
    fn patterns_overlap_when_one_subject_matches_both() {
        assert!(overlaps("orders.*", "orders.shipped"));
        assert!(overlaps("orders.>", "*.shipped.eu"));
        assert!(overlaps("orders.*", "*.shipped"));
        assert!(!overlaps("orders.*", "payments.*"));
        assert!(!overlaps("orders.*", "orders.a.b"));
    }

    #[test]
    fn invalid_subjects_say_why() {
        assert!(invalid("orders.shipped", false).is_none());
        assert!(invalid("orders.*", true).is_none());
        assert!(invalid("orders.*", false).is_some());
        assert!(invalid("orders..shipped", true).is_some());
        assert!(invalid("orders.>.eu", true).is_some());
        assert!(invalid("", true).is_some());
        assert!(invalid("orders shipped", true).is_some());
        assert!(invalid_name("PAYMENTS").is_none());
        assert!(invalid_name("PAY.MENTS").is_some());
    }
}
