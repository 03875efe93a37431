//! The `Module` methods that every hand-written impl over a `core: ModuleCore` field spells
//! the same way, written once.

/// Expands, inside `impl Module for T`, to `core`, `core_mut`, `as_any` and `as_module` for a
/// type whose `ModuleCore` is its field `core`; the derive writes the same methods itself.
///
/// ```
/// use tessera_nn::{Module, ModuleCore, Visitor};
///
/// struct Empty {
///     core: ModuleCore,
/// }
///
/// impl Module for Empty {
///     tessera_nn::module_core_methods!();
///     fn visit_fields<'a>(&'a self, _visitor: &mut dyn Visitor<'a>) {}
///     fn type_name(&self) -> String {
///         "Empty".into()
///     }
/// }
///
/// let m = Empty { core: ModuleCore::default() };
/// assert_eq!(m.as_module().type_name(), "Empty");
/// ```
#[macro_export]
macro_rules! module_core_methods {
    () => {
        fn core(&self) -> &$crate::ModuleCore {
            &self.core
        }
        fn core_mut(&mut self) -> ::core::option::Option<&mut $crate::ModuleCore> {
            ::core::option::Option::Some(&mut self.core)
        }
        fn as_any(&self) -> &dyn ::core::any::Any {
            self
        }
        fn as_module(&self) -> &dyn $crate::Module {
            self
        }
    };
}
