//! Normalisation (batch, layer and group norm).

use super::{BackwardCtx, OpDef};
use crate::{Result, Tensor, TensorMeta};

/// Normalisation (batch, layer and group norm).
#[derive(Debug, Clone, PartialEq)]
pub enum NormOp {}

impl OpDef for NormOp {
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
