//! Shape, strides and offset of a tensor view into its storage, and broadcasting.

use crate::{Result, TensorError};

/// How a tensor's elements sit in its storage: element `idx` is at
/// `offset + sum(idx[d] * strides[d])`. Strides are in elements, never negative.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Layout {
    pub shape: Vec<usize>,
    pub strides: Vec<usize>,
    pub offset: usize,
}

/// Row-major strides for `shape`, saturating for a shape too large to allocate (only meta
/// tensors can have one, and every op refuses it in its meta check).
pub fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1usize; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1].saturating_mul(shape[d + 1].max(1));
    }
    strides
}

impl Layout {
    pub fn contiguous(shape: &[usize]) -> Self {
        Layout {
            shape: shape.to_vec(),
            strides: contiguous_strides(shape),
            offset: 0,
        }
    }

    /// The element count (a layout's shape was checked when its tensor was made; saturating
    /// keeps this total for any shape).
    pub fn numel(&self) -> usize {
        crate::size::saturating_numel(&self.shape)
    }

    pub fn ndim(&self) -> usize {
        self.shape.len()
    }

    /// True when the elements are packed row-major (size-1 dims may have any stride).
    /// Expected strides saturate as [`contiguous_strides`] does: an empty tensor may have
    /// dimensions whose product overflows (`[0, 2^40, 2^40]`).
    pub fn is_contiguous(&self) -> bool {
        let mut expected: usize = 1;
        for d in (0..self.shape.len()).rev() {
            if self.shape[d] != 1 {
                if self.strides[d] != expected {
                    return false;
                }
                expected = expected.saturating_mul(self.shape[d]);
            }
        }
        true
    }

    /// The storage range `offset..offset + numel` when contiguous.
    pub fn contiguous_range(&self) -> Option<std::ops::Range<usize>> {
        self.is_contiguous()
            .then(|| self.offset..self.offset + self.numel())
    }

    /// Storage offsets of every element in row-major order.
    pub fn offsets(&self) -> StridedOffsets<'_> {
        StridedOffsets::new(self)
    }

    /// One past the largest storage offset this view touches (0 when empty).
    pub fn storage_extent(&self) -> usize {
        if self.numel() == 0 {
            return 0;
        }
        self.offset
            + self
                .shape
                .iter()
                .zip(&self.strides)
                .map(|(&n, &s)| (n - 1) * s)
                .sum::<usize>()
            + 1
    }
}

/// Iterates the storage offsets of a strided view in row-major order.
pub struct StridedOffsets<'a> {
    layout: &'a Layout,
    index: Vec<usize>,
    next: Option<usize>,
    remaining: usize,
}

impl<'a> StridedOffsets<'a> {
    fn new(layout: &'a Layout) -> Self {
        let remaining = layout.numel();
        StridedOffsets {
            layout,
            index: vec![0; layout.ndim()],
            next: (remaining > 0).then_some(layout.offset),
            remaining,
        }
    }
}

impl Iterator for StridedOffsets<'_> {
    type Item = usize;

    #[inline]
    fn next(&mut self) -> Option<usize> {
        let current = self.next?;
        self.remaining -= 1;
        if self.remaining == 0 {
            self.next = None;
            return Some(current);
        }
        let mut offset = current;
        for d in (0..self.index.len()).rev() {
            self.index[d] += 1;
            offset += self.layout.strides[d];
            if self.index[d] < self.layout.shape[d] {
                break;
            }
            offset -= self.layout.strides[d] * self.index[d];
            self.index[d] = 0;
        }
        self.next = Some(offset);
        Some(current)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for StridedOffsets<'_> {}

/// The shape two operands broadcast to, as PyTorch does (align right; sizes equal or 1).
pub fn broadcast_shapes(op: &str, lhs: &[usize], rhs: &[usize]) -> Result<Vec<usize>> {
    let n = lhs.len().max(rhs.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let a = if i < n - lhs.len() {
            1
        } else {
            lhs[i - (n - lhs.len())]
        };
        let b = if i < n - rhs.len() {
            1
        } else {
            rhs[i - (n - rhs.len())]
        };
        out[i] = match (a, b) {
            (a, b) if a == b => a,
            (1, b) => b,
            (a, 1) => a,
            _ => {
                return Err(TensorError::shapes(
                    op,
                    lhs,
                    rhs,
                    format!(
                        "sizes {a} and {b} at dimension {i} of the broadcast shape cannot broadcast"
                    ),
                ));
            }
        };
    }
    Ok(out)
}

/// The layout of `layout` expanded to `shape` (stride 0 along broadcast dims).
pub fn broadcast_layout(op: &str, layout: &Layout, shape: &[usize]) -> Result<Layout> {
    if shape.len() < layout.ndim() {
        return Err(TensorError::shapes(
            op,
            &layout.shape,
            shape,
            "cannot expand to fewer dimensions",
        ));
    }
    let lead = shape.len() - layout.ndim();
    let mut strides = vec![0; shape.len()];
    for d in 0..layout.ndim() {
        let (from, to) = (layout.shape[d], shape[lead + d]);
        strides[lead + d] = if from == to {
            layout.strides[d]
        } else if from == 1 {
            0
        } else {
            return Err(TensorError::shapes(
                op,
                &layout.shape,
                shape,
                format!(
                    "the expanded size {to} must match the existing size {from} at dimension {d}"
                ),
            ));
        };
    }
    Ok(Layout {
        shape: shape.to_vec(),
        strides,
        offset: layout.offset,
    })
}

/// Resolves a possibly negative dimension index against `ndim`, as PyTorch does.
pub fn normalize_dim(op: &str, dim: isize, ndim: usize) -> Result<usize> {
    let n = ndim.max(1) as isize;
    let d = if dim < 0 { dim + n } else { dim };
    if d < 0 || d >= n {
        return Err(TensorError::invalid(
            op,
            format!(
                "dimension out of range (expected to be in range of [{}, {}], but got {dim})",
                -n,
                n - 1
            ),
        ));
    }
    Ok(d as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strided_offsets_walk_a_transposed_view() {
        let layout = Layout {
            shape: vec![3, 2],
            strides: vec![1, 3],
            offset: 0,
        };
        assert_eq!(layout.offsets().collect::<Vec<_>>(), vec![0, 3, 1, 4, 2, 5]);
        assert!(!layout.is_contiguous());
    }

    #[test]
    fn broadcast_shapes_align_right() {
        assert_eq!(
            broadcast_shapes("add", &[3, 1, 5], &[4, 1]).unwrap(),
            vec![3, 4, 5]
        );
        let err = broadcast_shapes("add", &[2, 3], &[4]).unwrap_err();
        assert!(
            err.to_string()
                .contains("add: shape mismatch between [2, 3] and [4]"),
            "{err}"
        );
    }

    #[test]
    fn normalize_dim_accepts_negative() {
        assert_eq!(normalize_dim("sum", -1, 3).unwrap(), 2);
        assert!(normalize_dim("sum", 3, 3).is_err());
    }
}
