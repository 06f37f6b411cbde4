//! The same test on a real nats-server the test starts (a free port, JetStream, a temporary
//! store, stopped when the test ends). It needs a `nats-server` binary: `NATS_SERVER_BIN`, or
//! `nats-server` on `PATH` (`apt-get install nats-server`); without one it fails and says so.
//! The clock runs: a `retry_after(d)` takes `d`, so keep delays in live tests short.

mod common;

use ruststream_nats::testing::{NatsServer, TestApp};

use {{crate_name}}::app;

#[tokio::test]
async fn live() {
    let server = NatsServer::start();
    let t = TestApp::start_live(app(), &server.url())
        .await
        .expect("the app starts on the server");
    common::accepts_orders_and_dead_letters_empty_ones(&t).await;
    t.shutdown().await.expect("a clean shutdown");
}
