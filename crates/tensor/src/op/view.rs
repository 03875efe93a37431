//! Views that share storage with their input (reshape, permute, narrow, expand) and the copy
//! that makes a tensor contiguous. Their backward formulas undo the view on the gradient.

use super::{BackwardCtx, Op, OpDef, OpKind, expect_inputs};
use crate::layout::{Layout, broadcast_layout, contiguous_strides};
use crate::{Result, Tensor, TensorError, TensorMeta};

/// A change of layout over the same storage.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ViewOp {
    /// New sizes with the same number of elements; a view when strides allow, else a copy.
    Reshape(Vec<usize>),
    /// Reorders dimensions: output dim `i` is input dim `dims[i]`.
    Permute(Vec<usize>),
    /// `len` elements of dimension `dim` starting at `start`.
    Narrow {
        dim: usize,
        start: usize,
        len: usize,
    },
    /// Broadcasts size-1 dimensions (and new leading ones) to `shape` without copying.
    Expand(Vec<usize>),
    /// A packed row-major copy.
    Contiguous,
}

/// Strides that view `layout` with `shape` without copying, if any exist (PyTorch's
/// `computeStride`: each run of merged input dims must be contiguous within itself).
pub fn view_strides(layout: &Layout, shape: &[usize]) -> Option<Vec<usize>> {
    let numel: usize = layout.numel();
    if numel == 0 || layout.shape.is_empty() {
        return Some(contiguous_strides(shape));
    }
    let mut new_strides = vec![0; shape.len()];
    let mut view_d = shape.len() as isize - 1;
    let mut chunk_base_stride = *layout.strides.last()?;
    let mut tensor_numel = 1;
    let mut view_numel = 1;
    for tensor_d in (0..layout.ndim()).rev() {
        tensor_numel *= layout.shape[tensor_d];
        let boundary = tensor_d == 0
            || (layout.shape[tensor_d - 1] != 1
                && layout.strides[tensor_d - 1] != tensor_numel * chunk_base_stride);
        if boundary {
            while view_d >= 0 && (view_numel < tensor_numel || shape[view_d as usize] == 1) {
                new_strides[view_d as usize] = view_numel * chunk_base_stride;
                view_numel *= shape[view_d as usize];
                view_d -= 1;
            }
            if view_numel != tensor_numel {
                return None;
            }
            if tensor_d > 0 {
                chunk_base_stride = layout.strides[tensor_d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    if view_d != -1 {
        return None;
    }
    Some(new_strides)
}

impl OpDef for ViewOp {
    fn attributes(&self) -> Option<String> {
        super::text::variant_attributes(self)
    }

    fn kind(&self) -> OpKind {
        if matches!(self, ViewOp::Contiguous) {
            OpKind::Copy
        } else {
            OpKind::View
        }
    }

    fn name(&self) -> String {
        match self {
            ViewOp::Reshape(_) => "reshape",
            ViewOp::Permute(_) => "permute",
            ViewOp::Narrow { .. } => "narrow",
            ViewOp::Expand(_) => "expand",
            ViewOp::Contiguous => "contiguous",
        }
        .into()
    }

    fn meta(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>> {
        expect_inputs(&self.name(), inputs, 1)?;
        let x = &inputs[0];
        let shape = match self {
            ViewOp::Reshape(shape) => {
                // An overflowing target count never equals the input's count: compare as None.
                if crate::size::checked_numel(shape) != crate::size::checked_numel(&x.shape) {
                    return Err(TensorError::shapes(
                        "reshape",
                        &x.shape,
                        shape,
                        format!("shape {shape:?} is invalid for input of size {}", x.numel()),
                    ));
                }
                shape.clone()
            }
            ViewOp::Permute(dims) => {
                let mut seen = vec![false; x.shape.len()];
                if dims.len() != x.shape.len()
                    || dims
                        .iter()
                        .any(|&d| d >= seen.len() || std::mem::replace(&mut seen[d], true))
                {
                    return Err(TensorError::invalid(
                        "permute",
                        format!(
                            "dims {dims:?} are not a permutation of the {} dimensions of shape {:?}",
                            x.shape.len(),
                            x.shape
                        ),
                    ));
                }
                dims.iter().map(|&d| x.shape[d]).collect()
            }
            ViewOp::Narrow { dim, start, len } => {
                if *dim >= x.shape.len()
                    || start
                        .checked_add(*len)
                        .is_none_or(|end| end > x.shape[*dim])
                {
                    return Err(TensorError::invalid(
                        "narrow",
                        format!(
                            "start ({start}) + length ({len}) exceeds dimension {dim} of shape {:?}",
                            x.shape
                        ),
                    ));
                }
                let mut shape = x.shape.clone();
                shape[*dim] = *len;
                shape
            }
            ViewOp::Expand(shape) => {
                broadcast_layout("expand", &Layout::contiguous(&x.shape), shape)?;
                shape.clone()
            }
            ViewOp::Contiguous => x.shape.clone(),
        };
        Ok(vec![TensorMeta::new(shape, x.dtype)])
    }

    fn cpu(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        let x = inputs[0];
        let layout = x.layout();
        let out = match self {
            ViewOp::Reshape(shape) => match view_strides(&layout, shape) {
                Some(strides) => x.view_with_layout(Layout {
                    shape: shape.clone(),
                    strides,
                    offset: layout.offset,
                }),
                None => copy_contiguous(x)?.view_with_layout(Layout::contiguous(shape)),
            },
            ViewOp::Permute(dims) => x.view_with_layout(Layout {
                shape: dims.iter().map(|&d| layout.shape[d]).collect(),
                strides: dims.iter().map(|&d| layout.strides[d]).collect(),
                offset: layout.offset,
            }),
            ViewOp::Narrow { dim, start, len } => {
                let mut shape = layout.shape.clone();
                shape[*dim] = *len;
                // An empty view keeps the offset: past the end of an empty storage, a moved
                // offset would make even reading nothing index out of bounds.
                let offset = if shape.contains(&0) {
                    layout.offset
                } else {
                    layout.offset + start * layout.strides[*dim]
                };
                x.view_with_layout(Layout {
                    shape,
                    strides: layout.strides.clone(),
                    offset,
                })
            }
            ViewOp::Expand(shape) => {
                x.view_with_layout(broadcast_layout("expand", &layout, shape)?)
            }
            ViewOp::Contiguous => copy_contiguous(x)?,
        };
        Ok(vec![out])
    }

    fn backward(&self, cx: &BackwardCtx) -> Result<Vec<Option<Tensor>>> {
        let g = cx.grad(0)?;
        let input_shape = cx.inputs[0].shape();
        let grad = match self {
            ViewOp::Reshape(_) => g.reshape(&input_shape)?,
            ViewOp::Permute(dims) => {
                let mut inverse = vec![0; dims.len()];
                for (i, &d) in dims.iter().enumerate() {
                    inverse[d] = i;
                }
                g.permute(&inverse)?
            }
            ViewOp::Narrow { dim, start, len } => {
                zero_padded(&g, *dim, *start, input_shape[*dim] - start - len)?
            }
            ViewOp::Expand(_) => g.sum_to_shape(&input_shape)?,
            ViewOp::Contiguous => g,
        };
        Ok(vec![Some(grad)])
    }

    fn computes_half_in_f32(&self) -> bool {
        false
    }
}

/// `g` with `before` and `after` zero slices added along `dim` (the adjoint of a narrow), as
/// a `cat`, so that it is recorded when traced.
pub(crate) fn zero_padded(g: &Tensor, dim: usize, before: usize, after: usize) -> Result<Tensor> {
    let slab = |len: usize| -> Result<Tensor> {
        let mut shape = g.shape();
        shape[dim] = len;
        super::zeros(&shape, g.dtype())
    };
    let mut parts = Vec::with_capacity(3);
    if before > 0 {
        parts.push(slab(before)?);
    }
    parts.push(g.clone());
    if after > 0 {
        parts.push(slab(after)?);
    }
    if parts.len() == 1 {
        return Ok(g.clone());
    }
    let refs: Vec<&Tensor> = parts.iter().collect();
    Op::Index(super::IndexOp::Cat { dim }).apply1(&refs)
}

/// A packed copy of `x` in fresh storage.
pub(crate) fn copy_contiguous(x: &Tensor) -> Result<Tensor> {
    let shape = x.shape();
    let storage = x.with_storage(|s, layout| -> Result<_> {
        let src = s.cpu("contiguous")?;
        Ok(match layout.contiguous_range() {
            Some(range) => src.copy_range(range),
            None => src.gather(layout.offsets()),
        })
    })?;
    Ok(Tensor::from_cpu(storage, &shape))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn view_strides_merge_contiguous_runs_only() {
        let transposed = Layout {
            shape: vec![3, 4],
            strides: vec![1, 3],
            offset: 0,
        };
        assert_eq!(view_strides(&transposed, &[12]), None);
        assert_eq!(view_strides(&transposed, &[3, 2, 2]), Some(vec![1, 6, 3]));
        let packed = Layout::contiguous(&[2, 3, 4]);
        assert_eq!(view_strides(&packed, &[6, 4]), Some(vec![4, 1]));
    }

    #[test]
    fn narrow_of_an_empty_tensor_reads_as_empty() {
        for (shape, dim) in [
            (vec![0, 5], 1),
            (vec![2, 0], 0),
            (vec![5, 0], 0),
            (vec![2, 0, 3], 2),
            (vec![3, 1, 0], 0),
        ] {
            let empty = Tensor::zeros(&shape, crate::DType::F32).unwrap();
            let len = shape[dim] - 1;
            let narrowed = empty.narrow(dim as isize, 1, len).unwrap();
            assert_eq!(narrowed.numel(), 0);
            assert_eq!(narrowed.to_vec::<f32>().unwrap(), Vec::<f32>::new());
            let packed = narrowed.contiguous().unwrap();
            assert_eq!(packed.to_vec::<f32>().unwrap(), Vec::<f32>::new());
        }
    }
}
