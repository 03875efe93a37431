//! Convolutions (conv1d, conv2d).

use super::{BackwardCtx, OpDef};
use crate::{Result, Tensor, TensorMeta};

/// Convolutions (conv1d, conv2d).
#[derive(Debug, Clone, PartialEq)]
pub enum ConvOp {}

impl OpDef for ConvOp {
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
