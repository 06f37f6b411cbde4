//! The methods of a generated `Handle` or `HandleBatch` impl: the state as its type from the
//! runtime (`handle_with_state`), and the direct `handle` call.

use proc_macro2::TokenStream;
use quote::quote;

use crate::subscriber::check::Plan;

/// The methods of a `Handle` (or `HandleBatch`) impl: what they are called, their types, the
/// state lookup and the body that runs the function.
pub(super) struct Methods<'a> {
    pub(super) plan: &'a Plan<'a>,
    /// The user's function, nested in the method.
    pub(super) inner: TokenStream,
    pub(super) call: TokenStream,
    pub(super) call_with_state: TokenStream,
    pub(super) handler_trait: TokenStream,
    pub(super) input: TokenStream,
    pub(super) outs: TokenStream,
    pub(super) context: TokenStream,
    pub(super) returns: TokenStream,
    /// The state lookup, the extractors, the call's arguments (see [`arguments`]).
    pub(super) arguments: (TokenStream, Vec<TokenStream>, Vec<TokenStream>),
    pub(super) finish: TokenStream,
}

/// `handle` alone when no extractor needs the state; otherwise the body in `handle_with_state`,
/// which the runtime calls with the state as its type, and a `handle` (a direct call) that looks
/// the state up once and delegates.
pub(super) fn methods(m: &Methods<'_>) -> TokenStream {
    let Methods {
        plan,
        inner,
        call,
        call_with_state,
        handler_trait,
        input,
        outs,
        context,
        returns,
        arguments: (state, extracts, call_args),
        finish,
    } = m;
    let name = &plan.handler.item.sig.ident;
    let signature = quote!(&self, __input: #input, __outs: &#outs,);
    let run = quote! {
        #inner
        #(#extracts)*
        let __ret = #name(__input, #(#call_args),*).await;
        #finish
    };
    if extracts.is_empty() {
        return quote! {
            async fn #call(#signature __ctx: &mut #context) -> #returns {
                #run
            }
        };
    }
    quote! {
        async fn #call(#signature __ctx: &mut #context) -> #returns {
            #state
            <Self as #handler_trait>::#call_with_state(self, __input, __outs, __state, __ctx).await
        }

        async fn #call_with_state(#signature __state: &__S, __ctx: &mut #context) -> #returns {
            #run
        }
    }
}
