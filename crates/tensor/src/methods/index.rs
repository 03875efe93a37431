//! Indexing, joining and splitting methods (cat, stack, split, chunk, index_select, index_add,
//! gather, scatter_add, one_hot); splits are narrow views, the rest are [`IndexOp`]s.

use crate::layout::normalize_dim;
use crate::op::{IndexOp, Op};
use crate::{DType, Result, Tensor, TensorError};

impl Tensor {
    /// Concatenates `tensors` along `dim` (PyTorch's `torch.cat`): shapes must match except
    /// along `dim`, dtypes are promoted, and 1-D tensors of size 0 are skipped.
    pub fn cat(tensors: &[&Tensor], dim: isize) -> Result<Tensor> {
        // The rank comes from the first input that is not a legacy-empty 1-D tensor.
        let shapes: Vec<Vec<usize>> = tensors.iter().map(|t| t.shape()).collect();
        let ndim = shapes
            .iter()
            .find(|s| s.as_slice() != [0])
            .or(shapes.first())
            .map_or(0, Vec::len);
        let dim = normalize_dim("cat", dim, ndim)?;
        Op::Index(IndexOp::Cat { dim }).apply1(tensors)
    }

    /// Joins equally shaped `tensors` along a new dimension `dim` (PyTorch's `torch.stack`).
    pub fn stack(tensors: &[&Tensor], dim: isize) -> Result<Tensor> {
        let Some(first) = tensors.first() else {
            return Err(TensorError::invalid(
                "stack",
                "expected a non-empty list of tensors",
            ));
        };
        let shape = first.shape();
        if let Some(i) = tensors.iter().position(|t| t.shape() != shape) {
            return Err(TensorError::shapes(
                "stack",
                &shape,
                &tensors[i].shape(),
                format!(
                    "stack expects each tensor to be equal size; tensor {i} differs from tensor 0"
                ),
            ));
        }
        let dim = normalize_dim("stack", dim, shape.len() + 1)?;
        let unsqueezed: Vec<Tensor> = tensors
            .iter()
            .map(|t| t.unsqueeze(dim as isize))
            .collect::<Result<_>>()?;
        Tensor::cat(&unsqueezed.iter().collect::<Vec<_>>(), dim as isize)
    }

    /// Views of `split_size` elements along `dim`, the last possibly smaller.
    pub fn split(&self, split_size: usize, dim: isize) -> Result<Vec<Tensor>> {
        let d = normalize_dim("split", dim, self.ndim())?;
        let n = self.size(d as isize)?;
        if n == 0 {
            return Ok(vec![self.narrow(d as isize, 0, 0)?]);
        }
        if split_size == 0 {
            return Err(TensorError::invalid(
                "split",
                format!(
                    "split_size can only be 0 if dimension size is 0, but got dimension {d} of size {n}"
                ),
            ));
        }
        (0..n)
            .step_by(split_size)
            .map(|start| self.narrow(d as isize, start, split_size.min(n - start)))
            .collect()
    }

    /// Views of the given sizes along `dim`, which must add up to the size of `dim`.
    pub fn split_sizes(&self, sizes: &[usize], dim: isize) -> Result<Vec<Tensor>> {
        let d = normalize_dim("split_with_sizes", dim, self.ndim())?;
        let n = self.size(d as isize)?;
        if sizes.iter().sum::<usize>() != n {
            return Err(TensorError::invalid(
                "split_with_sizes",
                format!(
                    "split sizes {sizes:?} must sum exactly to {n}, the size of dimension {d} of shape {:?}",
                    self.shape()
                ),
            ));
        }
        let mut start = 0;
        sizes
            .iter()
            .map(|&len| {
                let part = self.narrow(d as isize, start, len);
                start += len;
                part
            })
            .collect()
    }

    /// Views of `ceil(n / chunks)` elements along `dim`, as PyTorch's `chunk` (which may
    /// give fewer than `chunks` pieces).
    pub fn chunk(&self, chunks: usize, dim: isize) -> Result<Vec<Tensor>> {
        if chunks == 0 {
            return Err(TensorError::invalid(
                "chunk",
                "chunks must be greater than 0",
            ));
        }
        let d = normalize_dim("chunk", dim, self.ndim())?;
        let n = self.size(d as isize)?;
        if n == 0 {
            return self.split_sizes(&vec![0; chunks], d as isize);
        }
        self.split(n.div_ceil(chunks), d as isize)
    }

    /// The index op `op(dim)` on `self` and `operands`, with `dim` normalized (negative
    /// counts from the end); `name` is the method's name in errors.
    fn index_along(
        &self,
        name: &str,
        dim: isize,
        op: fn(usize) -> IndexOp,
        operands: &[&Tensor],
    ) -> Result<Tensor> {
        let dim = normalize_dim(name, dim, self.ndim())?;
        let inputs: Vec<&Tensor> = std::iter::once(self)
            .chain(operands.iter().copied())
            .collect();
        Op::Index(op(dim)).apply1(&inputs)
    }

    /// The slices `index` (1-D, i64 or i32) of `dim`, copied (PyTorch's `index_select`).
    pub fn index_select(&self, dim: isize, index: &Tensor) -> Result<Tensor> {
        self.index_along(
            "index_select",
            dim,
            |dim| IndexOp::IndexSelect { dim },
            &[index],
        )
    }

    /// A copy of `self` with slice `j` of `src` along `dim` added to slice `index[j]`.
    pub fn index_add(&self, dim: isize, index: &Tensor, src: &Tensor) -> Result<Tensor> {
        self.index_along(
            "index_add",
            dim,
            |dim| IndexOp::IndexAdd { dim },
            &[index, src],
        )
    }

    /// Values picked along `dim` by `index` (PyTorch's `gather`): for `dim = 0`,
    /// `out[i][j] = self[index[i][j]][j]`. The output has the shape of `index`.
    pub fn gather(&self, dim: isize, index: &Tensor) -> Result<Tensor> {
        self.index_along("gather", dim, |dim| IndexOp::Gather { dim }, &[index])
    }

    /// A copy of `self` with `src` added where `index` points along `dim` (PyTorch's
    /// `scatter_add`): for `dim = 0`, `out[index[i][j]][j] += src[i][j]`.
    pub fn scatter_add(&self, dim: isize, index: &Tensor, src: &Tensor) -> Result<Tensor> {
        self.index_along(
            "scatter_add",
            dim,
            |dim| IndexOp::ScatterAdd { dim },
            &[index, src],
        )
    }

    /// One i64 row per class value with a 1 at the class (PyTorch's `F.one_hot`), with
    /// `num_classes` columns, or the largest value plus one when `None`.
    pub fn one_hot(&self, num_classes: Option<usize>) -> Result<Tensor> {
        if !self.dtype().is_int() {
            return Err(TensorError::invalid(
                "one_hot",
                format!(
                    "class values must be an integer tensor, got {}",
                    self.dtype()
                ),
            ));
        }
        let num_classes = match num_classes {
            Some(n) => n,
            None => {
                let values = self.to_dtype(DType::I64)?.to_vec::<i64>()?;
                match values.iter().max() {
                    None => {
                        return Err(TensorError::invalid(
                            "one_hot",
                            "cannot infer the number of classes from an empty tensor",
                        ));
                    }
                    Some(&max) if max < 0 => {
                        return Err(TensorError::invalid(
                            "one_hot",
                            format!("class value {max} is negative"),
                        ));
                    }
                    Some(&max) => max as usize + 1,
                }
            }
        };
        Op::Index(IndexOp::OneHot { num_classes }).apply1(&[self])
    }
}
