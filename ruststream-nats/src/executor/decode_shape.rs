//! What a decode error may show in a log: its kind, position and the field names the type
//! gives, never a value quoted from the payload.

/// A decode error's message without anything it quotes from the payload: the type it was
/// meant to become, the kind of error (the words before the first quote, colon or comma), the
/// field a missing or duplicate field error names (a name from the type) and where in the
/// payload it happened.
///
/// `the payload does not decode as app::Payment: invalid type: string "4111 1111", expected u64
/// at line 1 column 24` becomes `the payload does not decode as app::Payment: invalid type (at
/// line 1 column 24)`.
pub(crate) fn decode_error_shape(message: &str) -> String {
    const PREFIX: &str = "the payload does not decode as ";
    let (target, reason) = match message.strip_prefix(PREFIX) {
        // A type name holds `::` but never `: `.
        Some(rest) => match rest.split_once(": ") {
            Some((target, reason)) => (Some(target), reason),
            None => (Some(rest), ""),
        },
        None => (None, message),
    };
    let position = reason
        .rfind(" at line ")
        .map(|at| &reason[at + 1..])
        .filter(|tail| {
            tail.split_ascii_whitespace().all(|word| {
                word == "at"
                    || word == "line"
                    || word == "column"
                    || word.bytes().all(|b| b.is_ascii_digit())
            })
        });
    let body = position.map_or(reason, |tail| &reason[..reason.len() - tail.len() - 1]);
    let kind: String = body
        .split(['"', '`', '\'', ':', ',', '(', '['])
        .next()
        .unwrap_or_default()
        .chars()
        .take(64)
        .collect();
    let kind = kind.trim();
    let kind = if kind.is_empty() {
        "malformed payload"
    } else {
        kind
    };
    let mut shape = match target {
        Some(target) => format!("{PREFIX}{target}: {kind}"),
        None => kind.to_owned(),
    };
    if let Some(field) = field_named_by_the_type(kind, body) {
        shape.push_str(&format!(" `{field}`"));
    }
    if let Some(position) = position {
        shape.push_str(&format!(" ({position})"));
    }
    shape
}

/// The field a `missing field` or `duplicate field` error names: serde takes it from the type's
/// own field names, so it is no payload value (an `unknown field` comes from the payload: not kept).
fn field_named_by_the_type<'a>(kind: &str, body: &'a str) -> Option<&'a str> {
    if kind != "missing field" && kind != "duplicate field" {
        return None;
    }
    let rest = body.strip_prefix(kind)?.strip_prefix(" `")?;
    let field = &rest[..rest.find('`')?];
    let plain = !field.is_empty()
        && field.len() <= 64
        && field
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    plain.then_some(field)
}
