//! The HTTP server of `--metrics-addr`: `/metrics`, `/healthz` and `/readyz`, one request per
//! connection, within a bound on open connections and on how long each may take.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::{Health, Render};

/// The HTTP server of `--metrics-addr`, bound and serving.
#[derive(Debug)]
pub struct Server {
    addr: std::net::SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    /// The address it listens on (with the port the system chose for port 0).
    pub fn local_addr(&self) -> std::net::SocketAddr {
        self.addr
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// How many connections the metrics and health server keeps open at once, and how long one may
/// take from its first byte to the end of the answer.
///
/// A connection past the bound takes the place of the oldest one, which is closed: idle or
/// slow clients can neither exhaust the process's file descriptors nor keep a new probe from
/// being answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    max_connections: usize,
    timeout: Duration,
}

impl Default for ServerLimits {
    /// 64 connections, 10 s each.
    fn default() -> Self {
        Self {
            max_connections: 64,
            timeout: Duration::from_secs(10),
        }
    }
}

impl ServerLimits {
    /// At most `max` connections open at once (at least one).
    pub fn max_connections(mut self, max: usize) -> Self {
        self.max_connections = max.max(1);
        self
    }

    /// A connection that has not been answered within `timeout` is closed.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

/// Binds `addr` and serves `/metrics` (the text of `render`, 404 without one), `/healthz`
/// (200 while the process runs) and `/readyz` (200 when `health` is ready, 503 with the
/// reason otherwise). HTTP/1.1 GET only, one request per connection: what Prometheus and
/// orchestrators' probes send. Served until the [`Server`] is dropped, within the default
/// [`ServerLimits`].
///
/// The exporter's own listener serves only metrics; this one answers the health probes on the
/// same address and needs no HTTP framework.
///
/// # Errors
///
/// `addr` cannot be bound.
pub async fn serve(
    addr: std::net::SocketAddr,
    health: Health,
    render: Option<Render>,
) -> Result<Server, crate::Error> {
    serve_with(addr, health, render, ServerLimits::default()).await
}

/// [`serve`] within `limits`.
///
/// # Errors
///
/// `addr` cannot be bound.
pub async fn serve_with(
    addr: std::net::SocketAddr,
    health: Health,
    render: Option<Render>,
    limits: ServerLimits,
) -> Result<Server, crate::Error> {
    let listener = TcpListener::bind(addr).await.map_err(|e| {
        crate::Error::new(
            crate::ErrorKind::Config,
            format!(
                "cannot listen for metrics and health on {addr} (--metrics-addr): {e}; choose a free address"
            ),
        )
    })?;
    let addr = listener.local_addr().unwrap_or(addr);
    let task = tokio::spawn(async move {
        let mut open = Connections::default();
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(err) => {
                    // Out of file descriptors, for one: wait instead of spinning.
                    tracing::warn!(%err, "the metrics and health server cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            open.make_room(limits.max_connections);
            let health = health.clone();
            let render = render.clone();
            open.0.push_back(tokio::spawn(async move {
                let answered = answer(stream, &health, render.as_ref());
                let _ = tokio::time::timeout(limits.timeout, answered).await;
            }));
        }
    });
    Ok(Server { addr, task })
}

/// The connections being answered, oldest first; closed when the server is dropped.
#[derive(Default)]
struct Connections(std::collections::VecDeque<tokio::task::JoinHandle<()>>);

impl Connections {
    /// Forgets the answered connections, then closes the oldest until a new one fits in `max`.
    fn make_room(&mut self, max: usize) {
        self.0.retain(|task| !task.is_finished());
        while self.0.len() >= max {
            let Some(oldest) = self.0.pop_front() else {
                break;
            };
            oldest.abort();
            tracing::debug!(
                max,
                "the metrics and health server closed its oldest connection to take a new one"
            );
        }
    }
}

impl Drop for Connections {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// Reads one request (up to its blank line, at most 8 KiB) and answers it; the caller bounds
/// how long it may take.
async fn answer(
    mut stream: tokio::net::TcpStream,
    health: &Health,
    render: Option<&Render>,
) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let read = async {
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 8192 {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        Ok::<_, std::io::Error>(())
    };
    read.await?;
    let request = String::from_utf8_lossy(&buf);
    let mut words = request.split_whitespace();
    let method = words.next().unwrap_or("");
    let path = words.next().unwrap_or("").split('?').next().unwrap_or("");
    let (status, content_type, body) = match (method, path) {
        ("GET" | "HEAD", "/metrics") => match render {
            Some(render) => (
                "200 OK",
                "text/plain; version=0.0.4; charset=utf-8",
                render(),
            ),
            None => (
                "404 Not Found",
                "text/plain; charset=utf-8",
                "metrics are not compiled in: enable the `prometheus` feature of ruststream\n"
                    .to_owned(),
            ),
        },
        ("GET" | "HEAD", "/healthz") => ("200 OK", "text/plain; charset=utf-8", "ok\n".to_owned()),
        ("GET" | "HEAD", "/readyz") => match health.readiness() {
            Ok(()) => ("200 OK", "text/plain; charset=utf-8", "ready\n".to_owned()),
            Err(why) => (
                "503 Service Unavailable",
                "text/plain; charset=utf-8",
                format!("not ready: {why}\n"),
            ),
        },
        ("GET" | "HEAD", _) => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "not found: try /metrics, /healthz or /readyz\n".to_owned(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "only GET\n".to_owned(),
        ),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    if method != "HEAD" {
        stream.write_all(body.as_bytes()).await?;
    }
    stream.shutdown().await
}
