//! The rules of `#[subscriber]`'s arguments: a descriptor first (a Core subject that follows the
//! subject rules, or a descriptor expression; a `JetStreamSubject` names its stream), then
//! optionally `reply`, once, and nothing else.

use proc_macro2::Span;
use syn::{Expr, LitStr};

use crate::diag::{Errors, error_at, error_at_tokens, type_text};
use crate::subscriber::parse::{Args, Descriptor};

/// `reply` is a switch: once is enough.
pub(super) fn check_reply_once(args: &Args, errors: &mut Errors) {
    for extra in args.reply.iter().skip(1) {
        errors.push(error_at(
            *extra,
            "`reply` is written twice: remove this one",
        ));
    }
}

/// Only a descriptor and `reply` mean something.
pub(super) fn check_known_args(args: &Args, errors: &mut Errors) {
    for unknown in &args.unknown {
        let hint = match unknown {
            Expr::Assign(a) if matches!(&*a.left, Expr::Path(p) if p.path.is_ident("name")) => {
                "; to rename the registration, call `.name(\"..\")` where it is mounted"
            }
            Expr::Path(p)
                if p.path
                    .get_ident()
                    .is_some_and(|i| close_to_reply(&i.to_string())) =>
            {
                "; did you mean `reply`?"
            }
            _ => "",
        };
        errors.push(error_at_tokens(
            unknown,
            format!(
                "unknown argument `{}`: `#[subscriber]` takes a descriptor, then optionally `reply`{hint}",
                type_text(unknown)
            ),
        ));
    }
}

/// The descriptor comes first: a Core subject as a string, or a descriptor expression.
pub(super) fn check_descriptor<'a>(args: &'a Args, errors: &mut Errors) -> Option<&'a Descriptor> {
    // Without a descriptor the runtime does not know what to read.
    let Some(descriptor) = &args.descriptor else {
        errors.push(error_at(
            Span::call_site(),
            "`#[subscriber]` needs a descriptor first: a subject like `#[subscriber(\"orders.shipped\")]`, or an expression like `#[subscriber(JetStreamSubject::new(\"payments.authorized\", \"PAYMENTS\"))]`",
        ));
        return None;
    };
    match descriptor {
        Descriptor::Literal(lit) => check_subject_literal(lit, errors),
        Descriptor::Expr(expr) => check_jetstream_stream(expr, errors),
    }
    Some(descriptor)
}

/// A string is one Core subject: it follows the subject rules, and is no pattern.
fn check_subject_literal(lit: &LitStr, errors: &mut Errors) {
    let subject = lit.value();
    if subject.contains(['*', '>']) && !subject.contains(char::is_whitespace) {
        errors.push(error_at_tokens(
            lit,
            format!(
                "`{subject}` is a pattern, and a string descriptor is one subject: read a pattern with `CoreWildcard::new(\"{subject}\")`"
            ),
        ));
    } else if let Some(problem) = crate::subject::problem(&subject) {
        errors.push(error_at_tokens(lit, problem));
    }
}

/// A `JetStreamSubject` reads from a stream, so its constructor names one.
fn check_jetstream_stream(expr: &Expr, errors: &mut Errors) {
    if let Some(call) = jetstream_constructor(expr)
        && call.args.len() < 2
    {
        let subject = call
            .args
            .first()
            .map_or_else(|| "\"subject\"".to_owned(), type_text);
        errors.push(error_at_tokens(
            call,
            format!(
                "a `JetStreamSubject` reads a subject from a stream, and the stream is missing: `JetStreamSubject::new({subject}, \"STREAM\")`"
            ),
        ));
    }
}

/// Whether `word` is a typo of `reply` (one letter changed, added, removed or swapped).
fn close_to_reply(word: &str) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (word.chars().collect(), "reply".chars().collect());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            let next = (row[j + 1] + 1).min(row[j] + 1).min(prev + cost);
            prev = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()] <= 2
}

/// The `JetStreamSubject::new(..)` call at the root of a builder chain, if that is what it is.
fn jetstream_constructor(expr: &Expr) -> Option<&syn::ExprCall> {
    match expr {
        Expr::MethodCall(m) => jetstream_constructor(&m.receiver),
        Expr::Paren(p) => jetstream_constructor(&p.expr),
        Expr::Group(g) => jetstream_constructor(&g.expr),
        Expr::Call(call) => match &*call.func {
            Expr::Path(p) => {
                let segments: Vec<_> = p.path.segments.iter().rev().take(2).collect();
                match segments[..] {
                    [new, ty] if new.ident == "new" && ty.ident == "JetStreamSubject" => Some(call),
                    _ => None,
                }
            }
            _ => None,
        },
        _ => None,
    }
}
