//! `nonzero!(60)`: a `NonZero` integer from a literal, zero refused at compile time, its integer
//! type inferred from where it is used.

use proc_macro2::TokenStream;
use quote::quote;
use syn::parse::{Parse, ParseStream};
use syn::{Expr, ExprLit, ExprUnary, Lit, LitInt, UnOp};

use crate::diag::error_at_tokens;

/// What was written between the parentheses.
enum Input {
    /// An integer literal, maybe with a suffix: `60`, `3u32`.
    Int(LitInt),
    /// A negated literal: `-1`.
    Negative(ExprUnary),
    /// Anything else.
    Other(Expr),
}

impl Parse for Input {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        if input.is_empty() {
            return Err(
                input.error("`nonzero!` takes a positive integer literal, like `nonzero!(60)`")
            );
        }
        let expr: Expr = input.parse()?;
        Ok(match expr {
            Expr::Lit(ExprLit {
                lit: Lit::Int(int), ..
            }) => Input::Int(int),
            Expr::Unary(unary) if matches!(unary.op, UnOp::Neg(_)) => Input::Negative(unary),
            other => Input::Other(other),
        })
    }
}

/// The macro's expansion.
pub fn expand(input: TokenStream) -> TokenStream {
    let input: Input = match syn::parse2(input) {
        Ok(input) => input,
        Err(err) => return err.to_compile_error(),
    };
    match check(input) {
        Ok(int) => quote! {
            match ::core::num::NonZero::new(#int) {
                ::core::option::Option::Some(__n) => __n,
                ::core::option::Option::None => ::core::unreachable!(),
            }
        },
        // A `NonZero` of the inferred type that is never built keeps the surrounding code free
        // of errors of its own.
        Err(err) => {
            let err = err.to_compile_error();
            quote! {{
                #err
                match ::core::num::NonZero::new(1) {
                    ::core::option::Option::Some(__n) => __n,
                    ::core::option::Option::None => ::core::unreachable!(),
                }
            }}
        }
    }
}

fn check(input: Input) -> syn::Result<LitInt> {
    match input {
        Input::Int(int) => match int.base10_parse::<u128>() {
            // Zero is the one value a `NonZero` cannot hold.
            Ok(0) => Err(error_at_tokens(
                &int,
                "`nonzero!(0)` is zero, which a `NonZero` cannot hold: a count or a duration here must be at least 1",
            )),
            Ok(_) => Ok(int),
            Err(err) => Err(err),
        },
        // Counts and durations are positive; the sign would only fail later, less clearly.
        Input::Negative(neg) => Err(error_at_tokens(
            &neg,
            "`nonzero!` takes a positive integer literal: counts and durations are never negative",
        )),
        // The literal is checked at compile time, so it must be there to check.
        Input::Other(expr) => {
            let hint = match &expr {
                Expr::Lit(ExprLit {
                    lit: Lit::Float(_), ..
                }) => "a whole number",
                _ => "a literal checked at compile time",
            };
            Err(error_at_tokens(
                &expr,
                format!(
                    "`nonzero!` takes an integer literal ({hint}), like `nonzero!(60)`; for a value known only at run time, use `NonZero::new(value)`, which returns an `Option`"
                ),
            ))
        }
    }
}
