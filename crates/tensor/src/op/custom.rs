//! User-defined ops (PyTorch's `autograd.Function`): a forward and a backward written in
//! Rust, recorded by autograd like any other op. Module hooks are built on them.

use super::{BackwardCtx, OpDef};
use crate::{Result, Tensor, TensorMeta};
use std::fmt;
use std::sync::Arc;

/// The forward and backward of a user-defined op.
pub trait CustomFunction: Send + Sync {
    /// The op's name in graphs and errors.
    fn name(&self) -> String;
    /// Output shapes and dtypes for these inputs.
    fn meta(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>>;
    /// Computes the outputs (called with grad mode off for the inputs' graph).
    fn forward(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>>;
    /// Gradients of the inputs from the gradients of the outputs (`None` where nothing
    /// flowed); `inputs` and `outputs` are the values the forward saw and made.
    fn backward(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>>;
}

/// A [`CustomFunction`] as an [`Op`](super::Op) variant; two are equal when they share the
/// same function object.
#[derive(Clone)]
pub struct CustomOp(pub Arc<dyn CustomFunction>);

impl CustomOp {
    pub fn new(function: impl CustomFunction + 'static) -> Self {
        CustomOp(Arc::new(function))
    }
}

impl fmt::Debug for CustomOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CustomOp({})", self.0.name())
    }
}

impl PartialEq for CustomOp {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl OpDef for CustomOp {
    fn name(&self) -> String {
        self.0.name()
    }

    fn meta(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>> {
        self.0.meta(inputs)
    }

    fn cpu(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        let _guard = crate::no_grad();
        self.0.forward(inputs)
    }

    fn backward(&self, cx: &BackwardCtx) -> Result<Vec<Option<Tensor>>> {
        self.0.backward(cx.inputs, cx.outputs, cx.grads)
    }

    fn computes_half_in_f32(&self) -> bool {
        false
    }
}
