//! Where the generated code finds `tessera-nn`: the path the deriving crate knows it by, so
//! that `#[derive(Module)]` works in a crate that depends on `tessera-nn` (under any name) or
//! only on the `tessera` facade.

use proc_macro_crate::{FoundCrate, crate_name};
use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::Ident;

/// The path of `tessera-nn` as seen from the crate being compiled: `::tessera_nn` (or the
/// name it was renamed to) when that crate depends on `tessera-nn`, `::tessera::nn` (or the
/// facade's renamed name) when it depends on the facade alone. Inside tessera-nn itself,
/// which declares `extern crate self as tessera_nn`, and when no manifest can be read (a
/// build without Cargo), it is `::tessera_nn`.
pub fn nn_path() -> TokenStream {
    match crate_name("tessera-nn") {
        Ok(FoundCrate::Name(name)) => return absolute(&name),
        Ok(FoundCrate::Itself) => return quote!(::tessera_nn),
        Err(_) => {}
    }
    match crate_name("tessera") {
        Ok(FoundCrate::Name(name)) => {
            let facade = absolute(&name);
            quote!(#facade::nn)
        }
        Ok(FoundCrate::Itself) => quote!(crate::nn),
        Err(_) => quote!(::tessera_nn),
    }
}

fn absolute(name: &str) -> TokenStream {
    let ident = Ident::new(name, Span::call_site());
    quote!(::#ident)
}
