//! Headers between `ruststream::Headers` and async-nats.

use std::str::FromStr;

use async_nats::{HeaderMap, HeaderName, HeaderValue};
use ruststream::Headers;

use crate::transport::{TransportError, TransportErrorKind};

/// `ruststream::Headers` as async-nats headers; a name or value NATS cannot carry is refused.
pub fn to_header_map(headers: &Headers) -> Result<HeaderMap, TransportError> {
    let mut map = HeaderMap::new();
    for (name, value) in headers.iter() {
        let header = HeaderName::from_str(name).map_err(|err| {
            TransportError::new(
                TransportErrorKind::Invalid,
                format!("`{name}` is not a valid header name"),
            )
            .with_cause(err)
        })?;
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
