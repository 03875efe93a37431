//! Indexing, joining and splitting (cat, index_select, gather, one_hot, embedding).

use super::{BackwardCtx, OpDef};
use crate::{Result, Tensor, TensorMeta};

/// Indexing, joining and splitting (cat, index_select, gather, one_hot, embedding).
#[derive(Debug, Clone, PartialEq)]
pub enum IndexOp {}

impl OpDef for IndexOp {
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
