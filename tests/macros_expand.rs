//! What the macros generate, called directly: `#[subscriber]` handlers run against a hand-made
//! `Context` (a fake `Publish` records what they publish), `Mount` gives the registration, and
//! `describe` prints the payments app of seed 002.

use std::any::Any;
use std::convert::Infallible;
use std::num::{NonZeroU8, NonZeroU32, NonZeroU64, NonZeroUsize};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use ruststream::registration::RegistrationInfo;
use ruststream::settle::DeliveryModel;
use ruststream::{
    BatchContext, BatchOutcome, Delivery, FromContext, HandleBatch, Mount, OutboundMessage, Outs,
    Publish, PublishError, PublishErrorKind, Rejection,
};
use ruststream_nats::prelude::*;
use serde::{Deserialize, Serialize};

// ---------------------------------------------------------------------------------------------
// The harness: a publisher that records, and a way to call a generated `Handle` impl.

/// Records every message published; refuses them all when `failing`.
#[derive(Default)]
struct Recorder {
    sent: Mutex<Vec<OutboundMessage>>,
    failing: bool,
}

impl Recorder {
    fn failing() -> Self {
        Self {
            failing: true,
            ..Self::default()
        }
    }

    fn sent(&self) -> Vec<(String, serde_json::Value)> {
        self.sent
            .lock()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m.subject.to_string(),
                    serde_json::from_slice(&m.payload).unwrap(),
                )
            })
            .collect()
    }
}

impl Publish for Recorder {
    fn publish(&self, message: OutboundMessage) -> BoxFuture<'_, Result<(), PublishError>> {
        Box::pin(async move {
            if self.failing {
                return Err(PublishError::new(
                    PublishErrorKind::Broker,
                    &*message.subject,
                ));
            }
            self.sent.lock().unwrap().push(message);
            Ok(())
        })
    }
}

/// A delivery of `value` on `subject`.
fn delivery<T: Outgoing>(subject: &str, value: &T) -> Delivery {
    Delivery::new(subject, value.encode().unwrap())
}

/// Calls `handler` as the runtime would: decoded `input`, the app `state`, `publisher`.
async fn call<H, In, O, S>(
    handler: &H,
    input: &In,
    delivery: &Delivery,
    state: &S,
    publisher: &Recorder,
) -> Result<(), HandlerOutcome>
where
    H: Handle<In, O, S>,
    O: Outs,
    S: Any + Send + Sync,
{
    let mut ctx = Context::new(delivery, state, publisher, "test");
    handler.handle(input, &O::default(), &mut ctx).await
}

/// Calls a batch `handler` on `inputs`, one delivery each.
async fn call_batch<H, In, S>(
    handler: &H,
    inputs: &[In],
    deliveries: &[Delivery],
    state: &S,
    publisher: &Recorder,
) -> BatchOutcome
where
    H: HandleBatch<In, (), S>,
    S: Any + Send + Sync,
{
    let mut ctx = BatchContext::new(deliveries.iter().collect(), state, publisher, "test");
    handler.handle_batch(inputs, &(), &mut ctx).await
}

fn registration<S, M: Mount<S, K>, K>(handler: M) -> RegistrationInfo {
    handler.mount().info()
}

// ---------------------------------------------------------------------------------------------
// The app of these tests.

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "orders.created")]
struct Order {
    id: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Outgoing)]
#[outgoing(name = "orders.confirmed")]
struct Confirmed {
    order: u64,
}

/// What handlers saw, in the order they saw it.
#[derive(Debug, Default)]
struct Seen(Mutex<Vec<String>>);

impl Seen {
    fn push(&self, line: impl Into<String>) {
        self.0.lock().unwrap().push(line.into());
    }

    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// A region, a part of the state that is not behind an `Arc`.
#[derive(Debug, Clone, PartialEq)]
struct Region(&'static str);

#[derive(Clone, FromRef)]
struct Shop {
    seen: Arc<Seen>,
    region: Region,
    #[from_ref(skip)]
    #[allow(dead_code)]
    secret: String,
}

impl Shop {
    fn new() -> Self {
        Self {
            seen: Arc::default(),
            region: Region("eu"),
            secret: "hunter2".to_owned(),
        }
    }
}

/// The tenant, from the `tenant` header; a delivery without one is dropped.
struct Tenant(String);

impl<S> FromContext<S> for Tenant {
    fn from_context(ctx: &Context<'_>, _state: &S) -> Result<Self, Rejection> {
        ctx.headers()
            .get("tenant")
            .map(|t| Tenant(t.to_owned()))
            .ok_or_else(|| Rejection::new(HandlerOutcome::drop(), "no tenant header"))
    }
}

// ---------------------------------------------------------------------------------------------
// Extractors.

#[subscriber(CoreWildcard::new("orders.*"))]
async fn state_first(
    order: &Order,
    State(seen): State<Arc<Seen>>,
    Ctx(attempt): Ctx<Attempt>,
    ctx: &mut Context<'_>,
    Ctx(subject): Ctx<Subject>,
    Ctx(delivered): Ctx<Delivered>,
) -> HandlerOutcome {
    seen.push(format!(
        "{} {attempt} {subject} {delivered:?} {}",
        order.id,
        ctx.registration()
    ));
    HandlerOutcome::ack()
}

#[subscriber(CoreWildcard::new("orders.*"))]
async fn state_last(
    order: &Order,
    Ctx(delivered): Ctx<Delivered>,
    Ctx(subject): Ctx<Subject>,
    ctx: &mut Context<'_>,
    Ctx(attempt): Ctx<Attempt>,
    State(seen): State<Arc<Seen>>,
) -> HandlerOutcome {
    seen.push(format!(
        "{} {attempt} {subject} {delivered:?} {}",
        order.id,
        ctx.registration()
    ));
    HandlerOutcome::ack()
}

#[tokio::test]
async fn extractors_run_in_any_order_and_see_the_delivery() {
    let shop = Shop::new();
    let publisher = Recorder::default();
    let order = Order { id: 7 };
    let d = delivery("orders.eu", &order)
        .with_delivered(Some(3))
        .with_attempt(NonZeroU32::new(3).unwrap());

    assert_eq!(
        call(&state_first {}, &order, &d, &shop, &publisher).await,
        Ok(())
    );
    assert_eq!(
        call(&state_last {}, &order, &d, &shop, &publisher).await,
        Ok(())
    );
    assert_eq!(
        shop.seen.take(),
        ["7 3 orders.eu Some(3) test", "7 3 orders.eu Some(3) test"]
    );
}

#[tokio::test]
async fn a_core_delivery_has_no_server_count_and_is_the_first_attempt() {
    let shop = Shop::new();
    let order = Order { id: 1 };
    let d = delivery("orders.us", &order);
    call(&state_first {}, &order, &d, &shop, &Recorder::default())
        .await
        .unwrap();
    assert_eq!(shop.seen.take(), ["1 1 orders.us None test"]);
}

#[subscriber("orders.created")]
async fn whole_and_parts(
    order: &Order,
    State(shop): State<Shop>,
    State(region): State<Region>,
    State(seen): State<Arc<Seen>>,
) -> Result<(), HandlerOutcome> {
    assert!(Arc::ptr_eq(&shop.seen, &seen), "the parts are the state's");
    seen.push(format!("{} {}", order.id, region.0));
    Ok(())
}

#[tokio::test]
async fn state_gives_the_whole_state_or_a_field_through_from_ref() {
    let shop = Shop::new();
    let order = Order { id: 2 };
    let d = delivery("orders.created", &order);
    assert_eq!(
        call(&whole_and_parts {}, &order, &d, &shop, &Recorder::default()).await,
        Ok(())
    );
    assert_eq!(shop.seen.take(), ["2 eu"]);
}

#[tokio::test]
async fn the_runtime_hands_the_state_as_its_type_and_a_direct_call_looks_it_up() {
    let shop = Shop::new();
    let order = Order { id: 3 };
    let d = delivery("orders.created", &order);
    let publisher = Recorder::default();

    // The runtime's path, `handle_with_state`: the state is the `&Shop` handed over, not looked
    // up in the context (whose state here is of another type).
    let mut ctx = Context::new(&d, &(), &publisher, "test");
    let outcome = Handle::<Order, (), Shop>::handle_with_state(
        &whole_and_parts {},
        &order,
        &(),
        &shop,
        &mut ctx,
    )
    .await;
    assert_eq!(outcome, Ok(()));
    assert_eq!(shop.seen.take(), ["3 eu"]);

    // A direct `handle` looks the state up by type in the context: found, the same result...
    assert_eq!(
        call(&whole_and_parts {}, &order, &d, &shop, &publisher).await,
        Ok(())
    );
    assert_eq!(shop.seen.take(), ["3 eu"]);

    // ...and on a context holding another type, the delivery is retried without the handler.
    let mut ctx = Context::new(&d, &(), &publisher, "test");
    let outcome =
        Handle::<Order, (), Shop>::handle(&whole_and_parts {}, &order, &(), &mut ctx).await;
    assert_eq!(outcome, Err(HandlerOutcome::retry()));
    assert!(shop.seen.take().is_empty());
}

#[subscriber("orders.created")]
async fn tenanted(
    order: &Order,
    Tenant(tenant): Tenant,
    State(seen): State<Arc<Seen>>,
) -> HandlerOutcome {
    seen.push(format!("{} for {tenant}", order.id));
    HandlerOutcome::ack()
}

#[tokio::test]
async fn a_custom_extractor_runs_and_its_rejection_settles_without_the_handler() {
    let shop = Shop::new();
    let order = Order { id: 3 };
    let with =
        delivery("orders.created", &order).with_headers([("tenant", "acme")].into_iter().collect());
    let without = delivery("orders.created", &order);
    let publisher = Recorder::default();

    assert_eq!(
        call(&tenanted {}, &order, &with, &shop, &publisher).await,
        Ok(())
    );
    assert_eq!(
        call(&tenanted {}, &order, &without, &shop, &publisher).await,
        Err(HandlerOutcome::drop())
    );
    assert_eq!(shop.seen.take(), ["3 for acme"], "the handler ran once");
}

#[subscriber("orders.created")]
async fn reads_the_context(order: &Order, ctx: &Context<'_>) -> HandlerOutcome {
    match ctx.headers().get("priority") {
        Some("high") if order.id > 0 => HandlerOutcome::ack(),
        _ => HandlerOutcome::retry_after(Duration::from_secs(1)),
    }
}

#[tokio::test]
async fn a_shared_context_parameter_reads_the_delivery() {
    let order = Order { id: 4 };
    let high = delivery("orders.created", &order)
        .with_headers([("priority", "high")].into_iter().collect());
    let low = delivery("orders.created", &order);
    let r = Recorder::default();
    assert_eq!(
        call(&reads_the_context {}, &order, &high, &(), &r).await,
        Ok(())
    );
    assert_eq!(
        call(&reads_the_context {}, &order, &low, &(), &r).await,
        Err(HandlerOutcome::retry_after(Duration::from_secs(1)))
    );
}

// ---------------------------------------------------------------------------------------------
// Returns and replies.

#[subscriber("orders.created")]
async fn by_id(order: &Order) -> HandlerOutcome {
    match order.id {
        0 => HandlerOutcome::drop(),
        1 => HandlerOutcome::retry(),
        _ => HandlerOutcome::ack(),
    }
}

#[tokio::test]
async fn an_outcome_is_ok_when_it_acknowledges_and_err_otherwise() {
    let r = Recorder::default();
    for (id, expected) in [
        (0, Err(HandlerOutcome::drop())),
        (1, Err(HandlerOutcome::retry())),
        (2, Ok(())),
    ] {
        let order = Order { id };
        let d = delivery("orders.created", &order);
        assert_eq!(
            call(&by_id {}, &order, &d, &(), &r).await,
            expected,
            "id {id}"
        );
    }
}

#[subscriber(JetStreamSubject::new("orders.created", "ORDERS").durable("confirm"), reply)]
async fn confirm(order: &Order, ctx: &mut Context<'_>) -> Result<Confirmed, HandlerOutcome> {
    if order.id == 0 {
        return Err(HandlerOutcome::drop());
    }
    ctx.publish_to("audit", &order.id)
        .await
        .map_err(|_| HandlerOutcome::retry())?;
    Ok(Confirmed { order: order.id })
}

/// Calls `confirm` on order `id`, publishing through `publisher`.
async fn confirm_order(id: u64, publisher: &Recorder) -> Result<(), HandlerOutcome> {
    let order = Order { id };
    let d = delivery("orders.created", &order);
    call(&confirm {}, &order, &d, &(), publisher).await
}

#[tokio::test]
async fn a_reply_is_published_to_its_subject_then_acknowledged() {
    let r = Recorder::default();
    assert_eq!(confirm_order(9, &r).await, Ok(()));
    assert_eq!(
        r.sent(),
        [
            ("audit".to_owned(), serde_json::json!(9)),
            (
                "orders.confirmed".to_owned(),
                serde_json::json!({ "order": 9 })
            ),
        ]
    );
}

#[tokio::test]
async fn a_reply_that_is_not_published_is_a_retry() {
    let r = Recorder::failing();
    assert_eq!(confirm_order(9, &r).await, Err(HandlerOutcome::retry()));
}

#[tokio::test]
async fn an_err_from_a_reply_handler_publishes_nothing() {
    let r = Recorder::default();
    assert_eq!(confirm_order(0, &r).await, Err(HandlerOutcome::drop()));
    assert!(r.sent().is_empty());
}

// ---------------------------------------------------------------------------------------------
// Batches.

#[subscriber(JetStreamSubject::new("orders.created", "ORDERS").durable("bulk"))]
async fn each(orders: &[Order], ctx: &mut BatchContext<'_>) -> Vec<HandlerOutcome> {
    assert_eq!(ctx.len(), orders.len());
    orders
        .iter()
        .map(|o| {
            if o.id % 2 == 0 {
                HandlerOutcome::ack()
            } else {
                HandlerOutcome::retry()
            }
        })
        .collect()
}

#[subscriber(JetStreamSubject::new("orders.created", "ORDERS"))]
async fn all(orders: &[Order], State(seen): State<Arc<Seen>>) -> HandlerOutcome {
    seen.push(format!("{} orders", orders.len()));
    HandlerOutcome::ack()
}

#[tokio::test]
async fn a_batch_settles_each_message_or_all_of_them() {
    let shop = Shop::new();
    let orders = [Order { id: 1 }, Order { id: 2 }];
    let deliveries: Vec<Delivery> = orders
        .iter()
        .map(|o| delivery("orders.created", o))
        .collect();
    let r = Recorder::default();

    assert_eq!(
        call_batch(&each {}, &orders, &deliveries, &shop, &r).await,
        BatchOutcome::Each(vec![HandlerOutcome::retry(), HandlerOutcome::ack()])
    );
    assert_eq!(
        call_batch(&all {}, &orders, &deliveries, &shop, &r).await,
        BatchOutcome::All(HandlerOutcome::ack())
    );
    assert_eq!(shop.seen.take(), ["2 orders"]);
}

// ---------------------------------------------------------------------------------------------
// Registrations.

mod nested {
    use super::*;

    /// Visible outside its module, as the function was.
    #[subscriber("orders.created")]
    pub async fn r#match(_order: &Order) -> HandlerOutcome {
        HandlerOutcome::ack()
    }
}

#[test]
fn a_registration_is_named_after_the_function_and_reads_its_descriptor() {
    let info = registration::<(), _, _>(by_id);
    assert_eq!(info.name, "by_id");
    assert_eq!(info.descriptor.subject, "orders.created");
    assert_eq!(info.descriptor.model, DeliveryModel::Core);
    assert!(!info.batch);
    assert!(info.publishes.is_empty());

    let info = registration::<(), _, _>(confirm);
    assert_eq!(info.name, "confirm");
    assert_eq!(info.descriptor.model, DeliveryModel::JetStream);
    assert_eq!(info.descriptor.stream.as_deref(), Some("ORDERS"));
    assert_eq!(info.descriptor.consumer.as_deref(), Some("confirm"));
    assert_eq!(info.publishes, ["orders.confirmed"]);

    let info = registration::<Shop, _, _>(all);
    assert!(info.batch);
    assert_eq!(info.descriptor.consumer, None);

    assert_eq!(registration::<(), _, _>(nested::r#match).name, "match");
}

#[test]
fn the_handler_value_is_a_plain_copyable_struct_and_its_name_a_function() {
    let value = by_id {};
    let copy = value;
    let _default: by_id = Default::default();
    assert_eq!(format!("{value:?} {copy:?}"), "by_id by_id");
    // The name in the value namespace is a function (which bindings may shadow), and copyable.
    let mount = by_id;
    let again = mount;
    assert_eq!(registration::<(), _, _>(mount).name, "by_id");
    assert_eq!(registration::<(), _, _>(again).name, "by_id");
}

// ---------------------------------------------------------------------------------------------
// `Outgoing` and `nonzero!`.

#[test]
fn outgoing_knows_its_subject_and_encodes_as_json() {
    assert_eq!(Order::SUBJECT, "orders.created");
    assert_eq!(
        &Confirmed { order: 5 }.encode().unwrap()[..],
        br#"{"order":5}"#
    );
}

#[test]
fn nonzero_takes_its_integer_type_from_where_it_is_used() {
    const CAP: NonZeroU32 = nonzero!(3);
    let secs: NonZeroU64 = nonzero!(60);
    let small: NonZeroU8 = nonzero!(255u8);
    let many = NonZeroUsize::MIN.saturating_add(nonzero!(9).get());
    assert_eq!(
        (CAP.get(), secs.get(), small.get(), many.get()),
        (3, 60, 255, 10)
    );
    assert_eq!(
        NonZeroDuration::from_secs(nonzero!(60)).get(),
        Duration::from_secs(60)
    );
}

// ---------------------------------------------------------------------------------------------
// The payments app of seed 002, and its `describe` table.

mod payments {
    use super::*;

    const BACKOFF: Duration = Duration::from_secs(30);

    #[derive(Debug, PartialEq, Serialize, Deserialize, Outgoing)]
    #[outgoing(name = "payments.authorized")]
    pub struct Payment {
        pub id: u64,
        pub card: String,
        pub amount_cents: u64,
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize, Outgoing)]
    #[outgoing(name = "payments.captured")]
    pub struct Captured {
        payment: u64,
        amount_cents: u64,
    }

    #[derive(Debug, Default)]
    pub struct Bank;

    pub enum Refusal {
        Busy,
        Unavailable,
        Declined,
    }

    impl Bank {
        async fn capture(&self, payment: &Payment) -> Result<(), Refusal> {
            match payment.card.as_str() {
                "busy" => Err(Refusal::Busy),
                "flaky" => Err(Refusal::Unavailable),
                "declined" => Err(Refusal::Declined),
                _ => Ok(()),
            }
        }
    }

    #[derive(Clone, Default, FromRef)]
    pub struct Clients {
        bank: Arc<Bank>,
    }

    #[subscriber(
        JetStreamSubject::new("payments.authorized", "PAYMENTS")
            .durable("capture")
            .ack_wait(NonZeroDuration::from_secs(nonzero!(60))),
        reply
    )]
    pub async fn capture(
        payment: &Payment,
        Ctx(delivered): Ctx<Delivered>,
        State(bank): State<Arc<Bank>>,
    ) -> Result<Captured, HandlerOutcome> {
        if delivered.is_some_and(|count| count > 1) {
            tracing::info!(payment.id, ?delivered, "payment delivered again");
        }
        match bank.capture(payment).await {
            Ok(()) => Ok(Captured {
                payment: payment.id,
                amount_cents: payment.amount_cents,
            }),
            Err(Refusal::Busy) => Err(HandlerOutcome::retry_after(BACKOFF)),
            Err(Refusal::Unavailable) => Err(HandlerOutcome::retry()),
            Err(Refusal::Declined) => Err(HandlerOutcome::drop()),
        }
    }

    #[subscriber("payments.captured")]
    async fn refresh(captured: &Captured) -> HandlerOutcome {
        tracing::info!(captured.payment, "dashboard refreshed");
        HandlerOutcome::ack()
    }

    #[ruststream::app]
    pub fn app() -> impl App<State = Clients> {
        RustStream::new(AppInfo::new("payments", "0.1.0"))
            .on_startup(async move |()| Ok::<_, Infallible>(Clients::default()))
            .with_broker(NatsBroker::new("nats://localhost:4222"), |b| {
                b.include(capture);
                b.include(refresh)
                    .max_attempts(nonzero!(3))
                    .dead_letter("payments.dead");
            })
    }
}

#[test]
fn describe_prints_every_registration_of_the_payments_app() {
    let table = ruststream::app::cli::describe(&payments::app());
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines[0], "payments 0.1.0");
    assert_eq!(lines[1], "broker: nats at nats://localhost:4222");
    let cells = |line: &str| -> Vec<String> {
        line.split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        cells(lines[2]),
        [
            "handler",
            "subject",
            "model",
            "stream/consumer",
            "ack_wait",
            "cap",
            "concurrency",
            "dead letter",
            "retry to",
            "replies"
        ]
    );
    assert_eq!(
        cells(lines[3]),
        [
            "capture",
            "payments.authorized",
            "jetstream",
            "PAYMENTS/capture",
            "60s",
            "none",
            "1",
            "-",
            "(redelivered)",
            "payments.captured (not in a declared stream)"
        ]
    );
    assert_eq!(
        cells(lines[4]),
        [
            "refresh",
            "payments.captured",
            "core",
            "-",
            "-",
            "3",
            "1",
            "payments.dead (not in a declared stream)",
            "payments.captured",
            "-"
        ]
    );
    assert_eq!(
        lines[5],
        "declared streams: none (the app declares nothing; streams it reads must exist)"
    );
    assert_eq!(lines.len(), 6);
}

#[tokio::test]
async fn the_payments_capture_replies_through_the_bank_in_the_state() {
    use payments::{Clients, Payment, capture};
    let clients = Clients::default();
    let r = Recorder::default();
    for (card, expected) in [
        ("ok", Ok(())),
        (
            "busy",
            Err(HandlerOutcome::retry_after(Duration::from_secs(30))),
        ),
        ("flaky", Err(HandlerOutcome::retry())),
        ("declined", Err(HandlerOutcome::drop())),
    ] {
        let payment = Payment {
            id: 1,
            card: card.to_owned(),
            amount_cents: 500,
        };
        let d = delivery("payments.authorized", &payment).with_delivered(Some(1));
        assert_eq!(
            call(&capture {}, &payment, &d, &clients, &r).await,
            expected,
            "card {card}"
        );
    }
    assert_eq!(
        r.sent(),
        [(
            "payments.captured".to_owned(),
            serde_json::json!({ "payment": 1, "amount_cents": 500 })
        )]
    );
}
