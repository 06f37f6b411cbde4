//! Headers between `ruststream::Headers` and async-nats.

use std::str::FromStr;

use async_nats::{HeaderMap, HeaderName, HeaderValue};
use ruststream::Headers;

use crate::transport::MSG_ID_HEADER as MSG_ID;
use crate::transport::{TransportError, TransportErrorKind};

/// `ruststream::Headers` as async-nats headers; a name or value NATS cannot carry is refused.
///
/// Nearly every output starts with its `content-type` header (`Context::encoded` puts it
/// first): that one is not converted again on every publish. Each thread keeps the map holding
/// only the `content-type` it converted last, and a publish whose first header is the same
/// starts from a clone of it (the same allocations as converting it, without hashing the name
/// or checking the value), then converts the rest.
pub fn to_header_map(headers: &Headers) -> Result<HeaderMap, TransportError> {
    let mut entries = headers.iter().peekable();
    let mut map = match entries.peek() {
        Some((name, value)) if *name == ruststream::codec::CONTENT_TYPE => {
            match content_type_map(value) {
                Some(map) => {
                    entries.next();
                    map
                }
                None => HeaderMap::new(),
            }
        }
        _ => HeaderMap::new(),
    };
    for (name, value) in entries {
        let (header, value) = convert(name, value)?;
        map.append(header, value);
    }
    Ok(map)
}

/// Sets `Nats-Msg-Id` to `id` (a stored output's derived message id), the string moved into
/// the header, not copied; refused when NATS cannot carry it (a registration name with a line
/// break, say).
pub(crate) fn insert_msg_id(map: &mut HeaderMap, id: String) -> Result<(), TransportError> {
    // `HeaderValue::from(String)` panics on a line break: one is refused first, with the
    // error any other header's value gets (async-nats's own check, which copies the string
    // only on this path).
    let value = if id.contains(['\r', '\n']) {
        HeaderValue::from_str(&id).map_err(|err| invalid_value(MSG_ID, err))?
    } else {
        HeaderValue::from(id)
    };
    // Made at compile time (`from_static` compares the name with NATS's own names when it
    // runs). `insert`, not `append`: the name is hashed once (`append` looks it up, then
    // inserts).
    const NAME: HeaderName = HeaderName::from_static(MSG_ID);
    map.insert(NAME, value);
    Ok(())
}

/// One header as async-nats's name and value; refused when NATS cannot carry it.
fn convert(name: &str, value: &str) -> Result<(HeaderName, HeaderValue), TransportError> {
    let header = match known_name(name) {
        Some(known) => known,
        None => HeaderName::from_str(name).map_err(|err| {
            TransportError::new(
                TransportErrorKind::Invalid,
                format!("`{name}` is not a valid header name"),
            )
            .with_cause(err)
        })?,
    };
    let value = HeaderValue::from_str(value).map_err(|err| invalid_value(name, err))?;
    Ok((header, value))
}

/// The refusal of a header value NATS cannot carry.
fn invalid_value(name: &str, cause: async_nats::header::ParseHeaderValueError) -> TransportError {
    TransportError::new(
        TransportErrorKind::Invalid,
        format!("the value of header `{name}` is not valid"),
    )
    .with_cause(cause)
}

/// A map holding only `content-type: value`, cloned from the one this thread converted last
/// (converted and kept when the value differs); `None` when the value is not one NATS can
/// carry (the caller converts it, and refuses it, the usual way).
fn content_type_map(value: &str) -> Option<HeaderMap> {
    thread_local! {
        static LAST: std::cell::RefCell<Option<(String, HeaderMap)>> =
            const { std::cell::RefCell::new(None) };
    }
    LAST.with(|last| {
        let mut last = last.try_borrow_mut().ok()?;
        if let Some((kept, map)) = &*last
            && kept == value
        {
            return Some(map.clone());
        }
        let (name, converted) = convert(ruststream::codec::CONTENT_TYPE, value).ok()?;
        let mut map = HeaderMap::new();
        map.append(name, converted);
        *last = Some((value.to_owned(), map.clone()));
        Some(map)
    })
}

/// `headers` with the current trace context (`telemetry::with_context`), as async-nats
/// headers, for headers lent: without the `opentelemetry` feature they are read in place, not
/// copied first.
pub(crate) fn header_map_with_context(headers: &Headers) -> Result<HeaderMap, TransportError> {
    #[cfg(feature = "opentelemetry")]
    {
        to_header_map(&crate::telemetry::with_context(headers.clone()))
    }
    #[cfg(not(feature = "opentelemetry"))]
    {
        to_header_map(headers)
    }
}

/// A Core retry copy's count header, `crate::RETRY_COUNT_HEADER` (its home is `copies.rs`,
/// which builds on the transport: the transport does not name it, a test checks the two agree).
const RETRY_COUNT: &str = "x-ruststream-retry-count";

/// The names the runtime writes on most messages, as async-nats names that point at the
/// constant instead of copying it: `HeaderName::from_str` copies every name but those NATS
/// defines itself (`Nats-Msg-Id` and the like).
fn known_name(name: &str) -> Option<HeaderName> {
    // Made at compile time: `HeaderName::from_static` compares the name with each name NATS
    // defines when it runs.
    const KNOWN: [(&str, HeaderName); 4] = [
        (
            ruststream::codec::CONTENT_TYPE,
            HeaderName::from_static(ruststream::codec::CONTENT_TYPE),
        ),
        (
            ruststream::CORRELATION_ID_HEADER,
            HeaderName::from_static(ruststream::CORRELATION_ID_HEADER),
        ),
        (RETRY_COUNT, HeaderName::from_static(RETRY_COUNT)),
        // A stored output's message id: `from_str` would find it among NATS's own names,
        // comparing it with each.
        (MSG_ID, HeaderName::from_static(MSG_ID)),
    ];
    KNOWN
        .into_iter()
        .find(|(known, _)| *known == name)
        .map(|(_, header)| header)
}

/// async-nats headers as `ruststream::Headers`, every value of every name.
pub fn from_header_map(map: Option<&HeaderMap>) -> Headers {
    let mut headers = Headers::new();
    if let Some(map) = map {
        for (name, values) in map.iter() {
            for value in values {
                headers.append(name.to_string(), value.as_str());
            }
        }
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_retry_count_header_is_the_copies_one() {
        assert_eq!(RETRY_COUNT, crate::RETRY_COUNT_HEADER);
    }

    #[test]
    fn the_names_the_runtime_writes_convert_like_any_other() {
        let mut headers = Headers::new();
        headers.insert(ruststream::codec::CONTENT_TYPE, "application/json");
        headers.insert(ruststream::CORRELATION_ID_HEADER, "c-1");
        headers.insert(crate::RETRY_COUNT_HEADER, "2");
        headers.insert(MSG_ID, "s:1:r:0");
        headers.insert("x-other", "v");
        let map = to_header_map(&headers).expect("valid headers");
        for (name, value) in headers.iter() {
            let parsed = HeaderName::from_str(name).expect("a valid name");
            assert_eq!(
                map.get(parsed).map(HeaderValue::as_str),
                Some(value),
                "{name}"
            );
            assert_eq!(known_name(name).is_some(), name != "x-other", "{name}");
        }
        assert_eq!(map.len(), 5);
    }

    #[test]
    fn the_derived_message_id_is_added_as_a_header_added_in_ruststreams_form_would_be() {
        let mut headers = Headers::new();
        headers.insert(ruststream::codec::CONTENT_TYPE, "application/json");
        let mut map = to_header_map(&headers).expect("valid headers");
        insert_msg_id(&mut map, "ORDERS:17:audit:1".to_owned()).expect("a valid id");
        headers.insert(MSG_ID, "ORDERS:17:audit:1");
        assert_eq!(map, converted_one_by_one(&headers));

        let err = insert_msg_id(&mut map, "ORDERS:17:a\r\nb:1".to_owned()).unwrap_err();
        assert_eq!(err.kind, TransportErrorKind::Invalid);
        assert!(err.to_string().contains("Nats-Msg-Id"), "{err}");
    }

    /// What `to_header_map` gives, converted one header at a time without the kept map.
    fn converted_one_by_one(headers: &Headers) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in headers.iter() {
            let (name, value) = convert(name, value).expect("valid");
            map.append(name, value);
        }
        map
    }

    #[test]
    fn the_kept_content_type_converts_like_any_header() {
        let with = |content_type: &str, more: &[(&str, &str)]| {
            let mut headers = Headers::new();
            headers.insert(ruststream::codec::CONTENT_TYPE, content_type);
            for (name, value) in more {
                headers.append(*name, *value);
            }
            headers
        };
        // Alternating values (each replaces the kept map), the same value again (a clone of
        // it), more headers after it, and a second content-type value appended.
        let cases = [
            with("application/json", &[]),
            with("application/json", &[("Nats-Msg-Id", "s:1:r:0")]),
            with(
                "application/msgpack",
                &[(ruststream::CORRELATION_ID_HEADER, "c")],
            ),
            with("application/json", &[("x-a", "1"), ("x-a", "2")]),
            with(
                "application/json",
                &[(ruststream::codec::CONTENT_TYPE, "text/plain")],
            ),
            with("application/msgpack", &[]),
        ];
        for headers in cases.iter().chain(cases.iter()) {
            let map = to_header_map(headers).expect("valid headers");
            assert_eq!(map, converted_one_by_one(headers), "{headers:?}");
        }
        // Not first: converted the usual way.
        let mut headers = Headers::new();
        headers.insert("x-first", "1");
        headers.append(ruststream::codec::CONTENT_TYPE, "application/json");
        assert_eq!(
            to_header_map(&headers).expect("valid"),
            converted_one_by_one(&headers)
        );
    }

    #[test]
    fn a_content_type_nats_cannot_carry_is_refused_kept_or_not() {
        let mut good = Headers::new();
        good.insert(ruststream::codec::CONTENT_TYPE, "application/json");
        let mut bad = Headers::new();
        bad.insert(ruststream::codec::CONTENT_TYPE, "application/json\r\nx: y");
        for _ in 0..2 {
            assert!(to_header_map(&good).is_ok());
            let err = to_header_map(&bad).expect_err("a line break cannot be carried");
            assert_eq!(err.kind, TransportErrorKind::Invalid);
        }
    }
}
