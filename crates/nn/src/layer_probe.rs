//! Support for `#[derive(Module)]`'s `as_layer`: a compile-time probe (autoref
//! specialisation) that yields `Some(self)` for types implementing `Forward<Tensor, Output =
//! Tensor>` and `None` for the rest. Not part of the public API.

use crate::Layer;

/// Wraps the module being probed.
pub struct Probe<'a, T: ?Sized>(pub &'a T);

/// Chosen by method resolution when `T` is a [`Layer`] (the receiver needs one fewer autoref).
pub trait ViaLayer<'a> {
    fn probe_layer(self) -> Option<&'a dyn Layer>;
}

impl<'a, T: Layer> ViaLayer<'a> for &&Probe<'a, T> {
    fn probe_layer(self) -> Option<&'a dyn Layer> {
        Some(self.0)
    }
}

/// The fallback for every other module.
pub trait ViaModule<'a> {
    fn probe_layer(self) -> Option<&'a dyn Layer>;
}

impl<'a, T: ?Sized> ViaModule<'a> for &Probe<'a, T> {
    fn probe_layer(self) -> Option<&'a dyn Layer> {
        None
    }
}
