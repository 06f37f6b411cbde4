//! Typed headers in, headers out: `Header<T>` reads a named header (a missing or malformed one
//! refuses the delivery with a reason), `Option<Header<T>>` and `Headers` take what there is,
//! outputs carry headers, and the input's correlation id (`x-correlation-id`) travels to every
//! output by default.

use ruststream::{CORRELATION_ID_HEADER, Headers};
use ruststream_nats::prelude::*;
use ruststream_nats::testing::TestApp;
use serde::{Deserialize, Serialize};

#[derive(Debug, Deserialize)]
struct Order {
    id: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "orders.tagged")]
struct Tagged {
    id: u64,
    tenant: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "orders.audited")]
struct Audited {
    id: u64,
    headers: usize,
}

#[derive(Debug)]
struct Tenant(String);

impl TypedHeader for Tenant {
    const NAME: &'static str = "x-tenant";

    fn parse(value: &str) -> Result<Self, String> {
        if value.is_empty() || !value.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(format!(
                "`{value}` is not a tenant name (letters and digits)"
            ));
        }
        Ok(Self(value.to_owned()))
    }
}

#[subscriber("orders.placed", reply)]
async fn tag(order: &Order, Header(tenant): Header<Tenant>) -> Result<Tagged, HandlerOutcome> {
    Ok(Tagged {
        id: order.id,
        tenant: tenant.0,
    })
}

#[subscriber("orders.audit")]
async fn audit(
    order: &Order,
    tenant: Option<Header<Tenant>>,
    headers: Headers,
    ctx: &mut Context<'_>,
) -> HandlerOutcome {
    let mut out = Headers::new();
    out.insert("x-audited-by", "audit");
    if let Some(Header(tenant)) = tenant {
        out.insert("x-tenant", tenant.0);
    }
    let audited = Audited {
        id: order.id,
        headers: headers.len(),
    };
    match ctx.publish_with(&audited, out).await {
        Ok(()) => HandlerOutcome::ack(),
        Err(_) => HandlerOutcome::retry(),
    }
}

fn app() -> impl App<State = ()> {
    RustStream::new(AppInfo::new("tags", "0.1.0")).with_broker(
        NatsBroker::new("nats://127.0.0.1:1"),
        |b| {
            b.include(tag);
            b.include(audit);
        },
    )
}

fn headers(pairs: &[(&str, &str)]) -> Headers {
    pairs.iter().map(|(n, v)| (*n, *v)).collect()
}

#[tokio::test(start_paused = true)]
async fn a_typed_header_is_read_and_the_correlation_id_travels_to_the_reply() {
    let t = TestApp::start(app()).await.expect("the app starts");
    t.publish_raw(
        "orders.placed",
        headers(&[("x-tenant", "acme"), (CORRELATION_ID_HEADER, "c-1")]),
        r#"{"id":1}"#,
    )
    .await
    .expect("published");
    t.settle().await;
    assert_eq!(t.outcomes("tag"), [HandlerOutcome::ack()]);
    let replies = t.nats().published("orders.tagged");
    assert_eq!(replies.len(), 1);
    assert_eq!(&replies[0].payload[..], br#"{"id":1,"tenant":"acme"}"#);
    assert_eq!(replies[0].headers.get(CORRELATION_ID_HEADER), Some("c-1"));
    t.shutdown().await.expect("a clean stop");
}

#[tokio::test(start_paused = true)]
async fn a_missing_or_malformed_header_refuses_the_delivery() {
    let t = TestApp::start(app()).await.expect("the app starts");
    t.publish_raw("orders.placed", Headers::new(), r#"{"id":1}"#)
        .await
        .expect("published");
    t.publish_raw(
        "orders.placed",
        headers(&[("x-tenant", "no such tenant")]),
        r#"{"id":2}"#,
    )
    .await
    .expect("published");
    t.settle().await;
    // Refused before the handler ran: nothing replied.
    assert_eq!(
        t.outcomes("tag"),
        [HandlerOutcome::drop(), HandlerOutcome::drop()]
    );
    assert!(t.published::<Tagged>("orders.tagged").is_empty());
    t.shutdown().await.expect("a clean stop");
}

#[tokio::test(start_paused = true)]
async fn optional_headers_and_headers_on_outputs() {
    let t = TestApp::start(app()).await.expect("the app starts");
    t.publish_raw("orders.audit", Headers::new(), r#"{"id":1}"#)
        .await
        .expect("published");
    t.publish_raw(
        "orders.audit",
        headers(&[("x-tenant", "acme"), (CORRELATION_ID_HEADER, "c-2")]),
        r#"{"id":2}"#,
    )
    .await
    .expect("published");
    t.settle().await;
    assert_eq!(
        t.outcomes("audit"),
        [HandlerOutcome::ack(), HandlerOutcome::ack()]
    );
    let out = t.nats().published("orders.audited");
    assert_eq!(out.len(), 2);
    assert_eq!(&out[0].payload[..], br#"{"id":1,"headers":0}"#);
    assert_eq!(out[0].headers.get("x-audited-by"), Some("audit"));
    assert_eq!(out[0].headers.get("x-tenant"), None);
    assert_eq!(out[0].headers.get(CORRELATION_ID_HEADER), None);
    assert_eq!(&out[1].payload[..], br#"{"id":2,"headers":2}"#);
    assert_eq!(out[1].headers.get("x-tenant"), Some("acme"));
    assert_eq!(out[1].headers.get(CORRELATION_ID_HEADER), Some("c-2"));
    t.shutdown().await.expect("a clean stop");
}
