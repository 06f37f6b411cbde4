//! What `/metrics`, `/healthz` and `/readyz` answer, apart from the server that carries the
//! request: the standalone listener ([`serve`](super::serve)) and the mountable router
//! ([`router`](super::router), feature `axum`) both answer through [`respond`].

use hyper::{Method, Response, StatusCode, header};

use super::{Health, Render};

/// The content type of the Prometheus text format.
pub(super) const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
const PLAIN_TEXT: &str = "text/plain; charset=utf-8";

/// One of the operations endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Endpoint {
    /// `/metrics`: the Prometheus text.
    Metrics,
    /// `/healthz`: liveness.
    Healthz,
    /// `/readyz`: readiness.
    Readyz,
}

impl Endpoint {
    /// Every endpoint with its path.
    pub(super) const ALL: [(&'static str, Endpoint); 3] = [
        ("/metrics", Endpoint::Metrics),
        ("/healthz", Endpoint::Healthz),
        ("/readyz", Endpoint::Readyz),
    ];

    /// The endpoint served at `path`, if any.
    pub(super) fn at(path: &str) -> Option<Endpoint> {
        Self::ALL.iter().find(|(p, _)| *p == path).map(|(_, e)| *e)
    }
}

/// The answer to `method` on `endpoint` (`None`: a path that is not one of them). GET and HEAD
/// only; the server strips the body of a HEAD answer.
pub(super) fn respond(
    endpoint: Option<Endpoint>,
    method: &Method,
    health: &Health,
    render: Option<&Render>,
) -> Response<String> {
    if method != Method::GET && method != Method::HEAD {
        let mut response = text(
            StatusCode::METHOD_NOT_ALLOWED,
            PLAIN_TEXT,
            "only GET\n".to_owned(),
        );
        response
            .headers_mut()
            .insert(header::ALLOW, header::HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    match endpoint {
        Some(Endpoint::Metrics) => match render {
            Some(render) => text(StatusCode::OK, PROMETHEUS_TEXT, render()),
            None => text(
                StatusCode::NOT_FOUND,
                PLAIN_TEXT,
                "metrics are not compiled in: enable the `prometheus` feature of ruststream\n"
                    .to_owned(),
            ),
        },
        Some(Endpoint::Healthz) => text(StatusCode::OK, PLAIN_TEXT, "ok\n".to_owned()),
        Some(Endpoint::Readyz) => match health.readiness() {
            Ok(()) => text(StatusCode::OK, PLAIN_TEXT, "ready\n".to_owned()),
            Err(why) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                PLAIN_TEXT,
                format!("not ready: {why}\n"),
            ),
        },
        None => text(
            StatusCode::NOT_FOUND,
            PLAIN_TEXT,
            "not found: try /metrics, /healthz or /readyz\n".to_owned(),
        ),
    }
}

fn text(status: StatusCode, content_type: &'static str, body: String) -> Response<String> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(path: &str, method: Method, health: &Health) -> (u16, String) {
        let response = respond(Endpoint::at(path), &method, health, None);
        (response.status().as_u16(), response.into_body())
    }

    #[test]
    fn each_path_and_method_has_its_answer() {
        let health = Health::new();
        assert_eq!(
            answer("/healthz", Method::GET, &health),
            (200, "ok\n".into())
        );
        assert_eq!(
            answer("/readyz", Method::HEAD, &health),
            (
                503,
                "not ready: starting: not every registration consumes yet\n".into()
            )
        );
        health.set_started();
        assert_eq!(answer("/readyz", Method::GET, &health).0, 200);
        assert_eq!(answer("/metrics", Method::GET, &health).0, 404);
        assert_eq!(answer("/other", Method::GET, &health).0, 404);
        assert_eq!(answer("/healthz", Method::POST, &health).0, 405);
        assert_eq!(answer("/other", Method::DELETE, &health).0, 405);
    }
}
