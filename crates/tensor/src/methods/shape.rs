//! Shape methods: views that share storage (reshape, view, transpose, permute, narrow,
//! expand, squeeze, unsqueeze, flatten) and `contiguous`.

use crate::layout::normalize_dim;
use crate::op::{Op, ViewOp, view_strides};
use crate::{Result, Tensor, TensorError};

impl Tensor {
    /// New sizes for the same elements: a view when the strides allow it, else a copy.
    pub fn reshape(&self, shape: &[usize]) -> Result<Tensor> {
        if shape == self.shape().as_slice() {
            return Ok(self.clone());
        }
        Op::View(ViewOp::Reshape(shape.to_vec())).apply1(&[self])
    }

    /// [`Tensor::reshape`] where one size may be `-1` (inferred).
    pub fn reshape_infer(&self, shape: &[isize]) -> Result<Tensor> {
        let numel = self.numel();
        let known: usize = shape
            .iter()
            .filter(|&&s| s >= 0)
            .map(|&s| s as usize)
            .product();
        let inferred = shape.iter().filter(|&&s| s == -1).count();
        if inferred > 1
            || shape.iter().any(|&s| s < -1)
            || (inferred == 1 && (known == 0 || !numel.is_multiple_of(known)))
        {
            return Err(TensorError::invalid(
                "reshape",
                format!("shape {shape:?} is invalid for input of size {numel}"),
            ));
        }
        let resolved: Vec<usize> = shape
            .iter()
            .map(|&s| {
                if s == -1 {
                    numel / known.max(1)
                } else {
                    s as usize
                }
            })
            .collect();
        self.reshape(&resolved)
    }

    /// Like [`Tensor::reshape`] but never copies: an error when the strides do not allow a view.
    pub fn view(&self, shape: &[usize]) -> Result<Tensor> {
        let n: usize = shape.iter().product();
        if n == self.numel() && view_strides(&self.layout(), shape).is_none() {
            return Err(TensorError::invalid(
                "view",
                format!(
                    "view size {shape:?} is not compatible with input tensor's size {:?} and stride {:?} (at least one dimension spans across two contiguous subspaces); use reshape instead",
                    self.shape(),
                    self.strides()
                ),
            ));
        }
        self.reshape(shape)
    }

    /// Reorders dimensions: output dim `i` is input dim `dims[i]`.
    pub fn permute(&self, dims: &[usize]) -> Result<Tensor> {
        if dims.iter().enumerate().all(|(i, &d)| i == d) && dims.len() == self.ndim() {
            return Ok(self.clone());
        }
        Op::View(ViewOp::Permute(dims.to_vec())).apply1(&[self])
    }

    /// Swaps two dimensions.
    pub fn transpose(&self, dim0: isize, dim1: isize) -> Result<Tensor> {
        let n = self.ndim();
        if n == 0 {
            return Ok(self.clone());
        }
        let (a, b) = (
            normalize_dim("transpose", dim0, n)?,
            normalize_dim("transpose", dim1, n)?,
        );
        let mut dims: Vec<usize> = (0..n).collect();
        dims.swap(a, b);
        self.permute(&dims)
    }

    /// Transpose of a matrix (a 0-D or 1-D tensor is returned as is), as PyTorch's `.t()`.
    pub fn t(&self) -> Result<Tensor> {
        match self.ndim() {
            0 | 1 => Ok(self.clone()),
            2 => self.transpose(0, 1),
            n => Err(TensorError::invalid(
                "t",
                format!("expects a tensor with <= 2 dimensions, but self is {n}D"),
            )),
        }
    }

    /// `len` elements of `dim` starting at `start`, sharing storage.
    pub fn narrow(&self, dim: isize, start: usize, len: usize) -> Result<Tensor> {
        let dim = normalize_dim("narrow", dim, self.ndim())?;
        Op::View(ViewOp::Narrow { dim, start, len }).apply1(&[self])
    }

    /// Elements `start..end` of `dim` (PyTorch's `x[:, start:end]`), sharing storage.
    pub fn slice(&self, dim: isize, start: usize, end: usize) -> Result<Tensor> {
        if end < start {
            return Err(TensorError::invalid(
                "slice",
                format!("end ({end}) is before start ({start})"),
            ));
        }
        self.narrow(dim, start, end - start)
    }

    /// Element `index` of `dim`, with that dimension removed.
    pub fn select(&self, dim: isize, index: usize) -> Result<Tensor> {
        let d = normalize_dim("select", dim, self.ndim())?;
        self.narrow(d as isize, index, 1)?.squeeze_dim(d as isize)
    }

    /// Broadcasts to `shape` without copying (size-1 and new leading dims only).
    pub fn expand(&self, shape: &[usize]) -> Result<Tensor> {
        if shape == self.shape().as_slice() {
            return Ok(self.clone());
        }
        Op::View(ViewOp::Expand(shape.to_vec())).apply1(&[self])
    }

    pub fn expand_as(&self, other: &Tensor) -> Result<Tensor> {
        self.expand(&other.shape())
    }

    /// Removes every size-1 dimension.
    pub fn squeeze(&self) -> Result<Tensor> {
        let shape: Vec<usize> = self.shape().into_iter().filter(|&n| n != 1).collect();
        self.reshape(&shape)
    }

    /// Removes `dim` if its size is 1 (otherwise returns the tensor unchanged, as PyTorch).
    pub fn squeeze_dim(&self, dim: isize) -> Result<Tensor> {
        let mut shape = self.shape();
        if shape.is_empty() {
            return Ok(self.clone());
        }
        let d = normalize_dim("squeeze", dim, shape.len())?;
        if shape[d] == 1 {
            shape.remove(d);
        }
        self.reshape(&shape)
    }

    /// Inserts a size-1 dimension at `dim` (negative counts from the end of the new shape).
    pub fn unsqueeze(&self, dim: isize) -> Result<Tensor> {
        let mut shape = self.shape();
        let d = normalize_dim("unsqueeze", dim, shape.len() + 1)?;
        shape.insert(d, 1);
        self.reshape(&shape)
    }

    /// Merges dimensions `start..=end` into one.
    pub fn flatten(&self, start_dim: isize, end_dim: isize) -> Result<Tensor> {
        let shape = self.shape();
        if shape.is_empty() {
            return self.reshape(&[1]);
        }
        let (s, e) = (
            normalize_dim("flatten", start_dim, shape.len())?,
            normalize_dim("flatten", end_dim, shape.len())?,
        );
        if s > e {
            return Err(TensorError::invalid(
                "flatten",
                format!("start_dim ({start_dim}) cannot come after end_dim ({end_dim})"),
            ));
        }
        let mut new_shape = shape[..s].to_vec();
        new_shape.push(shape[s..=e].iter().product());
        new_shape.extend(&shape[e + 1..]);
        self.reshape(&new_shape)
    }

    /// A packed row-major tensor: `self` when already contiguous, else a copy.
    pub fn contiguous(&self) -> Result<Tensor> {
        if self.is_contiguous() {
            return Ok(self.clone());
        }
        Op::View(ViewOp::Contiguous).apply1(&[self])
    }
}
