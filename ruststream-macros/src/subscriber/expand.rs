//! The code a checked `#[subscriber]` becomes: a struct and a function named after the handler,
//! its `Handle` (or `HandleBatch`) impl wrapping the function, and its `SubscriberFn` impl (which
//! makes it a `Mount`).
//!
//! Type problems the macro cannot see (a payload that does not decode, a reply that is not
//! `Outgoing`, an extractor that is not one) are left to the compiler, through calls and bounds
//! spanned at the user's tokens so that the error points there.

mod methods;

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::Type;
use syn::ext::IdentExt;

use self::methods::{Methods, methods};
use super::check::{Arg, Plan, Ret, value_type_in_ctx};
use super::parse::{Descriptor, Handler, Shape};
use crate::diag::first_last;

/// The handler value and its impls.
pub fn handler(plan: &Plan<'_>) -> TokenStream {
    let h = plan.handler;
    let name = &h.item.sig.ident;
    let cfgs: Vec<_> = h.cfgs().collect();
    let value = value_struct(h);
    let payload = plan.payload;

    // Spanned over the reply type: a reply that is not `Outgoing` is reported there.
    let outs = match plan.ret {
        Ret::Reply { value, .. } => {
            let (first, last) = first_last(value);
            let open = quote_spanned!(first=> ::ruststream::Publisher<);
            let close = quote_spanned!(last=> >);
            quote!(#open #value #close)
        }
        Ret::Outcome(_) | Ret::Unit => quote!(()),
    };
    let extractors: Vec<&Type> = plan
        .args
        .iter()
        .filter_map(|a| match a {
            Arg::Extract(ty) => Some(*ty),
            Arg::Context { .. } => None,
        })
        .collect();
    // `Ty: FromContext<__S>`, spanned over `Ty`: a failing one names the parameter. For
    // `State<T>`, `T: FromRef<__S>`, which it comes down to: the error is one step shorter.
    // `Ctx<K>` has none: `K: Key` does not depend on the state, and is checked where the
    // handler is defined (see `checked_ctx`).
    let extractor_bounds: Vec<TokenStream> = extractors
        .iter()
        .filter(|ty| argument_of(ty, "Ctx").is_none())
        .map(|ty| {
            if let Some(part) = argument_of(ty, "State") {
                bound_over(ty, part, &quote!(::ruststream::FromRef), &quote!(<__S>))
            } else {
                bound(ty, &quote!(::ruststream::FromContext), &quote!(<__S>))
            }
        })
        .collect();

    let handle = if plan.batch {
        handle_batch(plan, &outs, &extractor_bounds)
    } else {
        handle_single(plan, &outs, &extractor_bounds)
    };

    let descriptor = match plan.descriptor {
        Descriptor::Literal(lit) => {
            quote_spanned!(lit.span()=> ::ruststream::__private::descriptor(#lit))
        }
        Descriptor::Expr(expr) => {
            let (first, last) = first_last(expr);
            let open = quote_spanned!(first=> ::ruststream::__private::descriptor);
            let args = quote_spanned!(last=> (#expr));
            quote!(#open #args)
        }
    };
    // A payload taken as bytes (`&[u8]`, `&Bytes`) is handed over as it arrived, undecoded; a
    // key-value change (`&KvChange<T>`) is built from the whole delivery (`FromDelivery`).
    let register = if plan.batch {
        quote!(mount_batch)
    } else if matches!(super::parse::strip(payload), Type::Slice(_)) {
        quote!(mount_raw_slice)
    } else if super::parse::last_segment_is(payload, "Bytes") {
        quote!(mount_raw)
    } else if super::parse::last_segment_is(payload, "KvChange") {
        quote!(mount_from_delivery)
    } else {
        quote!(mount_single)
    };
    // The payload (and a reply) is checked here, once, at the user's type, whether the handler
    // is mounted or not; the impl bounds hold only the extractors', which depend on the state.
    let (first, last) = first_last(payload);
    let open = quote_spanned!(first=> ::ruststream::__private::#register::<);
    let close = quote_spanned!(last=> , #outs, __S, Self>);
    let register_call = quote!(#open #payload #close);
    let registration = name.unraw().to_string();
    // A `reply` handler says so: the broker checks that no stream answers its requests first.
    let answers = match plan.ret {
        Ret::Reply { .. } => quote!(.__answers_requests()),
        Ret::Outcome(_) | Ret::Unit => TokenStream::new(),
    };
    // `SubscriberFn`, which makes it a `Mount` (see that trait for why not `Mount` itself).
    // Spanned at the function's name: an extractor this app's state cannot give is reported
    // as "required for `name` to implement `SubscriberFn`" at that one line.
    let mount = quote_spanned! {name.span()=>
        #[automatically_derived]
        impl<__S: ::core::marker::Send + ::core::marker::Sync + 'static>
            ::ruststream::__private::SubscriberFn<__S> for #name
        where
            #(#extractor_bounds,)*
        {
            type Name = ::ruststream::__private::SubscriberName;
            fn mount(self) -> ::ruststream::Registration<__S> {
                #register_call(#descriptor, self, #registration)#answers
            }
        }
    };

    quote! {
        #value

        #(#cfgs)*
        #handle

        #(#cfgs)*
        #mount
    }
}

/// `impl Handle<Payload, Outs, __S>`.
fn handle_single(plan: &Plan<'_>, outs: &TokenStream, bounds: &[TokenStream]) -> TokenStream {
    let h = plan.handler;
    let name = &h.item.sig.ident;
    let payload = plan.payload;
    let arguments = arguments(
        plan,
        &quote!(extract),
        &quote!(state),
        |o| quote!(return ::core::result::Result::Err(#o)),
    );
    let finish = match plan.ret {
        Ret::Reply { value, whole } => {
            // Spanned over the return type: an error type that is not an `Error` is shown there.
            let (first, last) = first_last(whole);
            let open = quote_spanned!(first=> ::ruststream::__private::into_reply::<);
            let close = quote_spanned!(last=> , _>(__ret, __ctx));
            quote! {
                let __ret = #open #whole #close;
                <#value as ::ruststream::__private::ReplyFor<__S>>::reply(__ret, __outs, __ctx).await
            }
        }
        Ret::Outcome(ty) => check_call(quote!(into_result), ty, quote!((__ret, __ctx))),
        Ret::Unit => quote!(::ruststream::__private::into_result(__ret, __ctx)),
    };
    let reply_bound = reply_bound(plan);
    let body = methods(&Methods {
        plan,
        inner: inner_fn(plan.handler),
        call: quote!(handle),
        call_with_state: quote!(handle_with_state),
        handler_trait: quote!(::ruststream::Handle<#payload, #outs, __S>),
        input: quote!(&#payload),
        outs: outs.clone(),
        context: quote!(::ruststream::Context<'_>),
        returns: quote!(::core::result::Result<(), ::ruststream::HandlerOutcome>),
        arguments,
        finish,
    });
    quote! {
        #[automatically_derived]
        impl<__S: ::core::marker::Send + ::core::marker::Sync + 'static>
            ::ruststream::Handle<#payload, #outs, __S> for #name
        where
            #(#bounds,)*
            #reply_bound
        {
            #body
        }
    }
}

/// `R: ReplyFor<__S>` for a `reply` handler, spanned over `R`.
fn reply_bound(plan: &Plan<'_>) -> TokenStream {
    match plan.ret {
        Ret::Reply { value, .. } => {
            let bound = bound(
                value,
                &quote!(::ruststream::__private::ReplyFor),
                &quote!(<__S>),
            );
            quote!(#bound,)
        }
        Ret::Outcome(_) | Ret::Unit => TokenStream::new(),
    }
}

/// `Ty: Trait<Args>` whose trait path spans `Ty`: the compiler marks a failing bound at the
/// trait's span, which is then the user's type.
fn bound(ty: &Type, trait_path: &TokenStream, args: &TokenStream) -> TokenStream {
    let (first, last) = first_last(ty);
    let path = respan(trait_path.clone(), first);
    let args = respan(args.clone(), last);
    quote!(#ty: #path #args)
}

/// `Ctx<K>` as the generated code writes it (in the function's signature and the extractor's
/// call): `Ctx<<K as KeyChecked<{ is_key::<<K as Key>::Value>() }>>::Key>`, which is `Ctx<K>`
/// for a key.
///
/// For a `K` that is no key, the constant is where the compiler reports it, once (the same
/// error at the same span is shown once), at `K` in the handler's parameter; the type is then
/// an error, which the compiler reports nowhere else: not in the function's body, not at the
/// `include` that mounts the handler. `None` for a type that is not `Ctx<K>`.
fn checked_ctx(ty: &Type) -> Option<Type> {
    let key = argument_of(ty, "Ctx")?;
    let (first, _) = first_last(key);
    let checked = quote_spanned! {first=>
        <#key as ::ruststream::__private::KeyChecked<{
            ::ruststream::__private::is_key::<<#key as ::ruststream::Key>::Value>()
        }>>::Key
    };
    let mut out = super::parse::strip(ty).clone();
    if let Type::Path(path) = &mut out
        && let Some(segment) = path.path.segments.last_mut()
        && let syn::PathArguments::AngleBracketed(args) = &mut segment.arguments
        && let Some(syn::GenericArgument::Type(arg)) = args.args.first_mut()
    {
        *arg = syn::parse2(checked).ok()?;
        return Some(out);
    }
    None
}

/// `T` of an extractor written `State<T>` (`wrapper` `"State"`) or `Ctx<T>` (`"Ctx"`).
fn argument_of<'a>(ty: &'a Type, wrapper: &str) -> Option<&'a Type> {
    let Type::Path(path) = super::parse::strip(ty) else {
        return None;
    };
    let last = path.path.segments.last()?;
    if path.qself.is_some() || last.ident != wrapper {
        return None;
    }
    match &last.arguments {
        syn::PathArguments::AngleBracketed(args) if args.args.len() == 1 => match &args.args[0] {
            syn::GenericArgument::Type(part) => Some(part),
            _ => None,
        },
        _ => None,
    }
}

/// `part: Trait<Args>` whose trait path spans all of `ty` (the whole parameter type).
fn bound_over(ty: &Type, part: &Type, trait_path: &TokenStream, args: &TokenStream) -> TokenStream {
    let (first, last) = first_last(ty);
    let path = respan(trait_path.clone(), first);
    let args = respan(args.clone(), last);
    quote!(#part: #path #args)
}

/// `tokens`, every one spanned at `span`.
fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut tree| {
            if let proc_macro2::TokenTree::Group(g) = &tree {
                let mut group = proc_macro2::Group::new(g.delimiter(), respan(g.stream(), span));
                group.set_span(span);
                tree = proc_macro2::TokenTree::Group(group);
            } else {
                tree.set_span(span);
            }
            tree
        })
        .collect()
}

/// `impl HandleBatch<Payload, Outs, __S>`.
fn handle_batch(plan: &Plan<'_>, outs: &TokenStream, bounds: &[TokenStream]) -> TokenStream {
    let h = plan.handler;
    let name = &h.item.sig.ident;
    let payload = plan.payload;
    let arguments = arguments(
        plan,
        &quote!(extract_batch),
        &quote!(batch_state),
        |o| quote!(return ::ruststream::BatchOutcome::All(#o)),
    );
    let finish = match plan.ret {
        Ret::Outcome(ty) => check_call(quote!(into_batch_outcome), ty, quote!((__ret))),
        Ret::Reply { value, whole } => {
            // Spanned over the return type: an error type that is not `HandlerOutcome` is
            // shown there.
            let (first, last) = first_last(whole);
            let open = quote_spanned!(first=> ::ruststream::__private::into_batch_replies::<);
            let close = quote_spanned!(last=> , _>(__ret));
            quote! {
                let __ret = #open #whole #close;
                <#value as ::ruststream::__private::ReplyFor<__S>>::reply_batch(__ret, __outs, __ctx).await
            }
        }
        // `check.rs` refuses `()` on a batch.
        Ret::Unit => quote!(::core::unreachable!()),
    };
    let reply_bound = reply_bound(plan);
    let body = methods(&Methods {
        plan,
        inner: inner_fn(plan.handler),
        call: quote!(handle_batch),
        call_with_state: quote!(handle_batch_with_state),
        handler_trait: quote!(::ruststream::HandleBatch<#payload, #outs, __S>),
        input: quote!(&[#payload]),
        outs: outs.clone(),
        context: quote!(::ruststream::BatchContext<'_>),
        returns: quote!(::ruststream::BatchOutcome),
        arguments,
        finish,
    });
    quote! {
        #[automatically_derived]
        impl<__S: ::core::marker::Send + ::core::marker::Sync + 'static>
            ::ruststream::HandleBatch<#payload, #outs, __S> for #name
        where
            #(#bounds,)*
            #reply_bound
        {
            #body
        }
    }
}

/// The state lookup, one `let` per extractor (in the order written), and the arguments of the
/// call to the function.
fn arguments(
    plan: &Plan<'_>,
    extract: &TokenStream,
    state: &TokenStream,
    reject: impl Fn(TokenStream) -> TokenStream,
) -> (TokenStream, Vec<TokenStream>, Vec<TokenStream>) {
    let mut extracts = Vec::new();
    let mut call_args = Vec::new();
    for (i, arg) in plan.args.iter().enumerate() {
        match arg {
            Arg::Extract(ty) => {
                let var = format_ident!("__a{}", i);
                let rejected = reject(quote!(__outcome));
                let checked = checked_ctx(ty);
                let ty = checked.as_ref().unwrap_or(ty);
                extracts.push(quote! {
                    let #var = match ::ruststream::__private::#extract::<#ty, __S>(__ctx, __state) {
                        ::core::result::Result::Ok(__value) => __value,
                        ::core::result::Result::Err(__outcome) => #rejected,
                    };
                });
                call_args.push(quote!(#var));
            }
            Arg::Context { mutable: true } => call_args.push(quote!(&mut *__ctx)),
            Arg::Context { mutable: false } => call_args.push(quote!(&*__ctx)),
        }
    }
    let state = if extracts.is_empty() {
        TokenStream::new()
    } else {
        let rejected = reject(quote!(__outcome));
        quote! {
            let __state: &__S = match ::ruststream::__private::#state::<__S>(__ctx) {
                ::core::result::Result::Ok(__state) => __state,
                ::core::result::Result::Err(__outcome) => #rejected,
            };
        }
    };
    (state, extracts, call_args)
}

/// `::ruststream::__private::function::<Ty>args`, spanned over `Ty` so that an unsatisfied bound
/// of `function` is reported at the user's type.
fn check_call(function: TokenStream, ty: &Type, args: TokenStream) -> TokenStream {
    let (first, last) = first_last(ty);
    let open = quote_spanned!(first=> ::ruststream::__private::#function::<);
    let close = quote_spanned!(last=> >#args);
    quote!(#open #ty #close)
}

/// The user's function, unchanged but for its docs and visibility, nested in the impl.
fn inner_fn(h: &Handler) -> TokenStream {
    let attrs = h.fn_attrs();
    let mut sig = h.item.sig.clone();
    // Every `Ctx<K>` parameter as `checked_ctx` writes it: a `K` that is no key is reported
    // once, at the parameter, and not again by the body's uses of the value.
    for input in &mut sig.inputs {
        if let syn::FnArg::Typed(typed) = input
            && let Some(checked) = checked_ctx(&typed.ty)
        {
            *typed.ty = checked;
        }
    }
    let block = &h.item.block;
    quote! {
        #(#attrs)*
        #sig #block
    }
}

/// The handler value that carries the function's name, visibility and docs: a field-less struct
/// (in the type namespace) and a function returning it (in the value namespace), which
/// `b.include(name)` mounts through `Mount`'s impl for such functions.
///
/// A function because a binding may shadow one: a parameter or `let` named like the handler
/// elsewhere in the module stays a variable. A `static` would refuse it ("cannot shadow
/// statics"), and a unit struct would turn it into a pattern matched against the handler.
fn value_struct(h: &Handler) -> TokenStream {
    let name = &h.item.sig.ident;
    let vis = &h.item.vis;
    let docs: Vec<_> = h.docs().collect();
    let cfgs: Vec<_> = h.cfgs().collect();
    // Spanned at the function's name, where errors about the value point.
    let value = quote_spanned! {name.span()=>
        #[allow(dead_code)]
        #vis fn #name(_: ::ruststream::__private::SubscriberName) -> #name {
            #name {}
        }
    };
    quote! {
        #(#docs)*
        #(#cfgs)*
        #[allow(non_camel_case_types)]
        #[derive(::core::fmt::Debug, ::core::clone::Clone, ::core::marker::Copy, ::core::default::Default)]
        #vis struct #name {}

        #(#docs)*
        #(#cfgs)*
        #value
    }
}

/// What a subscriber with errors becomes: the errors, the handler value (so that uses of the
/// name do not add errors of their own), a `SubscriberFn` impl that is never run, and the function,
/// out of the way, so that errors in its body still show.
pub fn fallback(h: &Handler, errors: syn::Error) -> TokenStream {
    let errors = errors.to_compile_error();
    // A method sits in an `impl` block, where no struct can: leave it as it is.
    if h.params.iter().any(|p| matches!(p.shape, Shape::Receiver)) {
        let item = &h.item;
        return quote!(#errors #item);
    }
    let name = &h.item.sig.ident;
    let value = value_struct(h);
    let cfgs: Vec<_> = h.cfgs().collect();
    let mut item = h.item.clone();
    item.sig.asyncness = Some(syn::Token![async](Span::call_site()));
    // A `Ctx<u32>` already reported becomes a `Ctx` the compiler accepts, so that the body
    // does not repeat the error for every use of the parameter.
    for input in &mut item.sig.inputs {
        if let syn::FnArg::Typed(typed) = input
            && let Some(value) = value_type_in_ctx(&typed.ty)
        {
            let value = value.clone();
            let ty = &mut *typed.ty;
            if let Type::Path(path) = ty
                && let Some(last) = path.path.segments.last_mut()
            {
                last.arguments = syn::PathArguments::AngleBracketed(syn::parse_quote!(
                    <::ruststream::__private::NotAKey<#value>>
                ));
            }
        }
    }
    item.attrs.retain(|a| !a.path().is_ident("doc"));
    quote! {
        #errors
        #value

        #(#cfgs)*
        const _: () = {
            #[allow(dead_code, unused_variables, unused_mut, clippy::all)]
            #item
        };

        #(#cfgs)*
        #[automatically_derived]
        impl<__S> ::ruststream::__private::SubscriberFn<__S> for #name {
            type Name = ::ruststream::__private::SubscriberName;
            fn mount(self) -> ::ruststream::Registration<__S> {
                ::core::unreachable!("`#[subscriber]` reported an error at compile time")
            }
        }
    }
}
