//! The service on NATS emulated in the test: no server, and a paused clock (a 30 s backoff
//! passes at once).

mod common;

use ruststream_nats::testing::TestApp;

use {{crate_name}}::app;

#[tokio::test(start_paused = true)]
async fn in_process() {
    let t = TestApp::start(app()).await.expect("the app starts");
    common::accepts_orders_and_dead_letters_empty_ones(&t).await;
    t.shutdown().await.expect("a clean shutdown");
}
