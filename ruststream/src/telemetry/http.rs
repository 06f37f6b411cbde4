//! The HTTP server of `--metrics-addr`: `/metrics`, `/healthz` and `/readyz` on hyper's
//! HTTP/1.1 server, one request per connection, within a bound on open connections and on how
//! long each may take.

use std::convert::Infallible;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::endpoints::{Endpoint, respond};
use super::{Health, Render};

/// The longest request head (request line and headers) the server reads; a longer one is
/// answered `431 Request Header Fields Too Large`. hyper's smallest bound, and far more than a
/// probe or a scrape sends.
const MAX_HEAD: usize = 8192;

/// The HTTP server of `--metrics-addr`, bound and serving.
///
/// Dropping it closes the listener and every open connection at once; [`Server::shutdown`]
/// lets the requests being answered finish first.
#[derive(Debug)]
pub struct Server {
    addr: std::net::SocketAddr,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    /// The address it listens on (with the port the system chose for port 0).
    pub fn local_addr(&self) -> std::net::SocketAddr {
        self.addr
    }

    /// Stops accepting connections, lets the requests being answered finish (each within the
    /// [`ServerLimits`] timeout), and returns once every connection is closed. The generated
    /// `main` calls it after the app stopped, so `/readyz` answers 503 through the whole drain.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        let _ = (&mut self.task).await;
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
/// reason otherwise), on hyper's HTTP/1.1 server: GET and HEAD (405 otherwise), 404 for any
/// other path, 400 for a malformed request and 431 for a request head over 8 KiB. One request
/// per connection (the answer says `connection: close`): what Prometheus and orchestrators'
/// probes send. Served until the [`Server`] is dropped or [shut down](Server::shutdown),
/// within the default [`ServerLimits`].
///
/// To serve the same endpoints from a service's own axum server instead, mount
/// [`router`](super::router) (feature `axum`).
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
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(accept(listener, health, render, limits, stopped));
    Ok(Server { addr, stop, task })
}

/// Accepts connections until `stopped`, then waits for the open ones to be answered.
async fn accept(
    listener: TcpListener,
    health: Health,
    render: Option<Render>,
    limits: ServerLimits,
    mut stopped: watch::Receiver<bool>,
) {
    let mut open = Connections::default();
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.timeout)
        .keep_alive(false)
        .max_buf_size(MAX_HEAD);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(err) => {
                    // Out of file descriptors, for one: wait instead of spinning.
                    tracing::warn!(%err, "the metrics and health server cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = until_stopped(&mut stopped) => break,
        };
        open.make_room(limits.max_connections);
        let health = health.clone();
        let render = render.clone();
        let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
            let endpoint = Endpoint::at(request.uri().path());
            let response = respond(endpoint, request.method(), &health, render.as_ref());
            async move { Ok::<_, Infallible>(response) }
        });
        let connection = http.serve_connection(TokioIo::new(stream), service);
        let mut stopped = stopped.clone();
        open.0.push_back(tokio::spawn(async move {
            let answered = async move {
                tokio::pin!(connection);
                tokio::select! {
                    done = connection.as_mut() => return done,
                    () = until_stopped(&mut stopped) => connection.as_mut().graceful_shutdown(),
                }
                connection.await
            };
            // A connection past the timeout is closed by dropping it.
            if let Ok(Err(err)) = tokio::time::timeout(limits.timeout, answered).await {
                tracing::debug!(%err, "a metrics and health connection failed");
            }
        }));
    }
    drop(listener);
    // Awaited in place: a shutdown cut short (the server dropped) still closes the rest.
    while let Some(connection) = open.0.front_mut() {
        let _ = connection.await;
        open.0.pop_front();
    }
}

/// Returns once the server is told to stop (or was dropped).
async fn until_stopped(stopped: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns is dropped here: it must not live across an await.
    let _ = stopped.wait_for(|stop| *stop).await;
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
