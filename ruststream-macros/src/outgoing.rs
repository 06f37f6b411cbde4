//! `#[derive(Outgoing)]` with `#[outgoing(name = "subject")]`: the type knows where it is
//! published.

use proc_macro2::TokenStream;
use quote::quote;
use syn::punctuated::Punctuated;
use syn::{DeriveInput, Expr, Lit, LitStr, MetaNameValue, Token};

use crate::diag::{Errors, error_at, error_at_tokens, type_text};

/// What the derive needs from the type and its `#[outgoing(..)]`.
struct Model<'a> {
    input: &'a DeriveInput,
    /// The subject the type is published to.
    name: LitStr,
}

/// The derive's expansion.
pub fn expand(input: TokenStream) -> TokenStream {
    let input: DeriveInput = match syn::parse2(input) {
        Ok(input) => input,
        Err(err) => return err.to_compile_error(),
    };
    match check(&input) {
        Ok(model) => generate(&model.input.ident, model.input, &model.name),
        Err(errors) => {
            // The fallback impl keeps uses of the type from adding errors of their own.
            let errors = errors.to_compile_error();
            let subject = LitStr::new("", proc_macro2::Span::call_site());
            let fallback = generate(&input.ident, &input, &subject);
            quote!(#errors #fallback)
        }
    }
}

fn check(input: &DeriveInput) -> syn::Result<Model<'_>> {
    let mut errors = Errors::new();
    let ident = &input.ident;
    let example = "`#[outgoing(name = \"orders.created\")]`";
    let mut name: Option<LitStr> = None;
    let mut misread = false;
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("outgoing")) {
        let pairs =
            match attr.parse_args_with(Punctuated::<MetaNameValue, Token![,]>::parse_terminated) {
                Ok(pairs) => pairs,
                Err(err) => {
                    misread = true;
                    errors.push(error_at(
                        err.span(),
                        format!("`#[outgoing(..)]` reads `name = \"subject\"`, like {example}"),
                    ));
                    continue;
                }
            };
        for pair in pairs {
            // `name` is the one setting: the subject.
            if !pair.path.is_ident("name") {
                misread = true;
                errors.push(error_at_tokens(
                    &pair.path,
                    format!(
                        "unknown key `{}`: `#[outgoing]` takes `name`, the subject the type is published to, like {example}",
                        type_text(&pair.path)
                    ),
                ));
                continue;
            }
            // The subject is a string literal, checked now.
            let Expr::Lit(syn::ExprLit {
                lit: Lit::Str(subject),
                ..
            }) = &pair.value
            else {
                misread = true;
                errors.push(error_at_tokens(
                    &pair.value,
                    format!("the subject is a string literal, like {example}"),
                ));
                continue;
            };
            // One subject per type.
            if name.is_some() {
                errors.push(error_at_tokens(
                    &pair,
                    "the subject is already named: an `Outgoing` type is published to one subject",
                ));
                continue;
            }
            // A message is published to one subject: a valid subject, and no pattern.
            if let Some(problem) = crate::subject::problem(&subject.value()) {
                errors.push(error_at_tokens(subject, problem));
            }
            name = Some(subject.clone());
        }
    }
    // The subject is what the derive is for: it must be named (unless a misread key already
    // said how).
    if name.is_none() && !misread {
        errors.push(error_at(
            ident.span(),
            format!(
                "`Outgoing` needs the subject `{ident}` is published to: add `#[outgoing(name = \"subject\")]` under the derive, like {example}"
            ),
        ));
    }
    let name = errors.finish_with(name)?;
    Ok(Model {
        input,
        name: name.unwrap_or_else(|| LitStr::new("", ident.span())),
    })
}

fn generate(ident: &syn::Ident, input: &DeriveInput, subject: &LitStr) -> TokenStream {
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    quote! {
        #[automatically_derived]
        impl #impl_generics ::ruststream::Outgoing for #ident #ty_generics #where_clause {
            const SUBJECT: &'static str = #subject;
        }
    }
}
