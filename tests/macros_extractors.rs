//! A standard type the crate made an extractor for its own state is taken through a type alias:
//! `#[subscriber]` refuses a standard type written as such (`retries: u32` is a mistake for
//! `Ctx<Attempt>`), and does not read aliases.

use ruststream::registration::RegistrationInfo;
use ruststream::{Context, FromContext, Mount, Rejection};
use ruststream_nats::prelude::*;
use serde::Deserialize;

#[derive(Clone, Default)]
struct Shop {
    tenant: u32,
}

/// The tenant, a plain `u32` taken from the state.
impl FromContext<Shop> for u32 {
    fn from_context(_ctx: &Context<'_>, state: &Shop) -> Result<Self, Rejection> {
        Ok(state.tenant)
    }
}

type Tenant = u32;

#[derive(Deserialize)]
struct Order {
    id: u64,
}

#[subscriber("orders.created")]
async fn record(order: &Order, tenant: Tenant) -> HandlerOutcome {
    let _ = (order.id, tenant);
    HandlerOutcome::ack()
}

fn registration<S, M: Mount<S, K>, K>(handler: M) -> RegistrationInfo {
    handler.mount().info()
}

#[test]
fn an_aliased_standard_type_is_an_extractor_where_the_crate_made_it_one() {
    assert_eq!(registration::<Shop, _, _>(record).name, "record");
}
