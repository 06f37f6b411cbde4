//! The rules a `#[subscriber]` function follows, each checked with its own error, all reported
//! at once. What passes becomes a [`Plan`] that `expand.rs` turns into code.

use proc_macro2::Span;
use quote::ToTokens;
use syn::{Expr, LitStr, Type};

use super::parse::{
    Args, Descriptor, Handler, Output, Param, Shape, is_unit, last_segment_is, strip,
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
    /// `Result<R, HandlerOutcome>` (or `Result<R, E>`) with `reply`: `R` is published.
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

/// The parameters after the payload: extractors, and the context at most once.
fn check_extractors<'a>(handler: &'a Handler, batch: bool, errors: &mut Errors) -> Vec<Arg<'a>> {
    let mut args = Vec::new();
    let mut context: Option<&Param> = None;
    for param in typed_params(handler).skip(1) {
        match &param.shape {
            Shape::Context { mutable } | Shape::BatchContext { mutable } => {
                if check_context_kind(param, batch, errors)
                    && check_context_once(param, context, errors)
                {
                    context = Some(param);
                    args.push(Arg::Context { mutable: *mutable });
                }
            }
            Shape::Value { .. } => {
                if let Some(ty) = &param.ty
                    && check_ctx_key(ty, errors)
                    && check_standard_extractor(ty, errors)
                {
                    args.push(Arg::Extract(ty));
                }
            }
            _ => check_extractor_by_value(param, errors),
        }
    }
    args
}

/// A single delivery has a `Context`; a batch has a `BatchContext`.
fn check_context_kind(param: &Param, batch: bool, errors: &mut Errors) -> bool {
    match param.shape {
        Shape::Context { .. } if batch => errors.push(error_at_tokens(
            &param.ty,
            "a batch handler takes `&mut BatchContext<'_>`, not `&mut Context<'_>`: `ctx.context(i)` gives the context of message `i`",
        )),
        Shape::BatchContext { .. } if !batch => errors.push(error_at_tokens(
            &param.ty,
            "`&mut BatchContext<'_>` is for batch handlers, whose payload is `&[T]`; this handler takes one message: take `&mut Context<'_>`",
        )),
        _ => return true,
    }
    false
}

/// The context is lent once: two `&mut` to it cannot exist.
fn check_context_once(param: &Param, first: Option<&Param>, errors: &mut Errors) -> bool {
    let Some(first) = first else {
        return true;
    };
    errors.push(error_at_tokens(
        &param.tokens,
        format!(
            "the handler already takes the context as `{}`: it can be taken once; remove this parameter",
            ty_text(first.ty.as_ref())
        ),
    ));
    false
}

/// `Ctx<K>` takes a key that names a value (`Ctx<Attempt>` gives a `u32`), never the value's
/// type: no key is a standard type, which the orphan rule keeps anyone from making one.
fn check_ctx_key(ty: &Type, errors: &mut Errors) -> bool {
    let Some(value) = value_type_in_ctx(ty) else {
        return true;
    };
    let shown = type_text(value);
    let last = last_ident(value).unwrap_or_default();
    let instead = match last.as_str() {
        "u32" | "NonZeroU32" => {
            "take `Ctx<Attempt>`, which gives the attempt number the cap counts as a `u32`"
        }
        "u64" | "Option" => {
            "take `Ctx<Delivered>`, which gives the server's delivery count as an `Option<u64>`"
        }
        "String" | "str" => {
            "take `Ctx<Subject>`, which gives the subject the message arrived on as a `String`"
        }
        "Headers" | "HeaderMap" => {
            "take `Ctx<MessageHeaders>`, which gives the headers as they arrived"
        }
        _ => "take the key of the value you want",
    };
    errors.push(error_at_tokens(
        value,
        format!(
            "`Ctx<{shown}>` names a type, and `Ctx` takes a key that names a value: {instead}; the keys are `Delivered`, `Attempt`, `Subject`, `MessageHeaders` and a broker's own"
        ),
    ));
    false
}

/// A standard type is not an extractor (only a crate with its own state type could make it one,
/// and it names it through an alias, which this check does not read): say which extractor gives
/// such a value.
fn check_standard_extractor(ty: &Type, errors: &mut Errors) -> bool {
    if !is_standard(ty) {
        return true;
    }
    let shown = type_text(ty);
    let key = match last_ident(ty).unwrap_or_default().as_str() {
        "u32" | "NonZeroU32" => "`Ctx(attempt): Ctx<Attempt>` gives the attempt number (a `u32`), ",
        "u64" | "Option" => {
            "`Ctx(delivered): Ctx<Delivered>` gives the server's delivery count (an `Option<u64>`), "
        }
        "String" => "`Ctx(subject): Ctx<Subject>` gives the subject (a `String`), ",
        _ => "",
    };
    errors.push(error_at_tokens(
        ty,
        format!(
            "`{shown}` is not an extractor: after the payload, a handler takes `Ctx<K>` (a value of the delivery by key), `State<T>` (part of the app state) or `&mut Context<'_>`; {key}and `State<{shown}>` takes a `{shown}` field of the state (a standard type your crate made an extractor, with `impl FromContext<YourState>`, is named through a type alias)"
        ),
    ));
    false
}

/// `X` of `Ctx<X>` when `X` is a standard type, which is never a key.
pub fn value_type_in_ctx(ty: &Type) -> Option<&Type> {
    let Type::Path(path) = strip(ty) else {
        return None;
    };
    let last = path.path.segments.last()?;
    if path.qself.is_some() || last.ident != "Ctx" {
        return None;
    }
    let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    let [syn::GenericArgument::Type(value)] = args.args.iter().collect::<Vec<_>>()[..] else {
        return None;
    };
    is_standard(value).then_some(value)
}

/// Whether `ty` is a standard type (a tuple, a primitive, `String`, `Option<..>` of a standard
/// type...). `Option<T>` of a type of ours or the user's (`Option<Header<Tenant>>`) can be an
/// extractor, so only an `Option` of a standard type counts.
fn is_standard(ty: &Type) -> bool {
    match strip(ty) {
        Type::Tuple(_) => true,
        Type::Path(path) => {
            let Some(ident) = last_ident(ty) else {
                return false;
            };
            if ident == "Option"
                && let Some(syn::PathArguments::AngleBracketed(args)) =
                    path.path.segments.last().map(|s| &s.arguments)
                && let Some(syn::GenericArgument::Type(inner)) = args.args.first()
            {
                return is_standard(inner);
            }
            STANDARD_TYPES.contains(&ident.as_str())
        }
        _ => false,
    }
}

/// Standard types no crate but the standard library can make a key of, by names a crate would
/// not give its own types (not `Box`, which is fundamental: `Box<MyKey>` can be a key; not
/// `Duration`, a plausible name for a crate's own key).
const STANDARD_TYPES: &[&str] = &[
    "u8",
    "u16",
    "u32",
    "u64",
    "u128",
    "usize",
    "i8",
    "i16",
    "i32",
    "i64",
    "i128",
    "isize",
    "f32",
    "f64",
    "bool",
    "char",
    "String",
    "str",
    "Option",
    "Vec",
    "Arc",
    "Rc",
    "NonZeroU32",
    "NonZeroU64",
    "HashMap",
    "BTreeMap",
];

/// The last identifier of a path type.
fn last_ident(ty: &Type) -> Option<String> {
    match strip(ty) {
        Type::Path(p) if p.qself.is_none() => p.path.segments.last().map(|s| s.ident.to_string()),
        _ => None,
    }
}

/// Only the payload is lent; an extractor is one value the runtime builds and the handler owns.
fn check_extractor_by_value(param: &Param, errors: &mut Errors) {
    let message = match &param.shape {
        Shape::Ref { elem, .. } => format!(
            "only the payload (the first parameter) is borrowed; an extractor is taken by value: write `{}`",
            type_text(elem)
        ),
        Shape::Slice { elem, .. } => format!(
            "only the first parameter is the payload; a handler has one: remove this parameter, or make `&[{}]` the first to take a batch",
            type_text(elem)
        ),
        Shape::ImplTrait => "an extractor cannot be `impl Trait`: name its type, like `Ctx<Delivered>` or `State<Arc<Bank>>`".to_owned(),
        _ => return,
    };
    errors.push(error_at_tokens(&param.ty, message));
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
        Some(span) if batch => check_no_reply_on_batch(span, errors),
        Some(_) => check_reply_return(&handler.output, errors),
        None if batch => check_batch_return(&handler.output, errors),
        None => check_outcome_return(&handler.output, errors),
    }
}

/// A handler says how its message is settled: `()` says nothing.
fn check_returns_an_outcome(span: Span, reply: bool, _batch: bool, errors: &mut Errors) {
    errors.push(error_at(
        span,
        if reply {
            "a `reply` subscriber returns what it publishes: add `-> Result<T, HandlerOutcome>` (or `-> Result<T, E>` with `E: std::error::Error`) with `T: Outgoing`"
        } else {
            "a batch subscriber returns how its messages are settled: add `-> HandlerOutcome` (one for the batch) or `-> Vec<HandlerOutcome>` (one per message)"
        },
    ));
}

/// `reply` publishes one message's answer; a batch has no single answer.
fn check_no_reply_on_batch<'a>(span: Span, errors: &mut Errors) -> Option<Ret<'a>> {
    errors.push(error_at(
        span,
        "`reply` is for single-message handlers; a batch handler publishes from `ctx.context(i)` of its `&mut BatchContext<'_>`: remove `reply`",
    ));
    None
}

/// `reply` publishes the value in `Ok`: the return is a `Result` with a value to publish.
fn check_reply_return<'a>(output: &'a Output, errors: &mut Errors) -> Option<Ret<'a>> {
    match output {
        Output::Result { ok, .. } if is_unit(ok) => {
            errors.push(error_at_tokens(
                ok,
                "`reply` publishes the value in `Ok`, and `()` is nothing to publish: return `Result<T, HandlerOutcome>` with `T: Outgoing`, or remove `reply`",
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
                    "`reply` publishes the value a handler returns in `Ok`, and {why}: return `Result<T, HandlerOutcome>` with `T: Outgoing`, or remove `reply`"
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

/// `reply` is a switch: once is enough.
fn check_reply_once(args: &Args, errors: &mut Errors) {
    for extra in args.reply.iter().skip(1) {
        errors.push(error_at(
            *extra,
            "`reply` is written twice: remove this one",
        ));
    }
}

/// Only a descriptor and `reply` mean something.
fn check_known_args(args: &Args, errors: &mut Errors) {
    for unknown in &args.unknown {
        let hint = match unknown {
            Expr::Assign(a) if matches!(&*a.left, Expr::Path(p) if p.path.is_ident("name")) => {
                "; to rename the registration, call `.name(\"..\")` where it is mounted"
            }
            Expr::Path(p)
                if p.path
                    .get_ident()
                    .is_some_and(|i| close_to_reply(&i.to_string())) =>
            {
                "; did you mean `reply`?"
            }
            _ => "",
        };
        errors.push(error_at_tokens(
            unknown,
            format!(
                "unknown argument `{}`: `#[subscriber]` takes a descriptor, then optionally `reply`{hint}",
                type_text(unknown)
            ),
        ));
    }
}

/// The descriptor comes first: a Core subject as a string, or a descriptor expression.
fn check_descriptor<'a>(args: &'a Args, errors: &mut Errors) -> Option<&'a Descriptor> {
    // Without a descriptor the runtime does not know what to read.
    let Some(descriptor) = &args.descriptor else {
        errors.push(error_at(
            Span::call_site(),
            "`#[subscriber]` needs a descriptor first: a subject like `#[subscriber(\"orders.shipped\")]`, or an expression like `#[subscriber(JetStreamSubject::new(\"payments.authorized\", \"PAYMENTS\"))]`",
        ));
        return None;
    };
    match descriptor {
        Descriptor::Literal(lit) => check_subject_literal(lit, errors),
        Descriptor::Expr(expr) => check_jetstream_stream(expr, errors),
    }
    Some(descriptor)
}

/// A string is one Core subject: it follows the subject rules, and is no pattern.
fn check_subject_literal(lit: &LitStr, errors: &mut Errors) {
    let subject = lit.value();
    if subject.contains(['*', '>']) && !subject.contains(char::is_whitespace) {
        errors.push(error_at_tokens(
            lit,
            format!(
                "`{subject}` is a pattern, and a string descriptor is one subject: read a pattern with `CoreWildcard::new(\"{subject}\")`"
            ),
        ));
    } else if let Some(problem) = crate::subject::problem(&subject) {
        errors.push(error_at_tokens(lit, problem));
    }
}

/// A `JetStreamSubject` reads from a stream, so its constructor names one.
fn check_jetstream_stream(expr: &Expr, errors: &mut Errors) {
    if let Some(call) = jetstream_constructor(expr)
        && call.args.len() < 2
    {
        let subject = call
            .args
            .first()
            .map_or_else(|| "\"subject\"".to_owned(), type_text);
        errors.push(error_at_tokens(
            call,
            format!(
                "a `JetStreamSubject` reads a subject from a stream, and the stream is missing: `JetStreamSubject::new({subject}, \"STREAM\")`"
            ),
        ));
    }
}

/// Whether `word` is a typo of `reply` (one letter changed, added, removed or swapped).
fn close_to_reply(word: &str) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (word.chars().collect(), "reply".chars().collect());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            let next = (row[j + 1] + 1).min(row[j] + 1).min(prev + cost);
            prev = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()] <= 2
}

/// The `JetStreamSubject::new(..)` call at the root of a builder chain, if that is what it is.
fn jetstream_constructor(expr: &Expr) -> Option<&syn::ExprCall> {
    match expr {
        Expr::MethodCall(m) => jetstream_constructor(&m.receiver),
        Expr::Paren(p) => jetstream_constructor(&p.expr),
        Expr::Group(g) => jetstream_constructor(&g.expr),
        Expr::Call(call) => match &*call.func {
            Expr::Path(p) => {
                let segments: Vec<_> = p.path.segments.iter().rev().take(2).collect();
                match segments[..] {
                    [new, ty] if new.ident == "new" && ty.ident == "JetStreamSubject" => Some(call),
                    _ => None,
                }
            }
            _ => None,
        },
        _ => None,
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
