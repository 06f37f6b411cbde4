//! A `RunningApp` dropped without `stop` (a `select!` that cancelled `run_until`, say) stops its
//! sources: nothing goes on pulling or settling in the background.

mod support;

use std::time::Duration;

use ruststream::HandlerOutcome;
use support::nats::*;

#[tokio::test]
async fn a_running_app_dropped_without_stop_stops_pulling() {
    eprintln!("running against {}", NatsServer::version());
    let logs = Logs::default();
    let _guard = logs.install();
    let (server, _client, js) = jetstream_server().await;
    let handler = Scripted::always(HandlerOutcome::ack());
    let running = start_on(&server, |b| {
        b.include(created("dropped").handler(handler.clone()));
    })
    .await;
    publish_stored(&js, "orders.created", order(1)).await;
    handler.until_seen(1).await;
    until_settled(&js, "dropped", 1, "the first is settled").await;

    drop(running);
    assert!(
        logs.lines()
            .iter()
            .any(|l| l.contains("WARN") && l.contains("dropped without stop()")),
        "a warning says the app was not drained"
    );
    // The app's pull requests go with it: the server holds none for the consumer.
    consumer_until(&js, STREAM, "dropped", "no pull request waiting", |i| {
        i.num_waiting == 0
    })
    .await;
    publish_stored(&js, "orders.created", order(2)).await;
    quiet_for(Duration::from_secs(2)).await;
    assert_eq!(
        handler.seen().len(),
        1,
        "handled after the drop: {:?}",
        handler.seen()
    );
    let info = consumer_info(&js, STREAM, "dropped").await;
    assert_eq!(
        (info.num_pending, info.num_ack_pending),
        (1, 0),
        "{info:#?}"
    );
}
