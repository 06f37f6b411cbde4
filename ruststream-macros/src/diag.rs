//! Diagnostics shared by the macros: an accumulator that reports every error at once, errors
//! that cover the whole of the user's tokens, and spans for generated code.

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::ToTokens;

/// Every error found, reported together. `syn::Error` keeps the first and the last span of the
/// tokens it is about, so the compiler underlines all of them.
///
/// Like serde_derive's `Ctxt`, it must be ended with [`Errors::finish`] or
/// [`Errors::finish_with`]: dropping it unfinished would lose every error it holds, so it panics
/// (a bug in the macro, caught by its tests).
pub struct Errors {
    /// `None` once finished.
    errors: Option<Vec<syn::Error>>,
}

impl Errors {
    /// No errors yet.
    pub fn new() -> Self {
        Self {
            errors: Some(Vec::new()),
        }
    }

    /// Adds one.
    pub fn push(&mut self, error: syn::Error) {
        if let Some(errors) = &mut self.errors {
            errors.push(error);
        }
    }

    /// The value, or `None` after adding the error (of darling, which parses attributes).
    pub fn handle<T>(&mut self, result: darling::Result<T>) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(error) => {
                self.push(error.into());
                None
            }
        }
    }

    /// `Err` with every error, or `Ok(value)` when there is none.
    pub fn finish_with<T>(mut self, value: T) -> syn::Result<T> {
        let errors = self.errors.take().unwrap_or_default();
        let mut errors = errors.into_iter();
        match errors.next() {
            None => Ok(value),
            Some(mut all) => {
                all.extend(errors);
                Err(all)
            }
        }
    }

    /// `Err` with every error, or `Ok(())` when there is none.
    pub fn finish(self) -> syn::Result<()> {
        self.finish_with(())
    }
}

impl Drop for Errors {
    fn drop(&mut self) {
        // Unfinished errors would vanish, and the macro would expand as if the input were right.
        if self.errors.is_some() && !std::thread::panicking() {
            panic!("the macro dropped its errors without reporting them: call `finish`");
        }
    }
}

/// An error covering every token of `tokens` (from the first to the last).
pub fn error_at_tokens(tokens: impl ToTokens, message: impl std::fmt::Display) -> syn::Error {
    syn::Error::new_spanned(tokens, message)
}

/// An error at one span.
pub fn error_at(span: Span, message: impl std::fmt::Display) -> syn::Error {
    syn::Error::new(span, message)
}

/// The span of the first and of the last token of `tokens`: generated tokens spanned from one
/// to the other make the compiler underline the whole of the user's tokens.
pub fn first_last(tokens: &impl ToTokens) -> (Span, Span) {
    let stream: TokenStream = tokens.to_token_stream();
    let first = stream
        .clone()
        .into_iter()
        .next()
        .map_or_else(Span::call_site, |t| open_span(&t));
    let last = stream.into_iter().last().map_or(first, |t| close_span(&t));
    (first, last)
}

fn open_span(tree: &TokenTree) -> Span {
    match tree {
        TokenTree::Group(g) => g.span_open(),
        other => other.span(),
    }
}

fn close_span(tree: &TokenTree) -> Span {
    match tree {
        TokenTree::Group(g) => g.span_close(),
        other => other.span(),
    }
}

/// A type as the user would write it: `Ctx<Delivered>`, not `Ctx < Delivered >`.
pub fn type_text(tokens: &impl ToTokens) -> String {
    let text = tokens.to_token_stream().to_string();
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == ' ' {
            let prev = out.chars().last();
            let next = chars.peek().copied();
            let glue = matches!(prev, Some('<' | '&' | ':' | '(' | '[' | '\''))
                || matches!(next, Some('<' | '>' | ',' | ':' | ')' | ']'));
            let keep = matches!(out.rsplit(' ').next(), Some("mut" | "dyn" | "impl"))
                || prev == Some(',')
                || (prev == Some('>') && next == Some('='));
            if glue && !keep {
                continue;
            }
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::type_text;

    #[test]
    fn finished_errors_are_reported() {
        let mut errors = super::Errors::new();
        errors.push(super::error_at(proc_macro2::Span::call_site(), "first"));
        errors.push(super::error_at(proc_macro2::Span::call_site(), "second"));
        let all = errors.finish().unwrap_err();
        assert_eq!(all.into_iter().count(), 2);
        assert!(super::Errors::new().finish().is_ok());
    }

    #[test]
    #[should_panic(expected = "without reporting them")]
    fn unfinished_errors_panic() {
        let mut errors = super::Errors::new();
        errors.push(super::error_at(proc_macro2::Span::call_site(), "lost"));
        drop(errors);
    }

    #[test]
    fn types_read_as_written() {
        let ty: syn::Type = syn::parse_quote!(&mut Context<'_>);
        assert_eq!(type_text(&ty), "&mut Context<'_>");
        let ty: syn::Type = syn::parse_quote!(State<Arc<Bank>>);
        assert_eq!(type_text(&ty), "State<Arc<Bank>>");
        let ty: syn::Type = syn::parse_quote!(Result<(), ruststream::HandlerOutcome>);
        assert_eq!(type_text(&ty), "Result<(), ruststream::HandlerOutcome>");
        let ty: syn::Type = syn::parse_quote!([Payment]);
        assert_eq!(type_text(&ty), "[Payment]");
    }
}
