//! The pull consumer's edges, live: forged messages on the pull inbox, a server that refuses a
//! request because too many wait, and a pull expiry of zero (no heartbeats) across a server restart.

mod support;

use std::time::Duration;

use async_nats::jetstream::consumer;
use ruststream::HandlerOutcome;
use ruststream_nats::{JetStreamSubject, NatsBroker};
use support::nats::*;

/// Where the app's pull requests for consumer `durable` of [`STREAM`] go.
fn next_subject(durable: &str) -> String {
    format!("$JS.API.CONSUMER.MSG.NEXT.{STREAM}.{durable}")
}

#[tokio::test]
async fn messages_forged_onto_the_pull_inbox_are_dropped_unhandled_and_unsettled() {
    eprintln!("running against {}", NatsServer::version());
    let (server, client, js) = jetstream_server().await;
    let requests = Recorder::start(&client, [next_subject("worker")]).await;
    let handler = Scripted::always(HandlerOutcome::ack());
    let running = start_on(&server, |b| {
        b.include(created("worker").handler(handler.clone()));
    })
    .await;
    publish_stored(&js, "orders.created", order(1)).await;
    handler.until_seen(1).await;

    // The inbox the app's requests name as their reply subject.
    let inbox = requests.until(1).await[0]
        .reply
        .clone()
        .expect("a pull request names its inbox");
    let settlements = Recorder::start(&client, ["stolen.>", "$JS.ACK.ORDERS.other.>"]).await;
    // No reply subject, a reply subject anywhere, and an acknowledgement subject of another
    // consumer: none is this consumer's delivery.
    publish_core(&client, inbox.as_str(), &[], order(91)).await;
    client
        .publish_with_reply(inbox.clone(), "stolen.acks", order(92).into())
        .await
        .expect("publish");
    client
        .publish_with_reply(
            inbox.clone(),
            "$JS.ACK.ORDERS.other.1.7.7.1700000000000000000.0",
            order(93).into(),
        )
        .await
        .expect("publish");
    client.flush().await.expect("flush");

    // A genuine delivery after them: they reached the inbox first (one connection, in order).
    publish_stored(&js, "orders.created", order(2)).await;
    let seen = handler.until_seen(2).await;
    let ids: Vec<u64> = seen.iter().map(|s| s.id).collect();
    assert_eq!(ids, [1, 2], "forged messages were handled: {seen:?}");
    until_settled(&js, "worker", 2, "the genuine ones are settled").await;
    running.stop().await.expect("a clean stop");
    assert!(
        settlements.messages().is_empty(),
        "a settlement went to a forged reply subject: {:?}",
        settlements.messages()
    );
}

#[tokio::test]
async fn a_request_refused_for_too_many_waiting_is_not_asked_again_in_a_hot_loop() {
    let (server, client, js) = jetstream_server().await;
    // An operator's durable that lets one request wait at a time.
    js.get_stream(STREAM)
        .await
        .expect("the stream")
        .create_consumer(consumer::pull::Config {
            durable_name: Some("narrow".to_owned()),
            filter_subject: "orders.created".to_owned(),
            ack_policy: consumer::AckPolicy::Explicit,
            max_waiting: 1,
            ..Default::default()
        })
        .await
        .expect("the durable is created");
    // Another client's request takes the one place for 3 s.
    let other = client.new_inbox();
    let mut held = client.subscribe(other.clone()).await.expect("subscribe");
    client
        .publish_with_reply(
            next_subject("narrow"),
            other,
            r#"{"batch":1,"expires":3000000000}"#.into(),
        )
        .await
        .expect("publish");
    client.flush().await.expect("flush");

    let requests = Recorder::start(&client, [next_subject("narrow")]).await;
    let handler = Scripted::always(HandlerOutcome::ack());
    let running = start_on(&server, |b| {
        b.include(created("narrow").handler(handler.clone()));
    })
    .await;
    // While the place is taken, the app is refused ("409 Exceeded MaxWaiting"): it asks again
    // after a pause, not at once.
    quiet_for(Duration::from_secs(2)).await;
    let asked = requests.messages().len();
    assert!(
        (1..=5).contains(&asked),
        "{asked} pull requests in 2 s while refused"
    );
    // Once the other request is served (it takes the next message, which the test settles),
    // the app's request is taken, and messages flow.
    publish_stored(&js, "orders.created", order(0)).await;
    let taken = tokio::time::timeout(PATIENCE, futures::StreamExt::next(&mut held))
        .await
        .expect("the other request is served")
        .expect("its inbox is open");
    client
        .publish(taken.reply.expect("a delivery"), "+ACK".into())
        .await
        .expect("publish");
    publish_stored(&js, "orders.created", order(1)).await;
    let seen = handler.until_seen(1).await;
    assert_eq!(seen[0].id, 1);
    until_settled(&js, "narrow", 2, "both settled").await;
    running.stop().await.expect("a clean stop");
}

#[tokio::test]
async fn a_pull_expiry_of_zero_still_comes_back_after_a_server_restart() {
    let (mut server, _client, js) = jetstream_server().await;
    let handler = Scripted::always(HandlerOutcome::ack());
    let running = start(NatsBroker::new(server.url()), |b| {
        b.include(
            JetStreamSubject::new("orders.created", STREAM)
                .durable("forever")
                .pull_expiry(Duration::ZERO)
                .ack_wait(millis(1_000))
                .handler(handler.clone()),
        );
    })
    .await
    .expect("the app starts");
    publish_stored(&js, "orders.created", order(1)).await;
    handler.until_seen(1).await;
    until_settled(&js, "forever", 1, "the first is settled").await;

    // The crash loses the request the app left waiting, which has no expiry and asks for no
    // heartbeats (and may lose the first acknowledgement: the message then comes again after
    // ack_wait).
    server.kill();
    server.restart();
    let (_client, js) = connect_jetstream(&server).await;
    for id in 2..=3 {
        publish_stored(&js, "orders.created", order(id)).await;
    }
    until_settled(&js, "forever", 3, "everything settled").await;
    let ids: Vec<u64> = handler.seen().iter().map(|s| s.id).collect();
    assert!(ids.contains(&2) && ids.contains(&3), "{ids:?}");
    running.stop().await.expect("a clean stop");
}
