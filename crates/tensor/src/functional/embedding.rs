//! Embedding lookup.

use crate::op::{EmbeddingOp, Op};
use crate::{Result, Tensor, TensorError};

/// Rows of `weight` (`[num_embeddings, embedding_dim]`) selected by i64/i32 `indices` of any
/// shape, giving `[*indices.shape, embedding_dim]`. The row `padding_idx` (negative counts
/// from the end) receives no gradient.
pub fn embedding(indices: &Tensor, weight: &Tensor, padding_idx: Option<i64>) -> Result<Tensor> {
    let num = weight.shape().first().copied().unwrap_or(0) as i64;
    let padding_idx = match padding_idx {
        None => None,
        Some(p) if (-num..num).contains(&p) => Some(p.rem_euclid(num) as usize),
        Some(p) => {
            return Err(TensorError::invalid(
                "embedding",
                format!("padding_idx {p} is out of range for a table of {num} rows"),
            ));
        }
    };
    Op::Embedding(EmbeddingOp { padding_idx }).apply1(&[weight, indices])
}
