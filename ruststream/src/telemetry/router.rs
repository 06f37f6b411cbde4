//! `/metrics`, `/healthz` and `/readyz` as an [`axum::Router`] (feature `axum`), for a service
//! that already runs an HTTP server and wants the operations endpoints on it.

use axum::Router;
use axum::http::Method;
use axum::routing::any;

use super::endpoints::{Endpoint, respond};
use super::{Health, Render};

/// The operations endpoints as a router to mount in a service's own axum (or any tower-based)
/// server: `/metrics` (the text of `render`, 404 without one), `/healthz` and `/readyz`,
/// answered exactly as [`serve`](super::serve) answers them (the same bodies, content types and
/// statuses; 405 for a method other than GET and HEAD). Readiness is `health`'s: put the same
/// [`Health`] into the [`Env`](crate::Env) the app starts in.
///
/// The router has no fallback, so it merges into a router that has one; nest it to serve the
/// endpoints under a prefix (`.nest("/ops", router(..))` answers `/ops/readyz`). It takes no
/// state, so it fits a router of any state type.
///
/// ```
/// use ruststream::telemetry::{self, Health};
///
/// let health = Health::new();
/// let ops = telemetry::router(health.clone(), None);
/// let service: axum::Router = axum::Router::new()
///     .route("/orders", axum::routing::get(|| async { "the service's own route" }))
///     .merge(ops);
/// // Start the app with `Env::new().with(health)`, then serve `service` with `axum::serve`.
/// # let _ = service;
/// ```
pub fn router<S>(health: Health, render: Option<Render>) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    Endpoint::ALL
        .into_iter()
        .fold(Router::new(), |router, (path, endpoint)| {
            let (health, render) = (health.clone(), render.clone());
            router.route(
                path,
                any(move |method: Method| async move {
                    respond(Some(endpoint), &method, &health, render.as_ref())
                }),
            )
        })
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::Request;
    use http_body_util::BodyExt as _;
    use tower::ServiceExt as _;

    use super::*;

    /// `method` on `path` of a user's router with the endpoints nested under `/ops`, called in
    /// process: the status, the content type and the body.
    async fn call(health: &Health, method: &str, path: &str) -> (u16, String, String) {
        let render: Render = std::sync::Arc::new(|| "ruststream_ready 1\n".to_owned());
        let service: Router = Router::new()
            .route("/own", axum::routing::get(|| async { "own" }))
            .nest("/ops", router(health.clone(), Some(render)));
        let request = Request::builder()
            .method(method)
            .uri(path)
            .body(Body::empty())
            .expect("a request");
        let response = service.oneshot(request).await.expect("infallible");
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let body = response.into_body().collect().await.expect("the body");
        let body = String::from_utf8(body.to_bytes().to_vec()).expect("text");
        (status, content_type, body)
    }

    #[tokio::test]
    async fn the_nested_router_answers_as_the_listener_does() {
        let health = Health::new();
        let plain = "text/plain; charset=utf-8";
        assert_eq!(
            call(&health, "GET", "/ops/healthz").await,
            (200, plain.into(), "ok\n".into())
        );
        assert_eq!(
            call(&health, "GET", "/ops/metrics").await,
            (
                200,
                super::super::endpoints::PROMETHEUS_TEXT.into(),
                "ruststream_ready 1\n".into()
            )
        );
        assert_eq!(call(&health, "GET", "/ops/readyz").await.0, 503);
        health.set_started();
        assert_eq!(
            call(&health, "GET", "/ops/readyz").await,
            (200, plain.into(), "ready\n".into())
        );
        health.set_draining();
        assert_eq!(
            call(&health, "GET", "/ops/readyz").await.2,
            "not ready: draining\n"
        );
        assert_eq!(
            call(&health, "PUT", "/ops/healthz").await,
            (405, plain.into(), "only GET\n".into())
        );
        assert_eq!(call(&health, "HEAD", "/ops/healthz").await.2, "");
        assert_eq!(call(&health, "GET", "/own").await.2, "own");
        assert_eq!(call(&health, "GET", "/ops/other").await.0, 404);
    }
}
