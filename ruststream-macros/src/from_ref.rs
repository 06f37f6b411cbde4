//! `#[derive(FromRef)]` on the app state: `impl FromRef<State> for FieldType` for every field,
//! so that a handler takes any field as `State<FieldType>`.

use darling::FromField;
use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::{Data, DeriveInput, Fields};

use crate::diag::{Errors, error_at, error_at_tokens, first_last, type_text};

/// One field and what `#[from_ref(..)]` says about it.
#[derive(FromField)]
#[darling(attributes(from_ref))]
struct Field {
    ident: Option<syn::Ident>,
    ty: syn::Type,
    /// No `FromRef` impl for this field.
    #[darling(default)]
    skip: bool,
}

/// The derive's expansion.
pub fn expand(input: TokenStream) -> TokenStream {
    let input: DeriveInput = match syn::parse2(input) {
        Ok(input) => input,
        Err(err) => return err.to_compile_error(),
    };
    let (fields, errors) = check(&input);
    let name = &input.ident;
    let impls = fields.iter().map(|field| {
        let ty = &field.ty;
        let ident = &field.ident;
        // Spanned over the field's type: a part that is not `Clone` is reported there.
        let (first, last) = first_last(ty);
        let clone = quote_spanned!(first=> ::core::clone::Clone::clone);
        let arg = quote_spanned!(last=> (&state.#ident));
        // Spanned at the field's type: an error that shows this impl quotes the field.
        quote_spanned! {first=>
            #[automatically_derived]
            impl ::ruststream::FromRef<#name> for #ty {
                fn from_ref(state: &#name) -> Self {
                    #clone #arg
                }
            }
        }
    });
    let errors = errors.map(|e| e.to_compile_error());
    quote! {
        #errors
        #(#impls)*
    }
}

/// The fields that get an impl, and every error found.
fn check(input: &DeriveInput) -> (Vec<Field>, Option<syn::Error>) {
    let mut errors = Errors::new();
    let name = &input.ident;
    // A handler names a part by its type, found through a field's name.
    let fields = match &input.data {
        Data::Struct(s) => match &s.fields {
            Fields::Named(named) => named.named.iter().collect::<Vec<_>>(),
            Fields::Unnamed(unnamed) => {
                errors.push(error_at_tokens(
                    unnamed,
                    format!(
                        "`FromRef` takes the parts of a struct with named fields: write `struct {name} {{ bank: Arc<Bank> }}`"
                    ),
                ));
                Vec::new()
            }
            Fields::Unit => {
                errors.push(error_at(
                    name.span(),
                    format!(
                        "`{name}` has no fields, so no part to take: give it named fields, or take the whole state as `State<{name}>`, which needs no derive"
                    ),
                ));
                Vec::new()
            }
        },
        Data::Enum(e) => {
            errors.push(error_at_tokens(
                e.enum_token,
                "`FromRef` takes the fields of a struct; an enum has no fields every value shares: make the state a struct with named fields",
            ));
            Vec::new()
        }
        Data::Union(u) => {
            errors.push(error_at_tokens(
                u.union_token,
                "`FromRef` takes the fields of a struct, not of a union: make the state a struct with named fields",
            ));
            Vec::new()
        }
    };
    // The state is shared by every handler for the whole run: it is `'static` and concrete.
    if !input.generics.params.is_empty() {
        errors.push(error_at_tokens(
            &input.generics,
            "`FromRef` cannot be derived for a generic state: name the field types, or implement `FromRef<State>` by hand",
        ));
    }

    let mut kept: Vec<Field> = Vec::new();
    for field in fields {
        let Some(field) = errors.handle(Field::from_field(field)) else {
            continue;
        };
        if field.skip {
            continue;
        }
        // `State<T>` finds a part by its type: two fields of one type would be ambiguous.
        let text = type_text(&field.ty);
        if let Some(first) = kept.iter().find(|k| type_text(&k.ty) == text) {
            let first = first
                .ident
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default();
            let this = field
                .ident
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default();
            errors.push(error_at_tokens(
                &field.ty,
                format!(
                    "`{first}` and `{this}` have the same type, so `State<{text}>` could not tell them apart: wrap one in a newtype, or mark it `#[from_ref(skip)]`"
                ),
            ));
            continue;
        }
        kept.push(field);
    }
    (kept, errors.finish().err())
}
