//! The operations endpoints, as an orchestrator reaches them: a new [`Health`] served on a free
//! port (`/metrics`, `/healthz`, `/readyz`), and a real HTTP client (ureq) to ask it.

use std::net::SocketAddr;

use ruststream::telemetry::{self, Health};

/// `GET http://addr/path` with a real HTTP client: the status and the body.
pub async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let url = format!("http://{addr}{path}");
    tokio::task::spawn_blocking(move || match ureq::get(&url).call() {
        Ok(response) => {
            let status = response.status();
            (status, response.into_string().expect("a text body"))
        }
        Err(ureq::Error::Status(status, response)) => {
            (status, response.into_string().expect("a text body"))
        }
        Err(err) => panic!("GET {url} failed: {err}"),
    })
    .await
    .expect("the HTTP client's thread")
}

/// Serves the operations endpoints of a new [`Health`] on a free port.
pub async fn operations() -> (Health, telemetry::Server) {
    let health = Health::new();
    let render = telemetry::install_prometheus().expect("the Prometheus recorder installs");
    let server = telemetry::serve(
        "127.0.0.1:0".parse().expect("an address"),
        health.clone(),
        Some(render),
    )
    .await
    .expect("the operations server binds");
    (health, server)
}
