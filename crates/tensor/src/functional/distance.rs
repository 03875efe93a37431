//! Similarity of tensors along a dimension (`cosine_similarity`), composed from elementwise
//! ops and reductions.

use crate::{Result, Tensor};

/// PyTorch's `cosine_similarity`: `sum(x1 / max(|x1|, eps) * x2 / max(|x2|, eps))` along
/// `dim` (negative counts from the end), the inputs broadcast together. PyTorch's default
/// `eps` is 1e-8.
pub fn cosine_similarity(x1: &Tensor, x2: &Tensor, dim: isize, eps: f64) -> Result<Tensor> {
    let unit = |x: &Tensor| -> Result<Tensor> {
        let norm = x.mul(x)?.sum(&[dim], true)?.sqrt()?;
        x.div(&norm.clamp(Some(eps), None)?)
    };
    unit(x1)?.mul(&unit(x2)?)?.sum(&[dim], false)
}
