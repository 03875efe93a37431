//! Loss functions (mse, l1, cross_entropy, nll, binary_cross_entropy_with_logits).

use super::{BackwardCtx, OpDef};
use crate::{Result, Tensor, TensorMeta};

/// Loss functions (mse, l1, cross_entropy, nll, binary_cross_entropy_with_logits).
#[derive(Debug, Clone, PartialEq)]
pub enum LossOp {}

impl OpDef for LossOp {
    fn name(&self) -> String {
        match *self {}
    }

    fn meta(&self, _inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>> {
        match *self {}
    }

    fn cpu(&self, _inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        match *self {}
    }

    fn backward(&self, _cx: &BackwardCtx) -> Result<Vec<Option<Tensor>>> {
        match *self {}
    }
}
