//! Which path the generated code names the runtime by.
//!
//! The code is written against `::ruststream`; [`retarget`] then swaps that root for the path
//! the user's crate actually has: `crate = path` when written, else `ruststream` as the
//! package's `Cargo.toml` names it (renamed or not), else the copy `ruststream-nats` re-exports
//! (`::ruststream_nats::ruststream`), so that a service depending only on `ruststream-nats`
//! compiles too.

use proc_macro_crate::{FoundCrate, crate_name};
use proc_macro2::{Group, Ident, Span, TokenStream, TokenTree};
use quote::{ToTokens, quote};

/// The runtime's path for this expansion: `explicit` (from `crate = path`), or found in the
/// package's dependencies. `Err` when neither crate is a dependency.
pub fn runtime(explicit: Option<&syn::Path>) -> syn::Result<TokenStream> {
    if let Some(path) = explicit {
        return Ok(path.to_token_stream());
    }
    match crate_name("ruststream") {
        // The package is `ruststream` itself: its tests and doctests link it by its name.
        Ok(FoundCrate::Itself) => return Ok(quote!(::ruststream)),
        Ok(FoundCrate::Name(name)) => {
            let name = Ident::new(&name, Span::call_site());
            return Ok(quote!(::#name));
        }
        Err(_) => {}
    }
    match crate_name("ruststream-nats") {
        // `ruststream-nats` depends on `ruststream`, so this is not reached from it; if it is,
        // its own dependency is the path.
        Ok(FoundCrate::Itself) => Ok(quote!(::ruststream)),
        Ok(FoundCrate::Name(name)) => {
            let name = Ident::new(&name, Span::call_site());
            Ok(quote!(::#name::ruststream))
        }
        // Neither is a dependency: say what to add.
        Err(proc_macro_crate::Error::CrateNotFound { path, .. }) => Err(syn::Error::new(
            Span::call_site(),
            format!(
                "the RustStream macros need `ruststream` or `ruststream-nats` among the dependencies of this package, and `{}` has neither: add `ruststream-nats` (which brings `ruststream`) under `[dependencies]`, or, from a crate that re-exports it, name the path with `crate = path::to::ruststream`",
                path.display()
            ),
        )),
        // No manifest to read (a build without Cargo): the path the docs ask for.
        Err(_) => Ok(quote!(::ruststream)),
    }
}

/// An attribute macro's expansion: a `crate = path` argument is taken out of `args` (the others
/// go to `expand` as written), and the code `expand` writes is rooted at the runtime's path.
pub fn attribute(
    args: TokenStream,
    expand: impl FnOnce(TokenStream) -> TokenStream,
) -> TokenStream {
    let (explicit, rest) = split_crate_arg(args.clone());
    // Without `crate = ..`, the arguments go on as written, spans and all.
    let rest = if explicit.is_some() { rest } else { args };
    let explicit = match explicit {
        Some(Ok(path)) => Some(path),
        Some(Err(err)) => return combine(Err(err), expand(rest)),
        None => None,
    };
    combine(runtime(explicit.as_ref()), expand(rest))
}

/// A derive's expansion: `#[ruststream(crate = path)]` on the type names the runtime's path.
pub fn derive(input: TokenStream, expand: impl FnOnce(TokenStream) -> TokenStream) -> TokenStream {
    let explicit = match syn::parse2::<syn::DeriveInput>(input.clone()) {
        Ok(parsed) => crate_attr(&parsed.attrs),
        Err(_) => Ok(None),
    };
    match explicit {
        Ok(explicit) => combine(runtime(explicit.as_ref()), expand(input)),
        Err(err) => combine(Err(err), expand(input)),
    }
}

/// The expansion rooted at `runtime`, or with the error that found none (then rooted at
/// `::ruststream`, so that nothing else is reported).
fn combine(runtime: syn::Result<TokenStream>, expansion: TokenStream) -> TokenStream {
    match runtime {
        Ok(runtime) => retarget(expansion, &runtime),
        Err(err) => {
            let err = err.to_compile_error();
            quote!(#err #expansion)
        }
    }
}

/// `crate = path` among comma-separated arguments, and the other arguments as written.
fn split_crate_arg(args: TokenStream) -> (Option<syn::Result<syn::Path>>, TokenStream) {
    let mut pieces: Vec<Vec<TokenTree>> = vec![Vec::new()];
    for tree in args {
        match &tree {
            TokenTree::Punct(p) if p.as_char() == ',' => pieces.push(Vec::new()),
            _ => pieces.last_mut().map_or((), |piece| piece.push(tree)),
        }
    }
    let mut found = None;
    let mut rest: Vec<TokenStream> = Vec::new();
    for piece in pieces {
        let is_crate = matches!(&piece[..], [TokenTree::Ident(k), TokenTree::Punct(eq), ..]
            if k == "crate" && eq.as_char() == '=');
        if is_crate && found.is_none() {
            let path: TokenStream = piece[2..].iter().cloned().collect();
            // `crate = path` or `crate = "path"`, as serde writes it.
            let parsed = match syn::parse2::<syn::LitStr>(path.clone()) {
                Ok(lit) => lit.parse::<syn::Path>(),
                Err(_) => syn::parse2::<syn::Path>(path.clone()),
            };
            found = Some(parsed.map_err(|_| {
                syn::Error::new_spanned(
                    &path,
                    "`crate = ..` takes the path the runtime is reached by, like `crate = my_platform::ruststream`",
                )
            }));
        } else if !piece.is_empty() {
            rest.push(piece.into_iter().collect());
        }
    }
    (found, quote!(#(#rest),*))
}

/// `#[ruststream(crate = path)]` among a type's attributes.
fn crate_attr(attrs: &[syn::Attribute]) -> syn::Result<Option<syn::Path>> {
    let mut found = None;
    for attr in attrs.iter().filter(|a| a.path().is_ident("ruststream")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("crate") {
                let value = meta.value()?;
                let path = if value.peek(syn::LitStr) {
                    value.parse::<syn::LitStr>()?.parse::<syn::Path>()?
                } else {
                    value.parse::<syn::Path>()?
                };
                found = Some(path);
                Ok(())
            } else {
                Err(meta.error(
                    "`#[ruststream(..)]` takes `crate = path`, the path the runtime is reached by",
                ))
            }
        })?;
    }
    Ok(found)
}

/// `tokens` with every path rooted at `::ruststream` rooted at `runtime` instead.
pub fn retarget(tokens: TokenStream, runtime: &TokenStream) -> TokenStream {
    if runtime.to_string() == quote!(::ruststream).to_string() {
        return tokens;
    }
    let trees: Vec<TokenTree> = tokens.into_iter().collect();
    let mut out = Vec::with_capacity(trees.len());
    let mut i = 0;
    while i < trees.len() {
        // `::ruststream` at the start of a path: not after a path segment (`a::ruststream` is
        // another path), but after a keyword, a punctuation or nothing.
        if let [
            TokenTree::Punct(a),
            TokenTree::Punct(b),
            TokenTree::Ident(name),
            ..,
        ] = &trees[i..]
            && a.as_char() == ':'
            && a.spacing() == proc_macro2::Spacing::Joint
            && b.as_char() == ':'
            && name == "ruststream"
            && !matches!(out.last(), Some(TokenTree::Ident(prev)) if !is_keyword(prev))
        {
            out.extend(respanned(runtime, name.span()));
            i += 3;
            continue;
        }
        match &trees[i] {
            TokenTree::Group(g) => {
                let mut group = Group::new(g.delimiter(), retarget(g.stream(), runtime));
                group.set_span(g.span());
                out.push(TokenTree::Group(group));
            }
            other => out.push(other.clone()),
        }
        i += 1;
    }
    out.into_iter().collect()
}

/// `tokens` spanned at `span` (groups keep their delimiters).
fn respanned(tokens: &TokenStream, span: Span) -> Vec<TokenTree> {
    tokens
        .clone()
        .into_iter()
        .map(|tree| match tree {
            TokenTree::Group(g) => {
                let mut group = Group::new(g.delimiter(), g.stream());
                group.set_span(span);
                TokenTree::Group(group)
            }
            mut other => {
                other.set_span(span);
                other
            }
        })
        .collect()
}

/// Whether `ident` is a keyword a path can follow (`as ::ruststream::X`, `impl ::ruststream::X`).
fn is_keyword(ident: &Ident) -> bool {
    const KEYWORDS: &[&str] = &[
        "as", "async", "break", "const", "dyn", "else", "fn", "for", "if", "impl", "in", "let",
        "loop", "match", "move", "mut", "pub", "ref", "return", "static", "type", "unsafe", "use",
        "where", "while", "yield",
    ];
    KEYWORDS.contains(&ident.to_string().as_str())
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::retarget;

    #[test]
    fn path_roots_move_and_other_paths_stay() {
        let runtime = quote!(::ruststream_nats::ruststream);
        let code = quote! {
            impl<S> ::ruststream::Mount<S, ()> for x where T: ::ruststream::FromContext<S> {
                fn f() -> Vec<::ruststream::Registration> {
                    a::ruststream::b(<T as ::ruststream::X>::Y)
                }
            }
        };
        let out = retarget(code, &runtime).to_string();
        assert_eq!(
            out.matches(":: ruststream_nats :: ruststream ::").count(),
            4,
            "{out}"
        );
        assert!(out.contains("a :: ruststream :: b"), "{out}");
    }

    #[test]
    fn a_crate_argument_is_taken_out_and_the_others_stay() {
        let (krate, rest) = super::split_crate_arg(quote!("orders.created", crate = my::rs, reply));
        let krate = krate.map(|k| k.map(|p| quote!(#p).to_string()).ok());
        assert_eq!(krate, Some(Some("my :: rs".to_owned())));
        assert_eq!(
            rest.to_string(),
            quote!("orders.created", reply).to_string()
        );

        let (krate, rest) = super::split_crate_arg(quote!(crate = "my::rs"));
        assert!(matches!(krate, Some(Ok(_))));
        assert!(rest.is_empty());

        let (krate, _) = super::split_crate_arg(quote!("a", crate = 5));
        assert!(matches!(krate, Some(Err(_))));
    }

    #[test]
    fn the_default_path_changes_nothing() {
        let code = quote!(::ruststream::Mount);
        assert_eq!(
            retarget(code.clone(), &quote!(::ruststream)).to_string(),
            code.to_string()
        );
    }
}
