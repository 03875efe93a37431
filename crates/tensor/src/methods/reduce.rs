//! Reductions, softmax and the backward entry point.

use crate::layout::normalize_dim;
use crate::op::{Op, ReduceKind, ReduceOp};
use crate::{Result, Tensor};

impl Tensor {
    fn reduce(&self, kind: ReduceKind, dims: &[usize], keepdim: bool) -> Result<Vec<Tensor>> {
        let mut dims = dims.to_vec();
        dims.sort_unstable();
        dims.dedup();
        Op::Reduce(ReduceOp {
            kind,
            dims,
            keepdim,
        })
        .apply(&[self])
    }

    fn all_dims(&self) -> Vec<usize> {
        (0..self.ndim()).collect()
    }

    fn dims_of(&self, op: &str, dims: &[isize]) -> Result<Vec<usize>> {
        dims.iter()
            .map(|&d| normalize_dim(op, d, self.ndim()))
            .collect()
    }

    fn dim_of(&self, op: &str, dim: isize) -> Result<Vec<usize>> {
        if self.ndim() == 0 {
            normalize_dim(op, dim, 0).map(|_| vec![])
        } else {
            Ok(vec![normalize_dim(op, dim, self.ndim())?])
        }
    }

    /// Sum of all elements (0-dim).
    pub fn sum_all(&self) -> Result<Tensor> {
        Ok(self
            .reduce(ReduceKind::Sum, &self.all_dims(), false)?
            .remove(0))
    }

    /// Sum over `dims` (already non-negative).
    pub fn sum_dims(&self, dims: &[usize], keepdim: bool) -> Result<Tensor> {
        Ok(self.reduce(ReduceKind::Sum, dims, keepdim)?.remove(0))
    }

    /// Sum over `dims` (negative counts from the end).
    pub fn sum(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        self.sum_dims(&self.dims_of("sum", dims)?, keepdim)
    }

    pub fn mean_all(&self) -> Result<Tensor> {
        Ok(self
            .reduce(ReduceKind::Mean, &self.all_dims(), false)?
            .remove(0))
    }

    pub fn mean_dims(&self, dims: &[usize], keepdim: bool) -> Result<Tensor> {
        Ok(self.reduce(ReduceKind::Mean, dims, keepdim)?.remove(0))
    }

    pub fn mean(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        self.mean_dims(&self.dims_of("mean", dims)?, keepdim)
    }

    /// Largest element (0-dim).
    pub fn max_all(&self) -> Result<Tensor> {
        Ok(self
            .reduce(ReduceKind::Amax, &self.all_dims(), false)?
            .remove(0))
    }

    /// Smallest element (0-dim).
    pub fn min_all(&self) -> Result<Tensor> {
        Ok(self
            .reduce(ReduceKind::Amin, &self.all_dims(), false)?
            .remove(0))
    }

    /// Largest values over `dims`; ties share the gradient evenly.
    pub fn amax(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        Ok(self
            .reduce(ReduceKind::Amax, &self.dims_of("amax", dims)?, keepdim)?
            .remove(0))
    }

    pub fn amin(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        Ok(self
            .reduce(ReduceKind::Amin, &self.dims_of("amin", dims)?, keepdim)?
            .remove(0))
    }

    /// Largest values along `dim` and their indices (i64), as `torch.max(x, dim)`.
    pub fn max_dim(&self, dim: isize, keepdim: bool) -> Result<(Tensor, Tensor)> {
        let mut out = self.reduce(
            ReduceKind::MaxWithIndices,
            &self.dim_of("max", dim)?,
            keepdim,
        )?;
        let indices = out.pop().expect("two outputs");
        Ok((out.pop().expect("two outputs"), indices))
    }

    /// Smallest values along `dim` and their indices (i64).
    pub fn min_dim(&self, dim: isize, keepdim: bool) -> Result<(Tensor, Tensor)> {
        let mut out = self.reduce(
            ReduceKind::MinWithIndices,
            &self.dim_of("min", dim)?,
            keepdim,
        )?;
        let indices = out.pop().expect("two outputs");
        Ok((out.pop().expect("two outputs"), indices))
    }

    /// Index of the largest element along `dim`, or of the flattened tensor when `None`.
    pub fn argmax(&self, dim: Option<isize>, keepdim: bool) -> Result<Tensor> {
        match dim {
            Some(d) => Ok(self
                .reduce(ReduceKind::ArgMax, &self.dim_of("argmax", d)?, keepdim)?
                .remove(0)),
            None => Ok(self
                .reshape(&[self.numel()])?
                .reduce(ReduceKind::ArgMax, &[0], false)?
                .remove(0)),
        }
    }

    pub fn argmin(&self, dim: Option<isize>, keepdim: bool) -> Result<Tensor> {
        match dim {
            Some(d) => Ok(self
                .reduce(ReduceKind::ArgMin, &self.dim_of("argmin", d)?, keepdim)?
                .remove(0)),
            None => Ok(self
                .reshape(&[self.numel()])?
                .reduce(ReduceKind::ArgMin, &[0], false)?
                .remove(0)),
        }
    }

    /// Variance over `dims` (all when empty); `unbiased` divides by `n - 1`.
    pub fn var(&self, dims: &[isize], unbiased: bool, keepdim: bool) -> Result<Tensor> {
        let dims = if dims.is_empty() {
            self.all_dims()
        } else {
            self.dims_of("var", dims)?
        };
        Ok(self
            .reduce(
                ReduceKind::Var {
                    correction: unbiased as usize,
                },
                &dims,
                keepdim,
            )?
            .remove(0))
    }

    /// Standard deviation over `dims` (all when empty).
    pub fn std(&self, dims: &[isize], unbiased: bool, keepdim: bool) -> Result<Tensor> {
        let dims = if dims.is_empty() {
            self.all_dims()
        } else {
            self.dims_of("std", dims)?
        };
        Ok(self
            .reduce(
                ReduceKind::Std {
                    correction: unbiased as usize,
                },
                &dims,
                keepdim,
            )?
            .remove(0))
    }

    /// `log(sum(exp(x)))` over `dims`, computed stably.
    pub fn logsumexp(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        Ok(self
            .reduce(
                ReduceKind::LogSumExp,
                &self.dims_of("logsumexp", dims)?,
                keepdim,
            )?
            .remove(0))
    }

    pub fn softmax(&self, dim: isize) -> Result<Tensor> {
        let dim = normalize_dim("softmax", dim, self.ndim())?;
        Op::Softmax { dim, log: false }.apply1(&[self])
    }

    pub fn log_softmax(&self, dim: isize) -> Result<Tensor> {
        let dim = normalize_dim("log_softmax", dim, self.ndim())?;
        Op::Softmax { dim, log: true }.apply1(&[self])
    }

    /// Sums a broadcast result back to `shape` (leading dims, and dims where `shape` has 1).
    pub fn sum_to_shape(&self, shape: &[usize]) -> Result<Tensor> {
        let own = self.shape();
        if own == shape {
            return Ok(self.clone());
        }
        let lead = own.len().checked_sub(shape.len()).ok_or_else(|| {
            crate::TensorError::shapes("sum_to_shape", &own, shape, "target has more dimensions")
        })?;
        let dims: Vec<usize> = (0..own.len())
            .filter(|&d| d < lead || (shape[d - lead] == 1 && own[d] != 1))
            .collect();
        let summed = if dims.is_empty() {
            self.clone()
        } else {
            self.sum_dims(&dims, true)?
        };
        summed.reshape(shape)
    }

    /// Back-propagates from this scalar into every leaf that requires a gradient.
    pub fn backward(&self) -> Result<()> {
        crate::autograd::backward(self, None, false)
    }

    /// Back-propagates `gradient` (same shape as `self`); `retain_graph` keeps the saved
    /// values for another backward.
    pub fn backward_with(&self, gradient: Option<&Tensor>, retain_graph: bool) -> Result<()> {
        crate::autograd::backward(self, gradient, retain_graph)
    }
}
