//! placeholder until the macros land
use proc_macro::TokenStream;
#[proc_macro_attribute]
pub fn subscriber(_a: TokenStream, i: TokenStream) -> TokenStream {
    i
}
#[proc_macro_attribute]
pub fn app(_a: TokenStream, i: TokenStream) -> TokenStream {
    i
}
#[proc_macro_derive(Outgoing, attributes(outgoing))]
pub fn outgoing(_i: TokenStream) -> TokenStream {
    TokenStream::new()
}
#[proc_macro_derive(FromRef)]
pub fn from_ref(_i: TokenStream) -> TokenStream {
    TokenStream::new()
}
#[proc_macro]
pub fn nonzero(i: TokenStream) -> TokenStream {
    i
}
