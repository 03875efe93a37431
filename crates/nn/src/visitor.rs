//! How a module shows its registered state: a visitor called once per parameter, buffer and
//! child, in registration order.

use crate::{Module, Parameter};
use tessera_tensor::Tensor;

/// Receives a module's own registrations; every method defaults to doing nothing.
pub trait Visitor<'a> {
    /// A parameter slot; `None` for a name registered as `None` (absent from the state dict).
    fn parameter(&mut self, _name: &str, _param: Option<&'a Parameter>) {}
    /// A buffer slot; non-persistent buffers stay out of the state dict.
    fn buffer(&mut self, _name: &str, _buffer: Option<&'a Tensor>, _persistent: bool) {}
    /// A child module.
    fn child(&mut self, _name: &str, _module: &'a dyn Module) {}
}
