// The table of NATS subject matching that every matcher is tested against:
// `ruststream-nats/src/subject.rs` (`matches`: the publisher, validation and the in-process NATS)
// and `ruststream/src/app/describe.rs` (which stream stores an output, for `describe`; the core
// cannot depend on ruststream-nats). Their tests `include!` this file: a row added here is
// checked by both.

/// `(pattern, concrete subject, whether the pattern matches it)`.
const MATCH_TABLE: &[(&str, &str, bool)] = &[
    ("payments", "payments", true),
    ("a.b", "a.b", true),
    ("a.b", "a.b.c", false),
    ("a.b.c", "a.b", false),
    ("a.b", "a.c", false),
    ("payments.*", "payments.dead", true),
    ("payments.*", "payments.dead.x", false),
    ("payments.*", "payments", false),
    ("*", "payments", true),
    ("*", "a.b", false),
    ("*.shipped", "orders.shipped", true),
    ("*.shipped", "orders.paid", false),
    ("orders.*.eu", "orders.x.eu", true),
    ("orders.*.eu", "orders.x.us", false),
    ("payments.>", "payments.dead", true),
    ("payments.>", "payments.dead.x.y", true),
    ("payments.>", "payments", false),
    (">", "payments", true),
    (">", "a.b.c", true),
    ("orders.*.>", "orders.x.y", true),
    ("orders.*.>", "orders.x", false),
    // Tokens compare whole: a prefix is no match.
    ("orders.ship", "orders.shipped", false),
    ("orders", "orders2", false),
];
