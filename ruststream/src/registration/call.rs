//! How a registration calls its handler: the payload decoded in the registration's format (or
//! taken as it arrived), a [`Context`] over the delivery, panics caught, and the handler's answer
//! turned into [`Handled`].

use std::any::Any;
use std::sync::Arc;

use serde::de::DeserializeOwned;

use super::builder::{BatchFn, HandlerKind, LayerStack, Registration};
use super::descriptor::Descriptor;
use super::policy::Policy;
use super::schemas::Schemas;
use super::typed::{BindSingle, Call, SingleCall};
use crate::codec::{DecodeError, Format};
use crate::context::Context;
use crate::delivery::Delivery;
use crate::handled::Handled;
use crate::handler::{BatchContext, BatchOutcome, Handle, HandleBatch, Outs};
use crate::input::FromDelivery;
use crate::outcome::HandlerOutcome;
use crate::panic::{guard_async, panic_message};

impl<S: Send + Sync + 'static> Registration<S> {
    /// A registration of handler `H` for messages `In`, publishing `O`.
    pub fn single<D, H, In, O>(name: impl Into<String>, descriptor: D, handler: H) -> Self
    where
        D: Descriptor,
        H: Handle<In, O, S>,
        In: DeserializeOwned + Send + Sync + 'static,
        O: Outs,
    {
        let call: Arc<dyn BindSingle<S>> = Arc::new(Decoded {
            handler,
            outs: O::default(),
            decode: crate::codec::decode_delivery::<In>,
        });
        Self::with_handler(
            name.into(),
            Arc::new(descriptor),
            HandlerKind::Single(call),
            O::subjects(),
            Schemas::decoded::<In, O>(),
        )
    }

    /// A registration of handler `H` for inputs `In` built from the whole delivery
    /// ([`FromDelivery`]: a key-value change), publishing `O`.
    pub fn from_delivery<D, H, In, O>(name: impl Into<String>, descriptor: D, handler: H) -> Self
    where
        D: Descriptor,
        H: Handle<In, O, S>,
        In: FromDelivery,
        O: Outs,
    {
        let call: Arc<dyn BindSingle<S>> = Arc::new(Decoded {
            handler,
            outs: O::default(),
            decode: In::from_delivery,
        });
        Self::with_handler(
            name.into(),
            Arc::new(descriptor),
            HandlerKind::Single(call),
            O::subjects(),
            Schemas::from_delivery::<In, O>(),
        )
    }

    /// A registration of batch handler `H` for messages `In`, publishing `O`.
    pub fn batch<D, H, In, O>(name: impl Into<String>, descriptor: D, handler: H) -> Self
    where
        D: Descriptor,
        H: HandleBatch<In, O, S>,
        In: DeserializeOwned + Send + Sync + 'static,
        O: Outs,
    {
        let handler = Arc::new(handler);
        let outs = Arc::new(O::default());
        let call: Arc<BatchFn<S>> = Arc::new(move |deliveries, state, publisher, name, codec| {
            let handler = Arc::clone(&handler);
            let outs = Arc::clone(&outs);
            Box::pin(async move {
                let mut results: Vec<Option<Handled>> = vec![None; deliveries.len()];
                let mut inputs = Vec::with_capacity(deliveries.len());
                let mut decoded = Vec::with_capacity(deliveries.len());
                for (i, delivery) in deliveries.iter().enumerate() {
                    match decode(crate::codec::decode_delivery::<In>, codec, delivery) {
                        Ok(v) => {
                            inputs.push(v);
                            decoded.push(i);
                        }
                        Err(undecodable) => results[i] = Some(undecodable),
                    }
                }
                if !inputs.is_empty() {
                    let erased: &(dyn Any + Send + Sync) = &*state;
                    let batch: Vec<&Delivery> = decoded.iter().map(|&i| deliveries[i]).collect();
                    let mut ctx =
                        BatchContext::new(batch, erased, publisher, name).with_format(codec);
                    let run = handler.handle_batch_with_state(&inputs, &outs, &state, &mut ctx);
                    let per = match guard_async(run).await {
                        Ok(outcome) => batch_results(outcome, decoded.len()),
                        Err(panicked) => vec![panicked; decoded.len()],
                    };
                    for (slot, handled) in decoded.into_iter().zip(per) {
                        results[slot] = Some(handled);
                    }
                }
                results
                    .into_iter()
                    .map(|r| r.unwrap_or_else(|| Handled::NoOutcome("not handled".into())))
                    .collect()
            })
        });
        Self::with_handler(
            name.into(),
            Arc::new(descriptor),
            HandlerKind::Batch(call),
            O::subjects(),
            Schemas::decoded::<In, O>(),
        )
    }
}

impl<S: Send + Sync + 'static> Registration<S> {
    /// A registration of handler `H` for payloads taken as they arrived, as [`Bytes`]: no
    /// decoding, no `content-type` check (a `#[subscriber]` taking `&Bytes`).
    pub fn raw<D, H, O>(name: impl Into<String>, descriptor: D, handler: H) -> Self
    where
        D: Descriptor,
        H: Handle<bytes::Bytes, O, S>,
        O: Outs,
    {
        Self::raw_with(name, descriptor, handler, |d| d.payload())
    }

    /// The same for a handler taking the payload as `&[u8]`.
    pub fn raw_slice<D, H, O>(name: impl Into<String>, descriptor: D, handler: H) -> Self
    where
        D: Descriptor,
        H: Handle<[u8], O, S>,
        O: Outs,
    {
        Self::raw_with(name, descriptor, handler, |d| &d.payload()[..])
    }

    fn raw_with<D, H, O, In>(
        name: impl Into<String>,
        descriptor: D,
        handler: H,
        payload: for<'a> fn(&'a Delivery) -> &'a In,
    ) -> Self
    where
        D: Descriptor,
        H: Handle<In, O, S>,
        In: ?Sized + Sync + 'static,
        O: Outs,
    {
        let call: Arc<dyn BindSingle<S>> = Arc::new(Taken {
            handler,
            outs: O::default(),
            payload,
        });
        Self::with_handler(
            name.into(),
            Arc::new(descriptor),
            HandlerKind::Single(call),
            O::subjects(),
            Schemas::raw::<In, O>(),
        )
    }
}

/// How an input is made from a delivery in the registration's format.
type DecodeFn<In> = fn(Format, &Delivery) -> Result<In, DecodeError>;

/// A handler of decoded inputs `In`, with its outputs: what [`Registration::single`] (the
/// payload decoded) and [`Registration::from_delivery`] (the input built from the whole
/// delivery) call.
struct Decoded<H, In, O> {
    handler: H,
    outs: O,
    decode: DecodeFn<In>,
}

impl<H, In, O, S> SingleCall<S> for Decoded<H, In, O>
where
    H: Handle<In, O, S>,
    In: Send + Sync + 'static,
    O: Outs,
    S: Send + Sync + 'static,
{
    async fn call<'a>(&'a self, call: Call<'a, S>) -> Handled {
        let input: In = match decode(self.decode, call.codec, call.delivery) {
            Ok(input) => input,
            Err(undecodable) => return undecodable,
        };
        call.run(&self.handler, &input, &self.outs).await
    }
}

/// A handler of payloads taken as they arrived (`payload` picks them out of the delivery).
struct Taken<H, In: ?Sized + 'static, O> {
    handler: H,
    outs: O,
    payload: for<'a> fn(&'a Delivery) -> &'a In,
}

impl<H, In, O, S> SingleCall<S> for Taken<H, In, O>
where
    H: Handle<In, O, S>,
    In: ?Sized + Sync + 'static,
    O: Outs,
    S: Send + Sync + 'static,
{
    async fn call<'a>(&'a self, call: Call<'a, S>) -> Handled {
        let input = (self.payload)(call.delivery);
        call.run(&self.handler, input, &self.outs).await
    }
}

impl<S: Send + Sync + 'static> Call<'_, S> {
    /// Runs `handler` on `input` with a [`Context`] over the delivery, its panic caught, and
    /// says what it did: the tail [`Decoded`] and [`Taken`] share.
    async fn run<H, In, O>(self, handler: &H, input: &In, outs: &O) -> Handled
    where
        H: Handle<In, O, S>,
        In: ?Sized + Sync,
        O: Outs,
    {
        let erased: &(dyn Any + Send + Sync) = &**self.state;
        let mut ctx =
            Context::new(self.delivery, erased, self.publisher, self.name).with_format(self.codec);
        // The handler's future is made inside the guard: a manual `Handle` may panic before it
        // returns one.
        let ran = guard_async(async {
            let run = handler.handle_with_state(input, outs, self.state, &mut ctx);
            run.await
        })
        .await;
        single_result(ran, &ctx)
    }
}

impl<S> Registration<S> {
    /// A registration with the default policy, no layers and no idempotency.
    fn with_handler(
        name: String,
        descriptor: Arc<dyn Descriptor>,
        handler: HandlerKind<S>,
        publishes: Vec<&'static str>,
        schemas: Schemas,
    ) -> Self {
        Self {
            name,
            descriptor,
            handler,
            policy: Policy::default(),
            publishes,
            layers: LayerStack::default(),
            schemas,
            unroutable: None,
            idempotency_key: None,
            answers_requests: false,
            group: None,
        }
    }
}

/// What a single handler's run says: its outcome, its panic, or its own error (recorded on the
/// context by the generated code or `Context::failure`). An output that failed for good makes
/// it [`Handled::Unpublishable`] unless the handler panicked or ended the message itself
/// (`drop()`): retrying would fail the same way.
fn single_result(ran: Result<Result<(), HandlerOutcome>, Handled>, ctx: &Context<'_>) -> Handled {
    if let Some(reason) = ctx.unpublishable()
        && matches!(
            &ran,
            Ok(Ok(()) | Err(HandlerOutcome::Retry | HandlerOutcome::RetryAfter(_)))
        )
    {
        return Handled::Unpublishable(reason.to_owned());
    }
    match ran {
        Ok(Ok(())) => match ctx.unconfirmed() {
            // An output a stream did not confirm: the input must come back.
            Some(reason) => {
                if let Some(suppressed) = crate::unconfirmed::log_now() {
                    tracing::error!(
                        registration = ctx.registration(),
                        subject = ctx.subject(),
                        %reason,
                        suppressed,
                        "an output stored by a stream was not confirmed; the delivery is not acknowledged and is treated as retry() (at most one such line a second; `suppressed` counts the others)"
                    );
                }
                Handled::Outcome(HandlerOutcome::retry())
            }
            None => Handled::Outcome(HandlerOutcome::Ack),
        },
        Ok(Err(outcome)) => match ctx.failed() {
            Some(error) => Handled::Failed(error.to_owned()),
            None => Handled::Outcome(outcome),
        },
        Err(panicked) => panicked,
    }
}

fn batch_results(outcome: BatchOutcome, len: usize) -> Vec<Handled> {
    match outcome {
        BatchOutcome::All(o) => vec![Handled::Outcome(o); len],
        BatchOutcome::Each(each) if each.len() == len => {
            each.into_iter().map(Handled::Outcome).collect()
        }
        BatchOutcome::Each(each) => {
            let reason = format!(
                "the batch handler returned {} outcomes for {len} messages; nothing is settled or replied (JetStream delivers the batch again after ack_wait; Core messages are let go)",
                each.len()
            );
            vec![Handled::NoOutcome(reason); len]
        }
    }
}

/// Makes the input of `delivery` with `decode`; one that does not decode, or whose decoding
/// panics (a custom `Deserialize`), is [`Handled::Undecodable`]: never retried, it would fail
/// the same way.
fn decode<In>(decode: DecodeFn<In>, codec: Format, delivery: &Delivery) -> Result<In, Handled> {
    let decoded =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| decode(codec, delivery)));
    match decoded {
        Ok(Ok(input)) => Ok(input),
        Ok(Err(err)) => Err(Handled::Undecodable(err.to_string())),
        Err(panic) => Err(Handled::Undecodable(format!(
            "decoding the payload panicked: {}",
            panic_message(panic.as_ref()).to_owned()
        ))),
    }
}
