//! The headers RustStream itself reads or writes on a message, as the message's `headers`
//! schema: which ones depends on the message's role.

use serde_json::{Map, Value, json};

use crate::codec::CONTENT_TYPE;
use crate::publish::CORRELATION_ID_HEADER;

/// The header of a Core retry copy (the NATS broker's `RETRY_COUNT_HEADER`; the runtime's
/// settlement counts attempts with it).
const RETRY_COUNT: &str = "x-ruststream-retry-count";
/// The header a stream deduplicates on.
const MSG_ID: &str = "Nats-Msg-Id";
/// The W3C trace context header.
const TRACEPARENT: &str = "traceparent";

/// What a message is to the registration that reads or writes it.
#[derive(Clone, Copy)]
pub(super) enum Role {
    /// What it reads, and its dead letters and retry copies (the delivery as it arrived);
    /// `retried` when Core retry copies of it come back to it.
    Input { retried: bool },
    /// What it publishes; `stored_input` when it reads from a stream (its outputs then carry
    /// a message id derived from the input).
    Output { stored_input: bool },
    /// Its answer to a request.
    Reply,
}

fn text(description: &str) -> Value {
    json!({"type": "string", "description": description})
}

/// The `headers` schema of a message in `role`; an input's lists `declared`, as
/// `(name, what it means)`, too.
pub(super) fn schema(role: Role, declared: &[(String, String)]) -> Value {
    let mut properties = Map::new();
    let read = matches!(role, Role::Input { .. });
    properties.insert(
        CONTENT_TYPE.to_owned(),
        text(if read {
            "the payload's format; when present it must name the registration's codec"
        } else {
            "the payload's format, as the codec names it"
        }),
    );
    properties.insert(
        CORRELATION_ID_HEADER.to_owned(),
        text(if read {
            "a correlation id, carried to everything the handler publishes"
        } else {
            "the correlation id of the delivery the handler was given, when it had one"
        }),
    );
    properties.insert(
        TRACEPARENT.to_owned(),
        json!({
            "type": "string",
            "pattern": "^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$",
            "description": "the W3C trace context: the handler's span continues the sender's trace, outputs carry the handler's",
        }),
    );
    let retry_count = json!({
        "type": "string",
        "pattern": "^[0-9]+$",
        "description": "the attempt a Core retry copy came from (absent on a first delivery): the cap counts with it",
    });
    match role {
        Role::Input { retried } => {
            if retried {
                properties.insert(RETRY_COUNT.to_owned(), retry_count);
            }
            for (name, description) in declared {
                properties.insert(name.clone(), text(description));
            }
        }
        Role::Output { stored_input: true } => {
            properties.insert(
                MSG_ID.to_owned(),
                text("when a stream stores the subject: the input's stream, sequence and output, so that a redelivered input's output is stored once"),
            );
        }
        Role::Output { .. } | Role::Reply => {}
    }
    json!({"type": "object", "properties": properties})
}
