//! `#[subscriber(DESCRIPTOR)]` and `#[subscriber(DESCRIPTOR, reply)]`: parse (`parse.rs`), check
//! every rule (`check.rs`), then generate (`expand.rs`).

mod check;
mod expand;
mod parse;

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::ItemFn;

use self::parse::{Args, Handler};
use crate::diag::error_at;

/// The attribute's expansion.
pub fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    let item_fn = match syn::parse2::<ItemFn>(item.clone()) {
        Ok(item_fn) => item_fn,
        // Not a function at all: say so, and leave the item as it was.
        Err(_) => {
            let error = error_at(
                Span::call_site(),
                "`#[subscriber]` goes on an `async fn`, like `async fn refresh(captured: &Captured) -> HandlerOutcome`",
            )
            .to_compile_error();
            return quote!(#error #item);
        }
    };
    let handler = Handler::parse(item_fn);
    let args = match syn::parse2::<Args>(args) {
        Ok(args) => args,
        Err(err) => return expand::fallback(&handler, err),
    };
    match check::check(&args, &handler) {
        Ok(plan) => expand::handler(&plan),
        Err(errors) => expand::fallback(&handler, errors),
    }
}
