//! The rules a `#[subscriber]` function follows, each checked with its own error, all reported
//! at once. What passes becomes a [`Plan`] that `expand.rs` turns into code. The rules of the
//! attribute's arguments are in `check/args.rs`, those of the parameters after the payload in
//! `check/extractors.rs`.

mod args;
mod extractors;

use proc_macro2::Span;
use quote::ToTokens;
use syn::Type;

use self::args::{check_descriptor, check_known_args, check_reply_once};
use self::extractors::check_extractors;
pub use self::extractors::value_type_in_ctx;
use super::parse::{
    Args, Descriptor, Handler, Output, Param, Shape, each_result_ok, is_unit, last_segment_is,
    strip,
};
use crate::diag::{Errors, error_at, error_at_tokens, type_text};

/// A handler that follows every rule.
pub struct Plan<'a> {
    /// The function.
    pub handler: &'a Handler,
    /// Where its messages come from.
    pub descriptor: &'a Descriptor,
    /// The payload type `T` of `&T` or `&[T]`.
    pub payload: &'a Type,
    /// Whether the payload is `&[T]`.
    pub batch: bool,
    /// The parameters after the payload.
    pub args: Vec<Arg<'a>>,
    /// What the function returns.
    pub ret: Ret<'a>,
}

/// A parameter after the payload.
pub enum Arg<'a> {
    /// An extractor, built through `FromContext`.
    Extract(&'a Type),
    /// The context itself, `&mut` or shared.
    Context { mutable: bool },
}

/// How the function's return becomes the trait's.
pub enum Ret<'a> {
    /// An outcome (`HandlerOutcome`, `Result<(), HandlerOutcome>`, `Vec<HandlerOutcome>`...):
    /// converted by `IntoResult` or `IntoBatchOutcome`.
    Outcome(&'a Type),
    /// `Result<R, HandlerOutcome>` (or `Result<R, E>`) with `reply`: `R` is published. On a
    /// batch, `Vec<Result<R, HandlerOutcome>>`: one per message.
    Reply { value: &'a Type, whole: &'a Type },
    /// No return type, on a single-message handler without `reply`: acknowledges.
    Unit,
}

/// Checks every rule and reports every broken one.
pub fn check<'a>(attr: &'a Args, handler: &'a Handler) -> syn::Result<Plan<'a>> {
    let mut errors = Errors::new();
    check_async(handler, &mut errors);
    check_not_unsafe(handler, &mut errors);
    check_not_generic(handler, &mut errors);
    check_no_receiver(handler, &mut errors);
    let (payload, batch) = check_payload(handler, &mut errors);
    let args = check_extractors(handler, batch, &mut errors);
    let ret = check_output(attr, handler, batch, &mut errors);
    check_reply_once(attr, &mut errors);
    check_known_args(attr, &mut errors);
    let descriptor = check_descriptor(attr, &mut errors);

    errors.finish()?;
    match (descriptor, payload, ret) {
        (Some(descriptor), Some(payload), Some(ret)) => Ok(Plan {
            handler,
            descriptor,
            payload,
            batch,
            args,
            ret,
        }),
        // Every `None` above pushed an error, so this is never reached.
        _ => Err(error_at(Span::call_site(), "the subscriber is malformed")),
    }
}

/// The runtime awaits the handler: it must be an `async fn`.
fn check_async(handler: &Handler, errors: &mut Errors) {
    let sig = &handler.item.sig;
    let name = &sig.ident;
    if sig.asyncness.is_none() {
        errors.push(error_at_tokens(
            sig.fn_token,
            format!(
                "a subscriber must be an `async fn`: write `async fn {name}(..)`; the runtime awaits it"
            ),
        ));
    }
}

/// `unsafe` would need the runtime to promise what it cannot know.
fn check_not_unsafe(handler: &Handler, errors: &mut Errors) {
    if let Some(unsafety) = handler.item.sig.unsafety {
        errors.push(error_at_tokens(
            unsafety,
            "a subscriber cannot be `unsafe`: call the unsafe code inside its body",
        ));
    }
}

/// The runtime names every type of the handler: no parameters to fill in.
fn check_not_generic(handler: &Handler, errors: &mut Errors) {
    let generics = &handler.item.sig.generics;
    if !generics.params.is_empty() || generics.where_clause.is_some() {
        errors.push(error_at_tokens(
            generics,
            "a subscriber cannot be generic: the runtime decodes one concrete payload type; write the payload and extractor types out, or implement `Handle` for a generic type by hand",
        ));
    }
}

/// A free function: no `self` (the payload is then the first parameter after it).
fn check_no_receiver(handler: &Handler, errors: &mut Errors) {
    for receiver in handler
        .params
        .iter()
        .filter(|p| matches!(p.shape, Shape::Receiver))
    {
        errors.push(receiver_error(&receiver.tokens));
    }
}

/// The parameters that are not `self`: the payload, then the extractors.
fn typed_params(handler: &Handler) -> impl Iterator<Item = &Param> {
    handler
        .params
        .iter()
        .filter(|p| !matches!(p.shape, Shape::Receiver))
}

/// The first parameter is the payload, lent as `&T` (or `&[T]` for a batch); returns `T` and
/// whether it is a batch.
fn check_payload<'a>(handler: &'a Handler, errors: &mut Errors) -> (Option<&'a Type>, bool) {
    let sig = &handler.item.sig;
    let name = &sig.ident;
    let Some(first) = typed_params(handler).next() else {
        // The first parameter is the payload, so there is one.
        errors.push(error_at(
            sig.paren_token.span.join(),
            format!(
                "a subscriber takes the payload first: `async fn {name}(payload: &Payload)`, where `Payload` is the decoded message type"
            ),
        ));
        return (None, false);
    };
    match &first.shape {
        Shape::Ref {
            elem,
            mutable: false,
        } => (Some(elem), false),
        // `&[u8]` is the payload's bytes as they arrived, not a batch of numbers.
        Shape::Slice {
            elem,
            mutable: false,
        } if last_segment_is(elem, "u8") => match first.ty.as_ref().map(strip) {
            Some(Type::Reference(r)) => (Some(&*r.elem), false),
            _ => (Some(elem), true),
        },
        Shape::Slice {
            elem,
            mutable: false,
        } => (Some(elem), true),
        // Every handler of a delivery sees the same payload: it is shared, never `&mut`.
        Shape::Ref {
            elem,
            mutable: true,
        }
        | Shape::Slice {
            elem,
            mutable: true,
        } => {
            errors.push(error_at_tokens(
                &first.ty,
                format!(
                    "the payload is read-only: take `&{}` instead of `&mut`",
                    shown(elem, matches!(first.shape, Shape::Slice { .. }))
                ),
            ));
            (None, false)
        }
        // A context or an extractor in first place means the payload was left out.
        Shape::Context { .. }
        | Shape::BatchContext { .. }
        | Shape::Value {
            extractor_like: true,
        } => {
            errors.push(error_at_tokens(
                &first.tokens,
                format!(
                    "the first parameter of a subscriber is the payload, and `{}` is an extractor: add the payload first, like `payload: &Payment`",
                    ty_text(first.ty.as_ref())
                ),
            ));
            (None, false)
        }
        // The runtime keeps the decoded payload (to dead-letter or retry it): it lends it.
        Shape::Value {
            extractor_like: false,
        } => {
            let ty = ty_text(first.ty.as_ref());
            errors.push(error_at_tokens(
                &first.ty,
                format!("the payload is borrowed: take `&{ty}` instead of `{ty}`"),
            ));
            (None, false)
        }
        // `impl Trait` names no type to decode.
        Shape::ImplTrait => {
            errors.push(error_at_tokens(
                &first.ty,
                "the payload cannot be `impl Trait`: name the type to decode, like `payment: &Payment`",
            ));
            (None, false)
        }
        Shape::Receiver => (None, false),
    }
}

/// The return type, against `reply` and the payload's kind.
fn check_output<'a>(
    args: &Args,
    handler: &'a Handler,
    batch: bool,
    errors: &mut Errors,
) -> Option<Ret<'a>> {
    let reply = args.reply.first().copied();
    if let Output::Unit(span) = handler.output {
        if reply.is_none() && !batch {
            return Some(Ret::Unit);
        }
        check_returns_an_outcome(span, reply.is_some(), batch, errors);
        return None;
    }
    match reply {
        Some(_) if batch => check_batch_reply_return(&handler.output, errors),
        Some(_) => check_reply_return(&handler.output, errors),
        None if batch => check_batch_return(&handler.output, errors),
        None => check_outcome_return(&handler.output, errors),
    }
}

/// A handler says how its message is settled: `()` says nothing.
fn check_returns_an_outcome(span: Span, reply: bool, batch: bool, errors: &mut Errors) {
    errors.push(error_at(
        span,
        match (reply, batch) {
            (true, false) => {
                "a `reply` subscriber returns what it publishes: add `-> Result<T, HandlerOutcome>` (or `-> Result<T, E>` with `E: std::error::Error`) with `T: Outgoing`, or `T` = `Response<R>` to answer the requester only"
            }
            (true, true) => {
                "a batch `reply` subscriber returns what it publishes for each message: add `-> Vec<Result<T, HandlerOutcome>>` with `T: Outgoing`, one per message"
            }
            (false, _) => {
                "a batch subscriber returns how its messages are settled: add `-> HandlerOutcome` (one for the batch) or `-> Vec<HandlerOutcome>` (one per message)"
            }
        },
    ));
}

/// A batch `reply` answers each message: one `Result` per message, with a value to publish.
fn check_batch_reply_return<'a>(output: &'a Output, errors: &mut Errors) -> Option<Ret<'a>> {
    let whole = match output {
        Output::Result { whole, .. } => whole,
        Output::Other(ty) => ty,
        Output::Unit(_) => return None,
    };
    match each_result_ok(whole) {
        Some(ok) if is_unit(ok) => {
            errors.push(error_at_tokens(
                ok,
                "`reply` publishes the value in each `Ok`, and `()` is nothing to publish: return `Vec<Result<T, HandlerOutcome>>` with `T: Outgoing`, or remove `reply` and return `Vec<HandlerOutcome>`",
            ));
            None
        }
        Some(ok) => Some(Ret::Reply { value: ok, whole }),
        None => {
            errors.push(error_at_tokens(
                whole,
                format!(
                    "a batch `reply` subscriber answers each message of the batch, and `{}` is not written as one `Result` per message: return `Vec<Result<T, HandlerOutcome>>` with `T: Outgoing` (message `i` answered with `Ok` value `i`, or settled with outcome `i`), or remove `reply`",
                    ty_text(Some(whole))
                ),
            ));
            None
        }
    }
}

/// `reply` publishes the value in `Ok`: the return is a `Result` with a value to publish.
fn check_reply_return<'a>(output: &'a Output, errors: &mut Errors) -> Option<Ret<'a>> {
    match output {
        Output::Result { ok, .. } if is_unit(ok) => {
            errors.push(error_at_tokens(
                ok,
                "`reply` publishes the value in `Ok`, and `()` is nothing to publish: return `Result<T, HandlerOutcome>` with `T: Outgoing` (or `Response<T>`, which answers the requester only), or remove `reply`",
            ));
            None
        }
        Output::Result { ok, whole } => Some(Ret::Reply { value: ok, whole }),
        Output::Other(ty) => {
            let shown = ty_text(Some(ty));
            let why = if last_segment_is(ty, "HandlerOutcome") {
                "`HandlerOutcome` carries no value".to_owned()
            } else {
                format!("`{shown}` is not written as a `Result`")
            };
            errors.push(error_at_tokens(
                ty,
                format!(
                    "`reply` publishes the value a handler returns in `Ok`, and {why}: return `Result<T, HandlerOutcome>` with `T: Outgoing` (or `Response<T>`, which answers the requester only), or remove `reply`"
                ),
            ));
            None
        }
        Output::Unit(_) => None,
    }
}

/// A batch settles with outcomes, not with a `Result`.
fn check_batch_return<'a>(output: &'a Output, errors: &mut Errors) -> Option<Ret<'a>> {
    match output {
        Output::Result { whole, .. } => {
            errors.push(error_at_tokens(
                whole,
                "a batch subscriber returns `HandlerOutcome` (one for the whole batch) or `Vec<HandlerOutcome>` (one per message), not a `Result`",
            ));
            None
        }
        Output::Other(ty) => Some(Ret::Outcome(ty)),
        Output::Unit(_) => None,
    }
}

/// Without `reply`, a value in `Ok` would be lost: the `Ok` of a `Result` is `()`.
fn check_outcome_return<'a>(output: &'a Output, errors: &mut Errors) -> Option<Ret<'a>> {
    match output {
        Output::Result { ok, .. } if !is_unit(ok) => {
            let shown = ty_text(Some(ok));
            errors.push(error_at_tokens(
                ok,
                format!(
                    "the handler returns `{shown}` but nothing publishes it: add `reply` (`#[subscriber(.., reply)]`) to publish it, or return `Result<(), E>` (`E` a `std::error::Error` or `HandlerOutcome`)"
                ),
            ));
            None
        }
        Output::Result { whole, .. } => Some(Ret::Outcome(whole)),
        Output::Other(ty) => Some(Ret::Outcome(ty)),
        Output::Unit(_) => None,
    }
}

fn receiver_error(tokens: &impl ToTokens) -> syn::Error {
    error_at_tokens(
        tokens,
        "a subscriber is a free function, not a method: remove `self`, and reach shared clients through `State<T>`",
    )
}

fn ty_text(ty: Option<&Type>) -> String {
    ty.map(type_text).unwrap_or_default()
}

fn shown(elem: &Type, slice: bool) -> String {
    let t = ty_text(Some(elem));
    if slice { format!("[{t}]") } else { t }
}
