//! A loopback TCP proxy in front of a server, whose link a test can cut, stall and heal while
//! the server keeps running.
//!
//! ```no_run
//! use ruststream_test_server::NatsServer;
//! use ruststream_test_server::proxy::Proxy;
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let server = NatsServer::start();
//! let proxy = Proxy::start(server.port());
//! let client = async_nats::connect(proxy.url()).await?; // the app's side of the link
//!
//! proxy.cut(); // every connection through the proxy is closed, new ones are refused
//! proxy.heal(); // connections are accepted again: the client reconnects
//! proxy.stall(); // connections stay open, but no byte passes either way
//! proxy.heal(); // the held bytes flow again
//! # drop(client);
//! # Ok(())
//! # }
//! ```
//!
//! It runs on plain threads (no runtime), so it works the same from `#[test]` and
//! `#[tokio::test]` functions; dropping it closes everything.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// How often an idle thread looks at the link's state.
const TICK: Duration = Duration::from_millis(10);

const OPEN: u8 = 0;
const CUT: u8 = 1;
const STALLED: u8 = 2;

/// The link's state, shared by the proxy's threads.
#[derive(Debug, Default)]
struct Shared {
    state: AtomicU8,
    /// Bumped by every cut: a connection from an older epoch closes.
    epoch: AtomicU64,
    /// How many connections were accepted and passed on, ever.
    accepted: AtomicU64,
    closing: AtomicBool,
}

/// A TCP proxy on `127.0.0.1` in front of `127.0.0.1:<upstream port>`.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    threads: Arc<Mutex<Vec<JoinHandle<()>>>>,
    acceptor: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Listens on a random loopback port and passes every connection on to `upstream_port`.
    ///
    /// # Panics
    ///
    /// If it cannot listen.
    pub fn start(upstream_port: u16) -> Self {
        let listener =
            TcpListener::bind("127.0.0.1:0").expect("the proxy listens on a loopback port");
        let addr = listener.local_addr().expect("the proxy's address");
        listener
            .set_nonblocking(true)
            .expect("the proxy's listener is non-blocking");
        let upstream = SocketAddr::from(([127, 0, 0, 1], upstream_port));
        let shared = Arc::new(Shared::default());
        let threads: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let acceptor = {
            let shared = Arc::clone(&shared);
            let threads = Arc::clone(&threads);
            thread::spawn(move || accept(&listener, upstream, &shared, &threads))
        };
        Self {
            addr,
            shared,
            threads,
            acceptor: Some(acceptor),
        }
    }

    /// The URL clients connect to, e.g. `nats://127.0.0.1:41234`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.addr.port())
    }

    /// The proxy's port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Cuts the link: every connection through the proxy is closed at once, and new ones are
    /// closed as soon as they are accepted, until [`heal`](Self::heal).
    pub fn cut(&self) {
        self.shared.state.store(CUT, Ordering::SeqCst);
        self.shared.epoch.fetch_add(1, Ordering::SeqCst);
    }

    /// Stalls the link: connections stay open, but no byte passes either way (they wait in the
    /// sockets' buffers) until [`heal`](Self::heal). New connections are accepted and stalled
    /// too.
    pub fn stall(&self) {
        self.shared.state.store(STALLED, Ordering::SeqCst);
    }

    /// Heals the link: bytes flow and connections are accepted again.
    pub fn heal(&self) {
        self.shared.state.store(OPEN, Ordering::SeqCst);
    }

    /// How many connections the proxy accepted and passed on so far (a client that reconnected
    /// counts twice).
    pub fn connections(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.closing.store(true, Ordering::SeqCst);
        self.shared.epoch.fetch_add(1, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        let threads =
            std::mem::take(&mut *self.threads.lock().unwrap_or_else(PoisonError::into_inner));
        for thread in threads {
            let _ = thread.join();
        }
    }
}

fn accept(
    listener: &TcpListener,
    upstream: SocketAddr,
    shared: &Arc<Shared>,
    threads: &Mutex<Vec<JoinHandle<()>>>,
) {
    while !shared.closing.load(Ordering::SeqCst) {
        let client = match listener.accept() {
            Ok((client, _)) => client,
            Err(err) if err.kind() == ErrorKind::WouldBlock => {
                thread::sleep(TICK);
                continue;
            }
            Err(_) => {
                thread::sleep(TICK);
                continue;
            }
        };
        if shared.state.load(Ordering::SeqCst) == CUT {
            let _ = client.shutdown(Shutdown::Both);
            continue;
        }
        let Ok(server) = TcpStream::connect(upstream) else {
            // The server is down: the client sees its connection closed, as it would.
            let _ = client.shutdown(Shutdown::Both);
            continue;
        };
        shared.accepted.fetch_add(1, Ordering::SeqCst);
        let epoch = shared.epoch.load(Ordering::SeqCst);
        let pumps = [
            (client.try_clone(), server.try_clone()),
            (server.try_clone(), client.try_clone()),
        ];
        let mut threads = threads.lock().unwrap_or_else(PoisonError::into_inner);
        for (from, to) in pumps {
            let (Ok(from), Ok(to)) = (from, to) else {
                let _ = client.shutdown(Shutdown::Both);
                let _ = server.shutdown(Shutdown::Both);
                break;
            };
            let shared = Arc::clone(shared);
            threads.push(thread::spawn(move || pump(from, to, &shared, epoch)));
        }
    }
}

/// Copies `from` to `to` while the link is open and the connection's epoch current.
fn pump(mut from: TcpStream, mut to: TcpStream, shared: &Shared, epoch: u64) {
    let _ = from.set_read_timeout(Some(TICK));
    let mut buffer = vec![0_u8; 64 * 1024];
    loop {
        if shared.epoch.load(Ordering::SeqCst) != epoch {
            break;
        }
        if shared.state.load(Ordering::SeqCst) == STALLED {
            thread::sleep(TICK);
            continue;
        }
        match from.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => {
                // Bytes read just as the link stalled are held too.
                while shared.state.load(Ordering::SeqCst) == STALLED
                    && shared.epoch.load(Ordering::SeqCst) == epoch
                {
                    thread::sleep(TICK);
                }
                if shared.epoch.load(Ordering::SeqCst) != epoch
                    || to.write_all(&buffer[..n]).is_err()
                {
                    break;
                }
            }
            Err(err) if matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(err) if err.kind() == ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}
