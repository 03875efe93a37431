//! `ZeroPad2d`: pads the last two dimensions with zeros (negative padding crops), composed
//! from `cat` with zero blocks and `narrow`.

use crate::{Forward, ModuleCore, NnError, Result};
use tessera_tensor::Tensor;

/// Pads `(left, right, top, bottom)` zeros around the last two dimensions of an input of
/// rank 3 or 4; a negative amount removes that many rows or columns.
#[derive(crate::Module)]
#[module(name = "ZeroPad2d", extra_repr = "repr_args")]
pub struct ZeroPad2d {
    core: ModuleCore,
    /// `(left, right, top, bottom)`, as PyTorch stores it.
    #[module(skip)]
    pub padding: [isize; 4],
}

impl ZeroPad2d {
    /// The same padding on all four sides (PyTorch's `ZeroPad2d(int)`).
    pub fn new(padding: isize) -> Self {
        Self::with_sides([padding; 4])
    }

    /// `(left, right, top, bottom)`.
    pub fn with_sides(padding: [isize; 4]) -> Self {
        ZeroPad2d {
            core: ModuleCore::default(),
            padding,
        }
    }

    fn repr_args(&self) -> String {
        let [l, r, t, b] = self.padding;
        format!("({l}, {r}, {t}, {b})")
    }
}

/// `x` with `before` and `after` zeros (or fewer elements, when negative) along `dim`.
fn pad_dim(x: &Tensor, dim: usize, before: isize, after: isize) -> Result<Tensor> {
    let size = x.shape()[dim];
    let crop_front = before.min(0).unsigned_abs();
    let crop_back = after.min(0).unsigned_abs();
    let kept = size
        .checked_sub(crop_front)
        .and_then(|s| s.checked_sub(crop_back))
        .ok_or_else(|| {
            NnError::Invalid(format!(
                "ZeroPad2d: padding ({before}, {after}) crops more than dim {dim} of input {:?}",
                x.shape()
            ))
        })?;
    let mut y = x.narrow(dim as isize, crop_front, kept)?;
    let zeros = |n: usize| -> Result<Tensor> {
        let mut shape = y.shape();
        shape[dim] = n;
        Ok(Tensor::zeros(&shape, y.dtype())?)
    };
    if before > 0 || after > 0 {
        let front = zeros(before.max(0) as usize)?;
        let back = zeros(after.max(0) as usize)?;
        y = Tensor::cat(&[&front, &y, &back], dim as isize)?;
    }
    Ok(y)
}

impl Forward for ZeroPad2d {
    type Output = Tensor;
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        let rank = input.ndim();
        if !matches!(rank, 3 | 4) {
            return Err(NnError::Invalid(format!(
                "ZeroPad2d: expected 3D or 4D input, but got input of size {:?}",
                input.shape()
            )));
        }
        let [left, right, top, bottom] = self.padding;
        let padded = pad_dim(&input, rank - 1, left, right)?;
        pad_dim(&padded, rank - 2, top, bottom)
    }
}
