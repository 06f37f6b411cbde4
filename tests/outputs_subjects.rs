//! Destinations computed at run time: `#[outgoing(name = "orders.{tenant}.placed")]` filled
//! from the value's fields and checked before anything is published, and `ctx.publish_to` for
//! one-off subjects, which refuses the reserved prefixes (`$JS.API.`, `$JS.ACK.`, `$KV.`, `$O.`,
//! `$SYS.`, `_INBOX.`) unless the call opts in.

use ruststream::PublishErrorKind;
use ruststream::registration::Handled;
use ruststream_nats::prelude::*;
use ruststream_nats::testing::TestApp;
use serde::{Deserialize, Serialize};

#[derive(Debug, Deserialize)]
struct Order {
    id: u64,
    tenant: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "orders.{tenant}.placed")]
struct Placed {
    tenant: String,
    id: u64,
}

#[subscriber("orders.incoming", reply)]
async fn place(order: &Order) -> Result<Placed, HandlerOutcome> {
    Ok(Placed {
        tenant: order.tenant.clone(),
        id: order.id,
    })
}

#[derive(Debug, Deserialize)]
struct Forward {
    to: String,
    reserved: bool,
}

/// Publishes to a subject the payload names: what `publish_to` must guard.
#[subscriber("forward")]
async fn forward(f: &Forward, ctx: &mut Context<'_>) -> HandlerOutcome {
    let sent = if f.reserved {
        ctx.publish_to_reserved(&f.to, "hello").await
    } else {
        ctx.publish_to(&f.to, "hello").await
    };
    match sent {
        Ok(()) => HandlerOutcome::ack(),
        Err(err) if err.kind() == PublishErrorKind::Reserved => HandlerOutcome::drop(),
        Err(err) if err.kind() == PublishErrorKind::InvalidSubject => HandlerOutcome::drop(),
        Err(_) => HandlerOutcome::retry(),
    }
}

fn app() -> impl App<State = ()> {
    RustStream::new(AppInfo::new("orders", "0.1.0")).with_broker(
        NatsBroker::new("nats://127.0.0.1:1"),
        |b| {
            b.include(place);
            b.include(forward);
        },
    )
}

#[tokio::test(start_paused = true)]
async fn a_subject_template_is_filled_from_the_value() {
    let t = TestApp::start(app()).await.expect("the app starts");
    t.publish(
        "orders.incoming",
        &serde_json::json!({"id": 1, "tenant": "acme"}),
    )
    .await
    .expect("published");
    t.settle().await;
    assert_eq!(t.outcomes("place"), [HandlerOutcome::ack()]);
    assert_eq!(
        t.published::<Placed>("orders.acme.placed"),
        [Placed {
            tenant: "acme".into(),
            id: 1
        }]
    );
    t.shutdown().await.expect("a clean stop");
}

#[tokio::test(start_paused = true)]
async fn a_value_that_cannot_fill_the_template_publishes_nothing() {
    let t = TestApp::start(app()).await.expect("the app starts");
    for tenant in ["acme.>", "", "two words", "*"] {
        t.publish(
            "orders.incoming",
            &serde_json::json!({"id": 2, "tenant": tenant}),
        )
        .await
        .expect("published");
    }
    t.settle().await;
    // The reply is not published, and never can be: not retried (no dead-letter subject is
    // declared, so each input is let go, with an error naming why).
    let handled = t.handled("place");
    assert_eq!(handled.len(), 4, "each input handled once");
    for h in &handled {
        assert!(
            matches!(&h.handled, Handled::Unpublishable(why) if why.contains("cannot fill")),
            "{h:?}"
        );
        assert!(!h.decision.brings_back(), "{h:?}");
    }
    assert!(t.nats().published("orders.*.placed").is_empty());
    assert!(
        t.nats()
            .published("orders.>")
            .iter()
            .all(|m| &*m.subject == "orders.incoming")
    );
    t.shutdown().await.expect("a clean stop");
}

#[tokio::test(start_paused = true)]
async fn publish_to_refuses_reserved_prefixes_unless_asked() {
    let t = TestApp::start(app()).await.expect("the app starts");
    for to in [
        "$JS.API.STREAM.DELETE.ORDERS",
        "$SYS.REQ.SERVER.PING",
        "_INBOX.abc",
        "$KV.IDEM.order-7",
        "$JS.ACK.ORDERS.other.1.1.1.0.0",
        "$O.FILES.C.chunk",
    ] {
        t.publish("forward", &serde_json::json!({"to": to, "reserved": false}))
            .await
            .expect("published");
    }
    t.publish(
        "forward",
        &serde_json::json!({"to": "orders.*", "reserved": false}),
    )
    .await
    .expect("published");
    t.publish(
        "forward",
        &serde_json::json!({"to": "audit.log", "reserved": false}),
    )
    .await
    .expect("published");
    t.publish(
        "forward",
        &serde_json::json!({"to": "_INBOX.abc", "reserved": true}),
    )
    .await
    .expect("published");
    t.settle().await;
    assert_eq!(
        t.outcomes("forward"),
        [
            HandlerOutcome::drop(),
            HandlerOutcome::drop(),
            HandlerOutcome::drop(),
            HandlerOutcome::drop(),
            HandlerOutcome::drop(),
            HandlerOutcome::drop(),
            HandlerOutcome::drop(),
            HandlerOutcome::ack(),
            HandlerOutcome::ack(),
        ]
    );
    assert!(t.nats().published("$JS.API.>").is_empty());
    assert!(t.nats().published("$SYS.>").is_empty());
    assert!(t.nats().published("$KV.>").is_empty());
    assert!(t.nats().published("$O.>").is_empty());
    assert!(t.nats().published("$JS.ACK.ORDERS.other.>").is_empty());
    assert_eq!(t.published::<String>("audit.log"), ["hello"]);
    assert_eq!(t.published::<String>("_INBOX.abc"), ["hello"], "opted in");
    t.shutdown().await.expect("a clean stop");
}
