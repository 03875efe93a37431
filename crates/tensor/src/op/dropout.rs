//! Dropout.

use super::{BackwardCtx, OpDef};
use crate::{Result, Tensor, TensorMeta};

/// Dropout.
#[derive(Debug, Clone, PartialEq)]
pub enum DropoutOp {}

impl OpDef for DropoutOp {
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
