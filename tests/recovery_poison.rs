//! Poison messages, live: a payload whose decoding panics is settled as undecodable, and a
//! delivery that arrives past the cap (an earlier one hung past ack_wait) goes to the dead-letter
//! subject without the handler running again.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ruststream::{Context, Handle, HandlerOutcome};
use ruststream_nats::JetStreamSubject;
use ruststream_test_server::client::{self, eventually};
use serde::{Deserialize, Deserializer};
use support::nats::*;

/// An order whose `Deserialize` panics on id 13 (a custom decoder with a bug).
#[derive(Debug)]
struct Touchy {
    id: u64,
}

impl<'de> Deserialize<'de> for Touchy {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let order = Order::deserialize(deserializer)?;
        assert!(order.id != 13, "the decoder cannot stand order 13");
        Ok(Self { id: order.id })
    }
}

#[derive(Clone, Default)]
struct Touched(Arc<Mutex<Vec<u64>>>);

impl Touched {
    fn ids(&self) -> Vec<u64> {
        self.0.lock().expect("not poisoned").clone()
    }
}

impl Handle<Touchy> for Touched {
    async fn handle(
        &self,
        order: &Touchy,
        _outs: &(),
        _ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        self.0.lock().expect("not poisoned").push(order.id);
        Ok(())
    }
}

#[tokio::test]
async fn a_payload_whose_decoding_panics_is_settled_as_undecodable() {
    eprintln!("running against {}", NatsServer::version());
    let (server, client, js) = jetstream_server().await;
    let acks = Recorder::start(&client, ["$JS.ACK.ORDERS.touchy.>"]).await;
    let handler = Touched::default();
    let running = start_on(&server, |b| {
        b.include(
            JetStreamSubject::new("orders.created", STREAM)
                .durable("touchy")
                .handler(handler.clone()),
        )
        .name("touchy")
        .dead_letter("orders.dead");
    })
    .await;
    publish_stored(&js, "orders.created", order(13)).await;
    let good = publish_stored(&js, "orders.created", order(14)).await;

    until_settled(&js, "touchy", good, "both settled").await;
    assert_eq!(handler.ids(), [14], "the handler never saw order 13");
    assert_eq!(acks.acks(STREAM, "touchy"), ["+TERM", "+ACK"]);
    // Undecodable: to the dead-letter subject, as it arrived.
    let dead = client::stream_messages(&js, STREAM)
        .await
        .into_iter()
        .filter(|m| m.subject.as_str() == "orders.dead")
        .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
        .collect::<Vec<_>>();
    assert_eq!(dead, [order(13)]);
    running.stop().await.expect("a clean stop");
}

#[tokio::test]
async fn a_delivery_past_the_cap_is_dead_lettered_without_running_the_handler() {
    let (server, client, js) = jetstream_server().await;
    let acks = Recorder::start(&client, ["$JS.ACK.ORDERS.hung.>"]).await;
    // Order 7 hangs the handler past ack_wait on every delivery; the others are quick.
    let handler = Scripted::always(HandlerOutcome::retry()).slow_when(|seen| {
        if seen.id == 7 {
            Duration::from_secs(4)
        } else {
            Duration::ZERO
        }
    });
    let running = start_on(&server, |b| mount_capped(b, &handler)).await;
    let seq = publish_stored(&js, "orders.created", order(7)).await;

    // Delivery 1 hangs, delivery 2 (at the cap) hangs too; delivery 3 is past the cap.
    let dead = eventually(PATIENCE, "the dead letter of order 7", || async {
        let dead: Vec<_> = client::stream_messages(&js, STREAM)
            .await
            .into_iter()
            .filter(|m| m.subject.as_str() == "orders.dead")
            .collect();
        (!dead.is_empty()).then_some(dead)
    })
    .await;
    assert_eq!(dead.len(), 1);
    assert_eq!(&dead[0].payload[..], order(7).as_bytes());
    let info = consumer_until(&js, STREAM, "hung", "order 7 terminated", |i| {
        i.num_ack_pending == 0 && i.ack_floor.stream_sequence >= seq
    })
    .await;
    assert!(info.num_pending == 0, "{info:#?}");
    assert!(
        acks.acks(STREAM, "hung").contains(&"+TERM".to_owned()),
        "{:?}",
        acks.acks(STREAM, "hung")
    );
    // The handler ran on the first two deliveries only.
    let delivered = handler.delivered();
    assert_eq!(delivered, [Some(1), Some(2)]);
    // The stop waits for the two hung handlers: their answers (a retry at the cap would be
    // another dead letter) are stale, and not sent.
    running.stop().await.expect("a clean stop");
    let delivered = handler.delivered();
    assert_eq!(delivered, [Some(1), Some(2)], "never again");
    let dead = client::stream_messages(&js, STREAM)
        .await
        .into_iter()
        .filter(|m| m.subject.as_str() == "orders.dead")
        .count();
    assert_eq!(dead, 1, "one dead letter");
    assert_eq!(acks.acks(STREAM, "hung"), ["+TERM"]);
}
