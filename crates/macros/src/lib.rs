//! `#[derive(Module)]`: registers a struct's fields as parameters, buffers and children, in
//! declaration order.

use proc_macro::TokenStream;

/// Placeholder until the derive lands.
#[proc_macro_derive(Module, attributes(module))]
pub fn derive_module(_input: TokenStream) -> TokenStream {
    TokenStream::new()
}
