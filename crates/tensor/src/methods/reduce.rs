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

    /// A reduction with one output.
    fn reduce_one(&self, kind: ReduceKind, dims: &[usize], keepdim: bool) -> Result<Tensor> {
        Ok(self.reduce(kind, dims, keepdim)?.remove(0))
    }

    /// A reduction along one dimension giving values and their indices.
    fn reduce_with_indices(
        &self,
        kind: ReduceKind,
        op: &str,
        dim: isize,
        keepdim: bool,
    ) -> Result<(Tensor, Tensor)> {
        let mut out = self.reduce(kind, &self.dim_of(op, dim)?, keepdim)?;
        let indices = out.pop().expect("two outputs");
        Ok((out.pop().expect("two outputs"), indices))
    }

    /// An index reduction along `dim`, or over the flattened tensor when `None`.
    fn arg_reduce(
        &self,
        kind: ReduceKind,
        op: &str,
        dim: Option<isize>,
        keepdim: bool,
    ) -> Result<Tensor> {
        match dim {
            Some(d) => self.reduce_one(kind, &self.dim_of(op, d)?, keepdim),
            None => self.reshape(&[self.numel()])?.reduce_one(kind, &[0], false),
        }
    }

    fn all_dims(&self) -> Vec<usize> {
        (0..self.ndim()).collect()
    }

    fn dims_of(&self, op: &str, dims: &[isize]) -> Result<Vec<usize>> {
        dims.iter()
            .map(|&d| normalize_dim(op, d, self.ndim()))
            .collect()
    }

    /// `dims` normalized, or every dimension when empty.
    fn dims_or_all(&self, op: &str, dims: &[isize]) -> Result<Vec<usize>> {
        if dims.is_empty() {
            Ok(self.all_dims())
        } else {
            self.dims_of(op, dims)
        }
    }

    fn dim_of(&self, op: &str, dim: isize) -> Result<Vec<usize>> {
        if self.ndim() == 0 {
            normalize_dim(op, dim, 0).map(|_| vec![])
        } else {
            Ok(vec![normalize_dim(op, dim, self.ndim())?])
        }
    }

    /// Largest element (0-dim).
    pub fn max_all(&self) -> Result<Tensor> {
        self.reduce_one(ReduceKind::Amax, &self.all_dims(), false)
    }

    /// Smallest element (0-dim).
    pub fn min_all(&self) -> Result<Tensor> {
        self.reduce_one(ReduceKind::Amin, &self.all_dims(), false)
    }

    /// Largest values over `dims`; ties share the gradient evenly.
    pub fn amax(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        self.reduce_one(ReduceKind::Amax, &self.dims_of("amax", dims)?, keepdim)
    }

    pub fn amin(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        self.reduce_one(ReduceKind::Amin, &self.dims_of("amin", dims)?, keepdim)
    }

    /// Largest values along `dim` and their indices (i64), as `torch.max(x, dim)`.
    pub fn max_dim(&self, dim: isize, keepdim: bool) -> Result<(Tensor, Tensor)> {
        self.reduce_with_indices(ReduceKind::MaxWithIndices, "max", dim, keepdim)
    }

    /// Smallest values along `dim` and their indices (i64).
    pub fn min_dim(&self, dim: isize, keepdim: bool) -> Result<(Tensor, Tensor)> {
        self.reduce_with_indices(ReduceKind::MinWithIndices, "min", dim, keepdim)
    }

    /// Index of the largest element along `dim`, or of the flattened tensor when `None`.
    pub fn argmax(&self, dim: Option<isize>, keepdim: bool) -> Result<Tensor> {
        self.arg_reduce(ReduceKind::ArgMax, "argmax", dim, keepdim)
    }

    pub fn argmin(&self, dim: Option<isize>, keepdim: bool) -> Result<Tensor> {
        self.arg_reduce(ReduceKind::ArgMin, "argmin", dim, keepdim)
    }

    /// Variance over `dims` (all when empty); `unbiased` divides by `n - 1`.
    pub fn var(&self, dims: &[isize], unbiased: bool, keepdim: bool) -> Result<Tensor> {
        let correction = unbiased as usize;
        let dims = self.dims_or_all("var", dims)?;
        self.reduce_one(ReduceKind::Var { correction }, &dims, keepdim)
    }

    /// Standard deviation over `dims` (all when empty).
    pub fn std(&self, dims: &[isize], unbiased: bool, keepdim: bool) -> Result<Tensor> {
        let correction = unbiased as usize;
        let dims = self.dims_or_all("std", dims)?;
        self.reduce_one(ReduceKind::Std { correction }, &dims, keepdim)
    }

    /// `log(sum(exp(x)))` over `dims`, computed stably.
    pub fn logsumexp(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        let dims = self.dims_of("logsumexp", dims)?;
        self.reduce_one(ReduceKind::LogSumExp, &dims, keepdim)
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

/// For each reduction, three methods: `$all` over every element (0-dim result), `$dims` over
/// non-negative `dims`, and `$name` over `dims` that may count from the end.
macro_rules! reductions_over_dims {
    ($($name:ident, $all:ident, $dims:ident => $kind:ident;)*) => {
        impl Tensor {
            $(
                #[doc = concat!("`", stringify!($name), "` of all elements (0-dim).")]
                pub fn $all(&self) -> Result<Tensor> {
                    self.reduce_one(ReduceKind::$kind, &self.all_dims(), false)
                }

                #[doc = concat!("`", stringify!($name), "` over `dims` (already non-negative).")]
                pub fn $dims(&self, dims: &[usize], keepdim: bool) -> Result<Tensor> {
                    self.reduce_one(ReduceKind::$kind, dims, keepdim)
                }

                #[doc = concat!("`", stringify!($name), "` over `dims` (negative counts from the end).")]
                pub fn $name(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
                    self.$dims(&self.dims_of(stringify!($name), dims)?, keepdim)
                }
            )*
        }
    };
}

reductions_over_dims! {
    sum, sum_all, sum_dims => Sum;
    mean, mean_all, mean_dims => Mean;
}
