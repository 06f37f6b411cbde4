// The table of NATS subject syntax that every copy of the rules is tested against:
// `ruststream-nats/src/subject.rs` (the rules the broker, the publisher and the in-process NATS
// follow) and `ruststream-macros/src/subject.rs` (the compile-time check of a literal, which
// cannot depend on ruststream-nats). Their tests, and the in-process NATS's
// (`transport/in_process/tests.rs`), `include!` this file: a row added here is checked by all.
//
// Each row: the subject, whether a message may be published to it (one concrete subject), and
// whether it may be subscribed to or stored (a pattern: `*` one token, `>` the rest).

/// `(subject, valid to publish to, valid as a pattern)`.
const SUBJECT_TABLE: &[(&str, bool, bool)] = &[
    ("orders.shipped", true, true),
    ("payments", true, true),
    ("a.b-c_d", true, true),
    ("_INBOX.x.1", true, true),
    ("$JS.ACK.ORDERS.c.1.2.3.4.5", true, true),
    ("ümlaut.subject", true, true),
    ("orders.*", false, true),
    ("orders.>", false, true),
    ("*.shipped", false, true),
    ("orders.*.>", false, true),
    ("*", false, true),
    (">", false, true),
    // No empty token: a leading, trailing or doubled `.`.
    ("", false, false),
    (".", false, false),
    ("orders..shipped", false, false),
    (".orders", false, false),
    ("orders.", false, false),
    // No whitespace anywhere, Unicode whitespace included.
    ("orders shipped", false, false),
    ("orders\tshipped", false, false),
    ("orders\u{b}shipped", false, false),
    ("orders.\u{a0}", false, false),
    // `*` and `>` only as whole tokens, `>` only last.
    ("orders.a*", false, false),
    ("orders.a>", false, false),
    ("a*", false, false),
    ("*a.b", false, false),
    ("orders.>.x", false, false),
    (">.orders", false, false),
];
