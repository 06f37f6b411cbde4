//! Opt-in confirmed settlements (JetStream's "AckAck"), live: each settlement is a request the
//! server answers, and one the server did not answer (a stalled link) is sent again until it
//! does, instead of being lost without a word.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use ruststream::{Context, Handle, HandlerOutcome};
use ruststream_nats::{JetStreamSubject, NatsBroker};
use ruststream_test_server::client::{eventually, wait_until};
use ruststream_test_server::proxy::Proxy;
use support::nats::*;

/// A handler that answers `ack` once `go` is set.
#[derive(Clone, Default)]
struct Gate {
    go: Arc<AtomicBool>,
    calls: Arc<AtomicUsize>,
}

impl Handle<Order> for Gate {
    async fn handle(
        &self,
        _order: &Order,
        _outs: &(),
        _ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        while !self.go.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_confirmed_settlement_is_a_request_the_server_answers() {
    eprintln!("running against {}", NatsServer::version());
    let (server, client, js) = jetstream_server().await;
    let acks = Recorder::start(&client, ["$JS.ACK.ORDERS.sure.>"]).await;
    let handler = Scripted::first_then_ack(HandlerOutcome::retry());
    let running = start_on(&server, |b| {
        b.include(created("sure").handler(handler.clone()))
            .confirm_acks();
    })
    .await;
    let seq = publish_stored(&js, "orders.created", order(1)).await;
    until_settled(&js, "sure", seq, "acknowledged").await;
    let sent = acks.messages();
    let forms: Vec<_> = sent
        .iter()
        .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
        .collect();
    assert_eq!(forms, ["-NAK", "+ACK"]);
    assert!(
        sent.iter().all(|m| m.reply.is_some()),
        "each settlement asks for the server's answer: {sent:?}"
    );
    running.stop().await.expect("a clean stop");
}

#[tokio::test]
async fn a_settlement_the_server_did_not_confirm_is_sent_again_until_it_does() {
    let logs = Logs::default();
    let _guard = logs.install();
    let (server, _client, js) = jetstream_server().await;
    let proxy = Proxy::start(server.port());
    // The handler answers only once the test says so.
    let handler = Gate::default();
    let running = start(NatsBroker::new(proxy.url()), |b| {
        b.include(
            JetStreamSubject::new("orders.created", STREAM)
                .durable("stalled")
                .handler(handler.clone()),
        )
        .name("stalled")
        .confirm_acks();
    })
    .await
    .expect("the app starts");
    let seq = publish_stored(&js, "orders.created", order(1)).await;
    wait_until(PATIENCE, "the handler runs", || {
        handler.calls.load(Ordering::SeqCst) == 1
    })
    .await;

    // The link stalls as the handler answers: the server cannot confirm.
    proxy.stall();
    handler.go.store(true, Ordering::SeqCst);
    eventually(
        PATIENCE,
        "a warning that the server did not confirm",
        || async {
            logs.lines()
                .iter()
                .any(|l| l.contains("WARN") && l.contains("did not confirm the settlement"))
                .then_some(())
        },
    )
    .await;
    proxy.heal();

    // Confirmed once the link is back: settled, and not delivered again.
    until_settled(&js, "stalled", seq, "acknowledged").await;
    let info = consumer_info(&js, STREAM, "stalled").await;
    assert_eq!(info.delivered.consumer_sequence, 1, "{info:#?}");
    assert_eq!(handler.calls.load(Ordering::SeqCst), 1);
    running.stop().await.expect("a clean stop");
}
