//! `Parameter`: a tensor a module registers as learnable (a leaf that requires grad).

use std::ops::Deref;
use tessera_tensor::Tensor;

/// A learnable tensor. It derefs to its [`Tensor`], a shared handle: optimizers update it in
/// place and every holder sees the new values.
#[derive(Clone)]
pub struct Parameter(Tensor);

impl Parameter {
    /// Wraps `tensor` (sharing its storage) as a leaf that requires grad when it is a float.
    pub fn new(tensor: Tensor) -> Parameter {
        Parameter::with_requires_grad(tensor, true)
    }

    /// Like [`Parameter::new`], with `requires_grad` chosen (PyTorch's `Parameter(t, requires_grad)`).
    pub fn with_requires_grad(tensor: Tensor, requires_grad: bool) -> Parameter {
        let leaf = tensor.detach();
        if requires_grad && leaf.dtype().is_float() {
            leaf.requires_grad_(true)
                .expect("a detached float tensor is a leaf");
        }
        Parameter(leaf)
    }

    pub fn tensor(&self) -> &Tensor {
        &self.0
    }
}

impl Deref for Parameter {
    type Target = Tensor;

    fn deref(&self) -> &Tensor {
        &self.0
    }
}

impl std::fmt::Debug for Parameter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Parameter({:?})", self.0)
    }
}

impl std::fmt::Display for Parameter {
    /// `Parameter containing:` and the tensor, as PyTorch prints parameters.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Parameter containing:\n{}", self.0)
    }
}
