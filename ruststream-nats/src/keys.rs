//! The NATS context keys: what a handler can read about a JetStream delivery with `Ctx<K>`.
//!
//! `Delivered`, `Attempt` and `Subject` come from `ruststream`; these add the stream's side.
//! On a Core delivery each gives `None`.

use ruststream::{Context, Key, Rejection};

use crate::JetStreamInfo;

/// The message's sequence in its stream, `Option<u64>`: the same on every redelivery, `None`
/// on Core NATS.
///
/// ```
/// use ruststream::Ctx;
/// use ruststream_nats::StreamSequence;
///
/// fn seen(Ctx(sequence): Ctx<StreamSequence>) -> Option<u64> {
///     sequence
/// }
/// # let _ = seen;
/// ```
#[derive(Debug, Clone, Copy)]
pub enum StreamSequence {}

#[diagnostic::do_not_recommend]
impl Key for StreamSequence {
    type Value = Option<u64>;
    fn get(ctx: &Context<'_>) -> Result<Self::Value, Rejection> {
        Ok(info(ctx).map(|i| i.stream_sequence))
    }
}

/// The name of the stream the message is stored in, `Option<String>`; `None` on Core NATS.
#[derive(Debug, Clone, Copy)]
pub enum StreamName {}

#[diagnostic::do_not_recommend]
impl Key for StreamName {
    type Value = Option<String>;
    fn get(ctx: &Context<'_>) -> Result<Self::Value, Rejection> {
        Ok(info(ctx).map(|i| i.stream.to_string()))
    }
}

/// Everything the acknowledgement subject tells, `Option<JetStreamInfo>`: stream, consumer,
/// sequences, pending count; `None` on Core NATS.
#[derive(Debug, Clone, Copy)]
pub enum JetStream {}

#[diagnostic::do_not_recommend]
impl Key for JetStream {
    type Value = Option<JetStreamInfo>;
    fn get(ctx: &Context<'_>) -> Result<Self::Value, Rejection> {
        Ok(info(ctx).cloned())
    }
}

fn info<'a>(ctx: &'a Context<'_>) -> Option<&'a JetStreamInfo> {
    ctx.delivery().extension::<JetStreamInfo>()
}
