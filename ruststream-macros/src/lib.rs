//! The procedural macros of RustStream. Use them through `ruststream` (or a broker crate's
//! prelude), never as a direct dependency.
//!
//! This file only dispatches: each macro lives in its own module, which parses its input into a
//! typed model, validates it with an error accumulator, and then generates code.
//!
//! The examples below are text: this crate cannot use the runtime its code names. The same code
//! compiles in `docs/app.md`, a doc test of `ruststream-nats`.

#![forbid(unsafe_code)]

use proc_macro::TokenStream;

mod app;
mod diag;
mod from_ref;
mod krate;
mod nonzero;
mod outgoing;
mod subject;
mod subscriber;

/// Turns an `async fn` into a handler that `b.include(..)` mounts.
///
/// ```text
/// #[subscriber("payments.captured")]
/// async fn refresh(captured: &Captured) -> HandlerOutcome {
///     HandlerOutcome::ack()
/// }
///
/// #[subscriber(JetStreamSubject::new("payments.authorized", "PAYMENTS").durable("capture"), reply)]
/// async fn capture(payment: &Payment, State(bank): State<Arc<Bank>>) -> Result<Captured, HandlerOutcome> {
///     bank.capture(payment).await.map_err(|_| HandlerOutcome::retry())?;
///     Ok(Captured { payment: payment.id })
/// }
/// ```
///
/// The first parameter is the payload, `&T` (or `&[T]` for a batch); the others are
/// extractors in any order: `Ctx<K>`, `State<T>`, `&mut Context<'_>`, or any `FromContext`
/// type. Without `reply` the function returns `HandlerOutcome` or `Result<(), HandlerOutcome>`;
/// with `reply` it returns `Result<T, HandlerOutcome>` and `T: Outgoing` is published before the
/// delivery is acknowledged. The guide is `docs/handlers.md`.
///
/// The code it writes reaches the runtime through `ruststream`, or `ruststream_nats` when the
/// package depends on that alone; a crate that re-exports RustStream names the path with
/// `crate = path` (as an argument here and of `#[ruststream::app]`, and as
/// `#[ruststream(crate = path)]` under the derives).
#[proc_macro_attribute]
pub fn subscriber(args: TokenStream, item: TokenStream) -> TokenStream {
    krate::attribute(args.into(), |args| subscriber::expand(args, item.into())).into()
}

/// Writes a `main` for the function it marks: a command line with `run` (the default) and
/// `describe`.
///
/// ```text
/// #[ruststream::app]
/// fn app() -> impl App<State = Clients> {
///     RustStream::new(AppInfo::new("payments", "0.1.0"))
///         .with_broker(NatsBroker::new("nats://localhost:4222"), |b| {
///             b.include(refresh);
///         })
/// }
/// ```
///
/// The function stays callable (tests start `app()` themselves). The guide is `docs/app.md`.
#[proc_macro_attribute]
pub fn app(args: TokenStream, item: TokenStream) -> TokenStream {
    krate::attribute(args.into(), |args| app::expand(args, item.into())).into()
}

/// Implements `Outgoing`: the type knows the subject it is published to.
///
/// ```text
/// #[derive(Serialize, Outgoing)]
/// #[outgoing(name = "payments.captured")]
/// struct Captured {
///     payment: u64,
/// }
/// ```
#[proc_macro_derive(Outgoing, attributes(outgoing, ruststream))]
pub fn outgoing(input: TokenStream) -> TokenStream {
    krate::derive(input.into(), outgoing::expand).into()
}

/// Implements `FromRef<State>` for the type of every field of the app state, so that a handler
/// takes any field as `State<FieldType>`.
///
/// ```text
/// #[derive(Clone, Default, FromRef)]
/// struct Clients {
///     bank: Arc<Bank>,
///     #[from_ref(skip)]
///     secret: String,
/// }
/// ```
#[proc_macro_derive(FromRef, attributes(from_ref, ruststream))]
pub fn from_ref(input: TokenStream) -> TokenStream {
    krate::derive(input.into(), from_ref::expand).into()
}

/// A `NonZero` integer from a literal, checked at compile time; its integer type comes from
/// where it is used.
///
/// ```text
/// let wait = NonZeroDuration::from_secs(nonzero!(60)); // NonZeroU64
/// b.include(refresh).max_attempts(nonzero!(3)); // NonZeroU32
/// ```
#[proc_macro]
pub fn nonzero(input: TokenStream) -> TokenStream {
    nonzero::expand(input.into()).into()
}

/// Generated-code hygiene, as serde_derive's: every impl the macros write says
/// `#[automatically_derived]`, so that lints and coverage treat it as generated code.
#[cfg(test)]
mod hygiene {
    use quote::quote;
    use syn::visit_mut::VisitMut;

    /// Every `impl` in `tokens`, at any depth (`const _: () = { .. }` blocks included), and
    /// whether it says `#[automatically_derived]`.
    fn impls(tokens: proc_macro2::TokenStream) -> Vec<(String, bool)> {
        struct Impls(Vec<(String, bool)>);
        impl VisitMut for Impls {
            fn visit_item_impl_mut(&mut self, item: &mut syn::ItemImpl) {
                let marked = item
                    .attrs
                    .iter()
                    .any(|a| a.path().is_ident("automatically_derived"));
                let name = item
                    .trait_
                    .as_ref()
                    .map_or_else(String::new, |(_, path, _)| quote!(#path).to_string());
                self.0.push((name, marked));
                syn::visit_mut::visit_item_impl_mut(self, item);
            }
        }
        let mut file: syn::File = syn::parse2(tokens).expect("the expansion parses as items");
        let mut found = Impls(Vec::new());
        found.visit_file_mut(&mut file);
        found.0
    }

    fn assert_all_marked(what: &str, tokens: proc_macro2::TokenStream, at_least: usize) {
        let impls = impls(tokens);
        assert!(impls.len() >= at_least, "{what}: {impls:?}");
        for (name, marked) in &impls {
            assert!(
                marked,
                "{what}: `impl {name}` lacks #[automatically_derived]"
            );
        }
    }

    #[test]
    fn every_generated_impl_is_marked() {
        let single = crate::subscriber::expand(
            quote!("payments.authorized", reply),
            quote! {
                async fn capture(
                    payment: &Payment,
                    Ctx(delivered): Ctx<Delivered>,
                    State(bank): State<Bank>,
                ) -> Result<Captured, HandlerOutcome> {
                    bank.capture(payment, delivered).await
                }
            },
        );
        assert_all_marked("#[subscriber]", single, 2);
        let batch = crate::subscriber::expand(
            quote!("readings.stored"),
            quote!(
                async fn store(readings: &[Reading]) -> HandlerOutcome {
                    HandlerOutcome::ack()
                }
            ),
        );
        assert_all_marked("a batch #[subscriber]", batch, 2);
        // A subscriber with an error still expands to a `Mount` impl (never run).
        let wrong = crate::subscriber::expand(
            quote!("payments.authorized"),
            quote!(
                fn capture(payment: &Payment) -> HandlerOutcome {
                    HandlerOutcome::ack()
                }
            ),
        );
        assert_all_marked("a #[subscriber] with an error", wrong, 1);
        let outgoing = crate::outgoing::expand(quote! {
            #[outgoing(name = "orders.{id}.created")]
            struct Created { id: u64 }
        });
        assert_all_marked("#[derive(Outgoing)]", outgoing, 1);
        let from_ref = crate::from_ref::expand(quote! {
            struct Clients { bank: Bank, mail: Mail }
        });
        assert_all_marked("#[derive(FromRef)]", from_ref, 2);
    }
}
