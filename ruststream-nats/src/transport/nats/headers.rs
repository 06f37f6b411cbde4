//! Headers between `ruststream::Headers` and async-nats.

use std::str::FromStr;

use async_nats::{HeaderMap, HeaderName, HeaderValue};
use ruststream::Headers;

use crate::transport::{TransportError, TransportErrorKind};

/// `ruststream::Headers` as async-nats headers; a name or value NATS cannot carry is refused.
pub fn to_header_map(headers: &Headers) -> Result<HeaderMap, TransportError> {
    let mut map = HeaderMap::new();
    for (name, value) in headers.iter() {
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
        let value = HeaderValue::from_str(value).map_err(|err| {
            TransportError::new(
                TransportErrorKind::Invalid,
                format!("the value of header `{name}` is not valid"),
            )
            .with_cause(err)
        })?;
        map.append(header, value);
    }
    Ok(map)
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
    const KNOWN: [&str; 3] = [
        ruststream::codec::CONTENT_TYPE,
        ruststream::CORRELATION_ID_HEADER,
        RETRY_COUNT,
    ];
    KNOWN
        .into_iter()
        .find(|known| *known == name)
        .map(HeaderName::from_static)
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
        assert_eq!(map.len(), 4);
    }
}
