//! `#[ruststream::app]`: keeps `fn app()` as written and adds the `main` that runs it.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::{ItemFn, ReturnType};

use crate::diag::{Errors, error_at, error_at_tokens, first_last};

/// The attribute's expansion.
pub fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    let item_fn = match syn::parse2::<ItemFn>(item.clone()) {
        Ok(item_fn) => item_fn,
        // Not a function: say so, and leave the item as it was.
        Err(_) => {
            let error = error_at(
                Span::call_site(),
                "`#[ruststream::app]` goes on a function that builds the app: `fn app() -> impl App<State = MyState>`",
            )
            .to_compile_error();
            return quote!(#error #item);
        }
    };
    match check(&args, &item_fn) {
        Ok(()) => generate(&item_fn),
        Err(errors) => {
            // The function as written, and a `main` that is never run: only the real errors show.
            let errors = errors.to_compile_error();
            // A function named `main` moves out of the way of the `main` that is never run.
            let item = if item_fn.sig.ident == "main" {
                quote!(const _: () = { #item_fn };)
            } else {
                quote!(#item_fn)
            };
            quote! {
                #errors
                #item
                fn main() -> ::std::process::ExitCode {
                    ::std::process::ExitCode::FAILURE
                }
            }
        }
    }
}

fn check(args: &TokenStream, item: &ItemFn) -> syn::Result<()> {
    let mut errors = Errors::new();
    let sig = &item.sig;
    let name = &sig.ident;
    // The attribute has nothing to configure: the app says everything.
    if !args.is_empty() {
        errors.push(error_at_tokens(
            args,
            "`#[ruststream::app]` takes no arguments: configure the app in the function it marks",
        ));
    }
    // The attribute writes `main`; the function it marks needs another name.
    if name == "main" {
        errors.push(error_at_tokens(
            name,
            "`#[ruststream::app]` writes `main` itself: name the function that builds the app something else, like `fn app()`",
        ));
    }
    // `main` calls the function with nothing: it has nothing to pass.
    if !sig.inputs.is_empty() {
        errors.push(error_at_tokens(
            &sig.inputs,
            format!(
                "the app function takes no arguments, because the generated `main` calls `{name}()`: build what they carry inside it, or in `.on_startup(..)`"
            ),
        ));
    }
    // `main` builds the runtime, so the app is built before it: a plain `fn`.
    if let Some(asyncness) = sig.asyncness {
        errors.push(error_at_tokens(
            asyncness,
            format!(
                "the app function is not `async`: it only builds the app (`fn {name}() -> impl App<..>`); connect and load in `.on_startup(async |()| ..)`, which runs inside the runtime"
            ),
        ));
    }
    // `main` names one app type: nothing to infer.
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        errors.push(error_at_tokens(
            &sig.generics,
            "the app function cannot be generic: `main` calls it with no types to fill in; return `impl App<State = MyState>`",
        ));
    }
    // An app is what the function builds: without a return type it builds nothing.
    if matches!(sig.output, ReturnType::Default) {
        errors.push(error_at(
            sig.paren_token.span.close(),
            format!(
                "the app function returns the app it builds: `fn {name}() -> impl App<State = MyState>`"
            ),
        ));
    }
    errors.finish()
}

fn generate(item: &ItemFn) -> TokenStream {
    let name = &item.sig.ident;
    // Spanned at the return type: an app that is not an `App` is reported there.
    let call = match &item.sig.output {
        ReturnType::Type(_, ty) => {
            let (first, last) = first_last(ty);
            let open = quote_spanned!(first=> ::ruststream::__private::main);
            let args = quote_spanned!(last=> (#name));
            quote!(#open #args)
        }
        ReturnType::Default => quote!(::ruststream::__private::main(#name)),
    };
    quote! {
        #item

        fn main() -> ::std::process::ExitCode {
            #call
        }
    }
}
