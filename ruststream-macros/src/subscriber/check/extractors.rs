//! The rules of the parameters after the payload: the context once and of the right kind, every
//! extractor by value, `Ctx<K>` with a key, and no standard type as an extractor.

use syn::Type;

use super::{Arg, ty_text, typed_params};
use crate::diag::{Errors, error_at_tokens, type_text};
use crate::subscriber::parse::{Handler, Param, Shape, strip};

/// The parameters after the payload: extractors, and the context at most once.
pub(super) fn check_extractors<'a>(
    handler: &'a Handler,
    batch: bool,
    errors: &mut Errors,
) -> Vec<Arg<'a>> {
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
