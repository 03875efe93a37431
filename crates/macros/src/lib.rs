//! `#[derive(Module)]`: implements `tessera_nn::Module` for a struct by registering its
//! fields in declaration order. Field rules:
//! - the one field of type `ModuleCore` holds the training flag, hooks and run-time state;
//! - `#[module(buffer)]` (or `#[module(buffer, persistent = false)]`) on a `Tensor` or
//!   `Option<Tensor>` field registers a buffer;
//! - `#[module(skip)]` leaves a field out;
//! - every other field goes through `ModuleField`: `Parameter`/`Option<Parameter>` are
//!   parameters, modules (also `Arc<M>`, `Box<dyn Module>`, `Option<M>`) are children, plain
//!   numbers and strings are ignored, and a bare `Tensor` is a compile error.
//!
//! It also implements `tessera_nn::ModuleType`, whose name gives the type its `ModuleKind`.
//!
//! Struct attributes: `#[module(name = "Linear")]` (the repr name and kind), `#[module(extra_repr =
//! "method")]`, `#[module(version = 2)]`, `#[module(get_extra_state = "method",
//! set_extra_state = "method")]`.
//!
//! The generated code names `tessera-nn` by the path the deriving crate knows it by (see
//! [`crate_path`]), so a crate that depends only on the `tessera` facade derives modules too.

mod crate_path;

use proc_macro::TokenStream;
use proc_macro2::TokenStream as Tokens;
use quote::quote;
use syn::{Data, DeriveInput, Fields, LitInt, LitStr, Type, parse_macro_input};

#[proc_macro_derive(Module, attributes(module))]
pub fn derive_module(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match expand(&input) {
        Ok(tokens) => tokens.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

#[derive(Default)]
struct StructOptions {
    name: Option<String>,
    extra_repr: Option<syn::Ident>,
    version: Option<i64>,
    get_extra_state: Option<syn::Ident>,
    set_extra_state: Option<syn::Ident>,
}

enum FieldKind {
    Core,
    Skip,
    Buffer { persistent: bool },
    Field,
}

fn struct_options(input: &DeriveInput) -> syn::Result<StructOptions> {
    let mut options = StructOptions::default();
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("module")) {
        attr.parse_nested_meta(|meta| {
            let ident = |meta: &syn::meta::ParseNestedMeta| -> syn::Result<syn::Ident> {
                let s: LitStr = meta.value()?.parse()?;
                s.parse()
            };
            if meta.path.is_ident("name") {
                options.name = Some(meta.value()?.parse::<LitStr>()?.value());
            } else if meta.path.is_ident("extra_repr") {
                options.extra_repr = Some(ident(&meta)?);
            } else if meta.path.is_ident("version") {
                options.version = Some(meta.value()?.parse::<LitInt>()?.base10_parse()?);
            } else if meta.path.is_ident("get_extra_state") {
                options.get_extra_state = Some(ident(&meta)?);
            } else if meta.path.is_ident("set_extra_state") {
                options.set_extra_state = Some(ident(&meta)?);
            } else {
                return Err(meta.error(
                    "expected name, extra_repr, version, get_extra_state or set_extra_state",
                ));
            }
            Ok(())
        })?;
    }
    Ok(options)
}

fn is_core(ty: &Type) -> bool {
    matches!(ty, Type::Path(p) if p.path.segments.last().is_some_and(|s| s.ident == "ModuleCore"))
}

fn field_kind(field: &syn::Field) -> syn::Result<FieldKind> {
    let mut kind = if is_core(&field.ty) {
        FieldKind::Core
    } else {
        FieldKind::Field
    };
    for attr in field.attrs.iter().filter(|a| a.path().is_ident("module")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("skip") {
                kind = FieldKind::Skip;
            } else if meta.path.is_ident("buffer") {
                kind = FieldKind::Buffer { persistent: true };
            } else if meta.path.is_ident("persistent") {
                let value: syn::LitBool = meta.value()?.parse()?;
                match &mut kind {
                    FieldKind::Buffer { persistent } => *persistent = value.value,
                    _ => return Err(meta.error(
                        "`persistent` goes with `buffer`: #[module(buffer, persistent = false)]",
                    )),
                }
            } else {
                return Err(meta.error("expected skip, buffer or persistent"));
            }
            Ok(())
        })?;
    }
    Ok(kind)
}

fn expand(input: &DeriveInput) -> syn::Result<Tokens> {
    let Data::Struct(data) = &input.data else {
        return Err(syn::Error::new_spanned(
            input,
            "#[derive(Module)] needs a struct with named fields",
        ));
    };
    let Fields::Named(fields) = &data.fields else {
        return Err(syn::Error::new_spanned(
            input,
            "#[derive(Module)] needs a struct with named fields",
        ));
    };
    let options = struct_options(input)?;
    let nn = crate_path::nn_path();
    let mut core = None;
    let mut visits = Vec::new();
    for field in &fields.named {
        let ident = field.ident.as_ref().expect("named field");
        // `r#final` registers as `final`, as the attribute would be named in PyTorch.
        let name = syn::ext::IdentExt::unraw(ident).to_string();
        match field_kind(field)? {
            FieldKind::Core => {
                if core.replace(ident.clone()).is_some() {
                    return Err(syn::Error::new_spanned(field, "a module has exactly one ModuleCore field"));
                }
            }
            FieldKind::Skip => {}
            FieldKind::Buffer { persistent } => {
                visits.push(quote! { #nn::BufferField::visit_buffer(&self.#ident, #name, #persistent, visitor); })
            }
            FieldKind::Field => visits.push(quote! { #nn::ModuleField::visit_field(&self.#ident, #name, visitor); }),
        }
    }
    let Some(core) = core else {
        return Err(syn::Error::new_spanned(
            &input.ident,
            "a module needs a field of type `tessera_nn::ModuleCore` (construct it with `ModuleCore::default()`)",
        ));
    };
    let ty = &input.ident;
    let type_name = options.name.unwrap_or_else(|| ty.to_string());
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    let extra_repr = options
        .extra_repr
        .map(|m| quote! { fn extra_repr(&self) -> String { self.#m() } });
    let version = options
        .version
        .map(|v| quote! { fn version(&self) -> i64 { #v } });
    let get_extra = options
        .get_extra_state
        .map(|m| quote! { fn get_extra_state(&self) -> ::std::option::Option<#nn::Value> { ::std::option::Option::Some(self.#m()) } });
    let set_extra = options.set_extra_state.map(|m| {
        quote! { fn set_extra_state(&self, state: &#nn::Value) -> #nn::Result<()> { self.#m(state) } }
    });
    Ok(quote! {
        impl #impl_generics #nn::Module for #ty #ty_generics #where_clause {
            fn core(&self) -> &#nn::ModuleCore {
                &self.#core
            }
            fn core_mut(&mut self) -> ::std::option::Option<&mut #nn::ModuleCore> {
                ::std::option::Option::Some(&mut self.#core)
            }
            fn visit_fields<'a>(&'a self, visitor: &mut dyn #nn::Visitor<'a>) {
                #(#visits)*
            }
            fn type_name(&self) -> ::std::string::String {
                #type_name.to_string()
            }
            fn as_any(&self) -> &dyn ::std::any::Any {
                self
            }
            fn as_module(&self) -> &dyn #nn::Module {
                self
            }
            fn as_layer(&self) -> ::std::option::Option<&dyn #nn::Layer> {
                #[allow(unused_imports)]
                use #nn::layer_probe::{ViaLayer as _, ViaModule as _};
                (&&#nn::layer_probe::Probe(self)).probe_layer()
            }
            #extra_repr
            #version
            #get_extra
            #set_extra
        }
        impl #impl_generics #nn::ModuleType for #ty #ty_generics #where_clause {
            const NAME: &'static str = #type_name;
        }
    })
}
