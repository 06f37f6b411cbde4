//! The typed model of `#[subscriber(..)]`: its arguments and the function it marks. Parsing
//! records what was written; `check.rs` decides whether it is allowed.

use proc_macro2::{Span, TokenStream};
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Attribute, Expr, FnArg, ItemFn, LitStr, ReturnType, Token, Type};

/// The attribute's arguments: `#[subscriber(DESCRIPTOR)]` or `#[subscriber(DESCRIPTOR, reply)]`.
pub struct Args {
    /// Where the messages come from.
    pub descriptor: Option<Descriptor>,
    /// Every `reply` written (more than one is an error).
    pub reply: Vec<Span>,
    /// Arguments that are neither the descriptor nor `reply`.
    pub unknown: Vec<Expr>,
}

/// The descriptor argument.
pub enum Descriptor {
    /// A string literal: one Core subject.
    Literal(LitStr),
    /// Any other descriptor expression, used as written.
    Expr(Expr),
}

impl Parse for Args {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let exprs = Punctuated::<Expr, Token![,]>::parse_terminated(input)?;
        let mut args = Args {
            descriptor: None,
            reply: Vec::new(),
            unknown: Vec::new(),
        };
        for (i, expr) in exprs.into_iter().enumerate() {
            if is_ident(&expr, "reply") {
                args.reply.push(expr.span());
            } else if i == 0 {
                args.descriptor = Some(match expr {
                    Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Str(s),
                        ..
                    }) => Descriptor::Literal(s),
                    other => Descriptor::Expr(other),
                });
            } else {
                args.unknown.push(expr);
            }
        }
        Ok(args)
    }
}

fn is_ident(expr: &Expr, name: &str) -> bool {
    matches!(expr, Expr::Path(p) if p.qself.is_none() && p.path.is_ident(name))
}

/// The function `#[subscriber]` marks, taken apart.
pub struct Handler {
    /// The function as written.
    pub item: ItemFn,
    /// Its parameters, in order.
    pub params: Vec<Param>,
    /// What it returns.
    pub output: Output,
}

/// One parameter.
pub struct Param {
    /// The whole parameter, for errors.
    pub tokens: TokenStream,
    /// Its type, when it is not a receiver.
    pub ty: Option<Type>,
    /// What the type looks like.
    pub shape: Shape,
}

/// What a parameter's type looks like, as far as the macro can tell from its tokens.
pub enum Shape {
    /// `self`, `&self`, ...
    Receiver,
    /// `&mut Context<'_>` (or `&Context<'_>`).
    Context { mutable: bool },
    /// `&mut BatchContext<'_>` (or `&BatchContext<'_>`).
    BatchContext { mutable: bool },
    /// `&[T]` (`mutable` for `&mut [T]`).
    Slice { elem: Type, mutable: bool },
    /// `&T` (`mutable` for `&mut T`).
    Ref { elem: Type, mutable: bool },
    /// `impl Trait`.
    ImplTrait,
    /// Any other type, taken by value. `extractor_like` when it is spelled `Ctx<..>` or
    /// `State<..>`.
    Value { extractor_like: bool },
}

/// The return type.
pub enum Output {
    /// None written: `()`.
    Unit(Span),
    /// `Result<ok, _>`, as written.
    Result { ok: Box<Type>, whole: Box<Type> },
    /// Any other type (`HandlerOutcome`, `Vec<HandlerOutcome>`, an alias...).
    Other(Box<Type>),
}

impl Handler {
    pub fn parse(item: ItemFn) -> Self {
        let params = item.sig.inputs.iter().map(Param::parse).collect();
        let output = match &item.sig.output {
            ReturnType::Default => Output::Unit(item.sig.paren_token.span.close()),
            ReturnType::Type(_, ty) => Output::parse(ty),
        };
        Handler {
            item,
            params,
            output,
        }
    }

    /// The function's doc comments, which move to the handler value.
    pub fn docs(&self) -> impl Iterator<Item = &Attribute> {
        self.item.attrs.iter().filter(|a| a.path().is_ident("doc"))
    }

    /// Its `cfg` attributes, which every generated item carries.
    pub fn cfgs(&self) -> impl Iterator<Item = &Attribute> {
        self.item.attrs.iter().filter(|a| a.path().is_ident("cfg"))
    }

    /// Every attribute but the docs, which stays on the function itself.
    pub fn fn_attrs(&self) -> impl Iterator<Item = &Attribute> {
        self.item.attrs.iter().filter(|a| !a.path().is_ident("doc"))
    }
}

impl Param {
    fn parse(arg: &FnArg) -> Self {
        match arg {
            FnArg::Receiver(r) => Param {
                tokens: quote::quote!(#r),
                ty: None,
                shape: Shape::Receiver,
            },
            FnArg::Typed(t) => Param {
                tokens: quote::quote!(#t),
                ty: Some((*t.ty).clone()),
                shape: Shape::of(&t.ty),
            },
        }
    }
}

impl Shape {
    fn of(ty: &Type) -> Self {
        match strip(ty) {
            Type::Reference(r) => {
                let mutable = r.mutability.is_some();
                match strip(&r.elem) {
                    Type::Slice(s) => Shape::Slice {
                        elem: (*s.elem).clone(),
                        mutable,
                    },
                    elem if last_segment_is(elem, "Context") => Shape::Context { mutable },
                    elem if last_segment_is(elem, "BatchContext") => {
                        Shape::BatchContext { mutable }
                    }
                    elem => Shape::Ref {
                        elem: elem.clone(),
                        mutable,
                    },
                }
            }
            Type::ImplTrait(_) => Shape::ImplTrait,
            other => Shape::Value {
                extractor_like: last_segment_is(other, "Ctx") || last_segment_is(other, "State"),
            },
        }
    }
}

impl Output {
    fn parse(ty: &Type) -> Self {
        match result_ok(ty) {
            Some(ok) => Output::Result {
                ok: Box::new(ok.clone()),
                whole: Box::new(ty.clone()),
            },
            None => Output::Other(Box::new(ty.clone())),
        }
    }
}

/// The type arguments of `ty` when it is a path whose last segment is `name` (`Result`,
/// `std::vec::Vec`).
fn type_args<'a>(ty: &'a Type, name: &str) -> Option<Vec<&'a Type>> {
    if let Type::Path(p) = strip(ty)
        && p.qself.is_none()
        && let Some(last) = p.path.segments.last()
        && last.ident == name
        && let syn::PathArguments::AngleBracketed(args) = &last.arguments
    {
        return Some(
            args.args
                .iter()
                .filter_map(|a| match a {
                    syn::GenericArgument::Type(t) => Some(t),
                    _ => None,
                })
                .collect(),
        );
    }
    None
}

/// `ok` of a type written `Result<ok, _>`.
fn result_ok(ty: &Type) -> Option<&Type> {
    match type_args(ty, "Result")?[..] {
        [ok, _err] => Some(ok),
        _ => None,
    }
}

/// `ok` of a type written `Vec<Result<ok, _>>`: what a batch `reply` handler returns.
pub fn each_result_ok(ty: &Type) -> Option<&Type> {
    match type_args(ty, "Vec")?[..] {
        [each] => result_ok(each),
        _ => None,
    }
}

/// The type without invisible groups or parentheses.
pub fn strip(ty: &Type) -> &Type {
    match ty {
        Type::Group(g) => strip(&g.elem),
        Type::Paren(p) => strip(&p.elem),
        other => other,
    }
}

/// Whether `ty` is a path whose last segment is `name` (`Context`, `ruststream::Context<'_>`).
pub fn last_segment_is(ty: &Type, name: &str) -> bool {
    matches!(strip(ty), Type::Path(p) if p.qself.is_none()
        && p.path.segments.last().is_some_and(|s| s.ident == name))
}

/// Whether `ty` is `()`.
pub fn is_unit(ty: &Type) -> bool {
    matches!(strip(ty), Type::Tuple(t) if t.elems.is_empty())
}
