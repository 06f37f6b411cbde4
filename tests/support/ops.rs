//! The operations endpoints, as an orchestrator reaches them: a new [`Health`] served on a free
//! port (`/metrics`, `/healthz`, `/readyz`), and a real HTTP client (ureq) to ask it; the
//! metrics of one test read as `/metrics` renders them ([`LocalMetrics`]).

use std::collections::BTreeMap;
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

/// The samples of the Prometheus text: `name{labels}` (labels sorted) → value.
pub fn samples(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (series, value) = line.rsplit_once(' ').expect("`series value`");
        let key = match series.split_once('{') {
            Some((name, labels)) => {
                let mut labels: Vec<&str> = labels.trim_end_matches('}').split(',').collect();
                labels.sort_unstable();
                format!("{name}{{{}}}", labels.join(","))
            }
            None => series.to_owned(),
        };
        out.insert(key, value.parse().expect("a number"));
    }
    out
}

/// A Prometheus recorder for the metrics of one test's thread: what a `#[tokio::test]` (every
/// task on the test's thread) counts while [`LocalMetrics::install`]'s guard lives, apart from
/// the other tests of the binary.
pub struct LocalMetrics(metrics_exporter_prometheus::PrometheusRecorder);

impl LocalMetrics {
    pub fn new() -> Self {
        Self(metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder())
    }

    /// Records this thread's metrics until the guard is dropped.
    pub fn install(&self) -> metrics::LocalRecorderGuard<'_> {
        metrics::set_default_local_recorder(&self.0)
    }

    /// The value of series `key` (`name{label="value",..}`, labels sorted), 0 when the text
    /// has no such series.
    pub fn value(&self, key: &str) -> f64 {
        samples(&self.0.handle().render())
            .get(key)
            .copied()
            .unwrap_or(0.0)
    }
}
