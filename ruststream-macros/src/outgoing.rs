//! `#[derive(Outgoing)]` with `#[outgoing(name = "subject")]`: the type knows where it is
//! published, and with `codec = ..` the format it is published in.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{DeriveInput, Expr, Lit, LitStr, MetaNameValue, Token};

use crate::diag::{Errors, error_at, error_at_tokens, type_text};

/// What the derive needs from the type and its `#[outgoing(..)]`.
struct Model<'a> {
    input: &'a DeriveInput,
    /// The subject the type is published to.
    name: LitStr,
    /// The fields a subject template fills, in the order of their placeholders.
    fields: Vec<syn::Ident>,
    /// `codec = EXPR`: the format the type is always published in.
    codec: Option<Expr>,
}

/// The derive's expansion.
pub fn expand(input: TokenStream) -> TokenStream {
    let input: DeriveInput = match syn::parse2(input) {
        Ok(input) => input,
        Err(err) => return err.to_compile_error(),
    };
    match check(&input) {
        Ok(model) => generate(&model),
        Err(errors) => {
            // The fallback impl keeps uses of the type from adding errors of their own.
            let errors = errors.to_compile_error();
            let fallback = generate(&Model {
                input: &input,
                name: LitStr::new("", proc_macro2::Span::call_site()),
                fields: Vec::new(),
                codec: None,
            });
            quote!(#errors #fallback)
        }
    }
}

fn check(input: &DeriveInput) -> syn::Result<Model<'_>> {
    let mut errors = Errors::new();
    let ident = &input.ident;
    let example = "`#[outgoing(name = \"orders.created\")]`";
    let mut name: Option<LitStr> = None;
    let mut codec: Option<Expr> = None;
    let mut fields = Vec::new();
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
            // `codec` names the format the type is always published in: any expression of
            // type `Format`, checked by the compiler at its span.
            if pair.path.is_ident("codec") {
                if codec.is_some() {
                    errors.push(error_at_tokens(
                        &pair,
                        "the codec is already named: an `Outgoing` type is published in one format",
                    ));
                } else {
                    codec = Some(pair.value.clone());
                }
                continue;
            }
            // Otherwise the setting is `name`: the subject.
            if !pair.path.is_ident("name") {
                misread = true;
                errors.push(error_at_tokens(
                    &pair.path,
                    format!(
                        "unknown key `{}`: `#[outgoing]` takes `name`, the subject the type is published to, like {example}, and `codec`, the format it is published in, like `codec = Format::Cbor`",
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
            // A template's placeholders each fill a whole token from a field.
            match template_fields(input, subject) {
                Ok(found) => fields = found,
                Err(err) => {
                    errors.push(err);
                    name = Some(subject.clone());
                    continue;
                }
            }
            // A message is published to one subject: a valid subject, and no pattern.
            if let Some(problem) = crate::subject::problem(&filled_for_check(&subject.value())) {
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
        fields,
        codec,
    })
}

/// The template with each placeholder token as a plain token, for the subject check.
fn filled_for_check(template: &str) -> String {
    template
        .split('.')
        .map(|token| {
            if token.starts_with('{') && token.ends_with('}') {
                "x"
            } else {
                token
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// The fields the placeholders of `subject` name, in order; an error at the subject when a
/// placeholder is not a whole token or names no field.
fn template_fields(input: &DeriveInput, subject: &LitStr) -> syn::Result<Vec<syn::Ident>> {
    let template = subject.value();
    if !template.contains(['{', '}']) {
        return Ok(Vec::new());
    }
    let named: Vec<&syn::Ident> = match &input.data {
        syn::Data::Struct(data) => data
            .fields
            .iter()
            .filter_map(|f| f.ident.as_ref())
            .collect(),
        _ => Vec::new(),
    };
    let mut fields = Vec::new();
    for token in template.split('.') {
        if !token.contains(['{', '}']) {
            continue;
        }
        let inner = token
            .strip_prefix('{')
            .and_then(|t| t.strip_suffix('}'))
            .filter(|t| !t.contains(['{', '}']) && !t.is_empty());
        let Some(field) = inner else {
            return Err(error_at_tokens(
                subject,
                format!(
                    "`{token}` is not a placeholder: a placeholder fills a whole token of the subject with a field, like `orders.{{tenant}}.placed`"
                ),
            ));
        };
        let Some(ident) = named.iter().find(|i| **i == field) else {
            let known: Vec<String> = named.iter().map(ToString::to_string).collect();
            let known = if known.is_empty() {
                format!("`{}` has no named fields", input.ident)
            } else {
                format!("its fields: {}", known.join(", "))
            };
            return Err(error_at_tokens(
                subject,
                format!(
                    "`{{{field}}}` names no field of `{}` ({known}); a placeholder is filled from the field of that name",
                    input.ident
                ),
            ));
        };
        fields.push((*ident).clone());
    }
    Ok(fields)
}

fn generate(model: &Model<'_>) -> TokenStream {
    let Model {
        input,
        name: subject,
        fields,
        codec,
    } = model;
    let ident = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    // The codec's expression is checked to be a `Format` at its own span: a wrong value is
    // reported there, with the fix.
    let codec = codec.as_ref().map(|codec| {
        let format = quote_spanned! {codec.span()=>
            ::ruststream::__private::outgoing_codec(#codec)
        };
        quote! {
            fn codec() -> ::core::option::Option<::ruststream::codec::Format> {
                ::core::option::Option::Some(#format)
            }
        }
    });
    // A template is filled from the fields, each value checked to be one token.
    let fill = (!fields.is_empty()).then(|| {
        let names = fields.iter().map(ToString::to_string);
        quote! {
            fn subject(
                &self,
            ) -> ::core::result::Result<
                ::std::borrow::Cow<'_, str>,
                ::ruststream::PublishError,
            > {
                ::ruststream::__private::fill_subject(
                    <Self as ::ruststream::Outgoing>::SUBJECT,
                    &[#((#names, &self.#fields as &dyn ::core::fmt::Display)),*],
                )
                .map(::std::borrow::Cow::Owned)
            }
        }
    });
    quote! {
        #[automatically_derived]
        impl #impl_generics ::ruststream::Outgoing for #ident #ty_generics #where_clause {
            const SUBJECT: &'static str = #subject;
            #fill
            #codec
            fn schema() -> ::core::option::Option<::ruststream::__private::serde_json::Value> {
                #[allow(unused_imports)]
                use ::ruststream::__private::{
                    SchemaFromDeserialize as _, SchemaFromJsonSchema as _, SchemaUnknown as _,
                };
                (&&&::ruststream::__private::SchemaProbe::<Self>::new()).schema()
            }
        }
    }
}
