//! `Layer`: a module with one tensor in and one tensor out, the kind `Sequential` chains.

use crate::{Forward, Module};
use tessera_tensor::Tensor;

/// A module mapping one tensor to one tensor; every such module is a `Layer`, and
/// `Box<dyn Layer>` holds any of them.
pub trait Layer: Module + Forward<Tensor, Output = Tensor> {}

impl<M: Module + Forward<Tensor, Output = Tensor> + ?Sized> Layer for M {}
