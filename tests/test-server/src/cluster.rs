//! A three-node JetStream cluster on loopback: three `nats-server` processes, each with its own
//! store, routes to the other two, JetStream on, and a monitoring port the test asks what the
//! cluster looks like (`/jsz`, `/connz`, `/healthz`).
//!
//! Every node is a [`NatsServer`], so a node is killed ([`NatsCluster::kill`], `SIGKILL`) and
//! started again on the same ports with the same store ([`NatsCluster::restart`]) like a single
//! server. Dropping the cluster kills every node and removes their stores.
//!
//! ```no_run
//! use ruststream_test_server::cluster::NatsCluster;
//!
//! let mut cluster = NatsCluster::start(); // returns once a meta leader is elected
//! let url = cluster.url(); // "nats://127.0.0.1:a,nats://127.0.0.1:b,nats://127.0.0.1:c"
//! let leader = cluster.meta_leader(); // the node index the others follow
//! cluster.kill(leader);
//! cluster.restart(leader); // returns once it rejoined and is current
//! # drop(url);
//! ```

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{NatsServer, StartError};

/// The cluster's name (`cluster { name }`).
pub const CLUSTER_NAME: &str = "ruststream-test";
/// How many nodes a cluster has.
pub const NODES: usize = 3;
/// How long the cluster may take to elect a leader, or a node to rejoin, before we give up.
const DEADLINE: Duration = Duration::from_secs(30);
/// How often the monitoring endpoints are polled.
const POLL: Duration = Duration::from_millis(50);
/// How long one monitoring request may take.
const HTTP_TIMEOUT: Duration = Duration::from_secs(2);

/// A running three-node JetStream cluster owned by a test.
#[derive(Debug)]
pub struct NatsCluster {
    nodes: Vec<NatsServer>,
    names: Vec<String>,
    monitor_ports: Vec<u16>,
}

impl NatsCluster {
    /// Starts three nodes (`n1`, `n2`, `n3`) on free loopback ports and waits until they elected
    /// a JetStream meta leader that all three follow.
    ///
    /// # Panics
    ///
    /// If a node does not start (see [`crate::Builder::start`]) or no leader is elected within 30
    /// seconds; the message has every node's log.
    pub fn start() -> Self {
        let cluster = retry_taken_ports(Self::try_start_nodes);
        cluster.wait_until_healthy();
        cluster
    }

    /// Starts the three nodes on ports chosen now; the error of the first that did not start.
    fn try_start_nodes() -> Result<Self, StartError> {
        // Hold every listener until all ports are chosen, so no two are the same.
        let listeners: Vec<TcpListener> = (0..NODES * 2)
            .map(|_| {
                TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| {
                    panic!("nats cluster test support: cannot find a free port: {e}")
                })
            })
            .collect();
        let ports: Vec<u16> = listeners
            .iter()
            .map(|l| l.local_addr().map(|a| a.port()).unwrap_or(0))
            .collect();
        drop(listeners);
        let (route_ports, monitor_ports) = ports.split_at(NODES);
        let names: Vec<String> = (1..=NODES).map(|i| format!("n{i}")).collect();

        let nodes = (0..NODES)
            .map(|i| {
                let routes = route_ports
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != i)
                    .map(|(_, port)| format!("\"nats-route://127.0.0.1:{port}\""))
                    .collect::<Vec<_>>()
                    .join(", ");
                let config = format!(
                    "server_name: {name}\n\
                     http: \"127.0.0.1:{monitor}\"\n\
                     cluster {{\n  name: {CLUSTER_NAME}\n  listen: \"127.0.0.1:{route}\"\n  routes: [{routes}]\n}}\n",
                    name = names[i],
                    monitor = monitor_ports[i],
                    route = route_ports[i],
                );
                NatsServer::builder().config(config).try_start()
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            nodes,
            names,
            monitor_ports: monitor_ports.to_vec(),
        })
    }

    /// The client URL listing every node, comma-separated (what `NatsBroker::new` and
    /// `async_nats::connect` take).
    pub fn url(&self) -> String {
        self.nodes
            .iter()
            .map(NatsServer::url)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Every node's client address, for `async_nats::connect` (which does not split a
    /// comma-separated string).
    ///
    /// # Panics
    ///
    /// Never: the URLs are the nodes' own.
    pub fn servers(&self) -> Vec<async_nats::ServerAddr> {
        self.nodes
            .iter()
            .map(|node| {
                node.url()
                    .parse()
                    .unwrap_or_else(|e| panic!("node url {} does not parse: {e}", node.url()))
            })
            .collect()
    }

    /// Node `index` (0, 1 or 2).
    pub fn node(&self, index: usize) -> &NatsServer {
        &self.nodes[index]
    }

    /// The server name of node `index` (`n1`, `n2`, `n3`), as JetStream reports leaders.
    pub fn name(&self, index: usize) -> &str {
        &self.names[index]
    }

    /// The index of the node named `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }

    /// Whether node `index` runs.
    pub fn is_running(&mut self, index: usize) -> bool {
        self.nodes[index].is_running()
    }

    /// Kills node `index` with `SIGKILL`, like a crash, keeping its store.
    pub fn kill(&mut self, index: usize) {
        self.nodes[index].kill();
    }

    /// Starts node `index` again (same ports, same store) and waits until it rejoined: the
    /// cluster has a meta leader every node follows, and the node reports itself healthy
    /// (`/healthz`: its JetStream assets are current).
    ///
    /// # Panics
    ///
    /// If the node does not start, or does not rejoin within 30 seconds.
    pub fn restart(&mut self, index: usize) {
        self.nodes[index].restart();
        self.wait_until_healthy();
    }

    /// The index of the JetStream meta leader, once the running nodes agree on one.
    ///
    /// # Panics
    ///
    /// If they do not within 30 seconds.
    pub fn meta_leader(&self) -> usize {
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(leader) = self.agreed_leader() {
                return leader;
            }
            if Instant::now() >= deadline {
                self.fail("no JetStream meta leader that every running node follows");
            }
            thread::sleep(POLL);
        }
    }

    /// The running node indexes whose `/connz` lists a client connection named `name`
    /// (`NatsBroker::connection_name`, `ConnectOptions::name`).
    pub fn nodes_with_connection(&self, name: &str) -> Vec<usize> {
        (0..NODES)
            .filter(|&i| {
                self.monitor(i, "/connz?limit=1024")
                    .and_then(|v| v.get("connections").and_then(Value::as_array).cloned())
                    .is_some_and(|conns| {
                        conns
                            .iter()
                            .any(|c| c.get("name").and_then(Value::as_str) == Some(name))
                    })
            })
            .collect()
    }

    /// What node `index`'s monitoring endpoint `path` (`/jsz`, `/connz`, `/varz`...) answers,
    /// parsed; `None` when the node does not answer (it is down) or the answer is not JSON.
    pub fn monitor(&self, index: usize, path: &str) -> Option<Value> {
        monitor_json(self.monitor_ports[index], path)
    }

    /// The last lines of every node's log, for assertion messages.
    pub fn log_tail(&self) -> String {
        self.nodes
            .iter()
            .zip(&self.names)
            .map(|(node, name)| format!("===== node {name} =====\n{}", node.log_tail()))
            .collect()
    }

    /// The meta leader every node that answers agrees on, when all answer or at least two do.
    fn agreed_leader(&self) -> Option<usize> {
        let leaders: Vec<String> = (0..NODES)
            .filter_map(|i| {
                let jsz = self.monitor(i, "/jsz")?;
                let leader = jsz.get("meta_cluster")?.get("leader")?.as_str()?;
                (!leader.is_empty()).then(|| leader.to_owned())
            })
            .collect();
        let first = leaders.first()?;
        if leaders.len() < 2 || leaders.iter().any(|l| l != first) {
            return None;
        }
        self.index_of(first)
    }

    /// Waits until every node runs, follows one meta leader, and reports itself healthy.
    fn wait_until_healthy(&self) {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let healthy = (0..NODES).all(|i| {
                self.monitor(i, "/healthz")
                    .and_then(|v| v.get("status").and_then(Value::as_str).map(str::to_owned))
                    .is_some_and(|s| s == "ok")
            });
            let followed = (0..NODES).all(|i| {
                self.monitor(i, "/jsz")
                    .and_then(|v| {
                        v.get("meta_cluster")?
                            .get("leader")?
                            .as_str()
                            .map(str::to_owned)
                    })
                    .is_some_and(|l| !l.is_empty())
            });
            if healthy && followed && self.agreed_leader().is_some() {
                return;
            }
            if Instant::now() >= deadline {
                self.fail("the nodes are not all healthy and following one meta leader");
            }
            thread::sleep(POLL);
        }
    }

    fn fail(&self, what: &str) -> ! {
        let views: String = (0..NODES)
            .map(|i| {
                format!(
                    "{}: /jsz meta_cluster = {}\n",
                    self.names[i],
                    self.monitor(i, "/jsz")
                        .and_then(|v| v.get("meta_cluster").cloned())
                        .map_or_else(|| "(no answer)".to_owned(), |v| v.to_string())
                )
            })
            .collect();
        panic!(
            "nats cluster test support: {what} within {DEADLINE:?}\n{views}{}",
            self.log_tail()
        );
    }
}

/// How many times [`retry_taken_ports`] starts again.
const PORT_TRIES: usize = 5;

/// Runs `start` until it does not fail for a port that was taken, at most five times: a port
/// chosen free ([`free_port`], or a listener bound to port 0 and dropped) can be taken before
/// the server binds it, by another test's server or by any outgoing connection (the kernel
/// hands out ephemeral ports from the same range). Seen in CI: a cluster node's monitoring
/// port, `bind: address already in use`.
///
/// # Panics
///
/// On any other failure of `start`, or when every try found a port taken; the message is the
/// last failure's (with the server's log).
pub fn retry_taken_ports<T>(mut start: impl FnMut() -> Result<T, StartError>) -> T {
    let mut tries = 0;
    loop {
        tries += 1;
        match start() {
            Ok(started) => return started,
            Err(err)
                if tries < PORT_TRIES && err.to_string().contains("address already in use") =>
            {
                eprintln!(
                    "nats-server test support: a port was taken before the server bound it; starting again with new ports"
                );
            }
            Err(err) => panic!("{err}"),
        }
    }
}

/// A loopback port nothing listens on now (for a server's `-m` monitoring port, say). It can be
/// taken before it is used: start the server through [`retry_taken_ports`].
///
/// # Panics
///
/// If no port can be bound.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("nats cluster test support: cannot find a free port: {e}"))
}

/// What the monitoring endpoint `path` of the server whose monitoring port is `port` answers,
/// parsed; `None` when it does not answer 200 with JSON.
pub fn monitor_json(port: u16, path: &str) -> Option<Value> {
    serde_json::from_str(&http_get(port, path)?).ok()
}

/// `GET http://127.0.0.1:{port}{path}`; the body, or `None` if the server does not answer 200.
fn http_get(port: u16, path: &str) -> Option<String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, HTTP_TIMEOUT).ok()?;
    stream.set_read_timeout(Some(HTTP_TIMEOUT)).ok()?;
    stream.set_write_timeout(Some(HTTP_TIMEOUT)).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let status_ok = head
        .lines()
        .next()
        .is_some_and(|line| line.split_whitespace().nth(1) == Some("200"));
    status_ok.then(|| body.to_owned())
}
