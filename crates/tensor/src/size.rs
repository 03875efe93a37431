//! Checked sizes: element counts and byte sizes of shapes, computed without overflow, so that
//! a huge or hostile shape is an error naming the op instead of a wrapped count.

use crate::{DType, Result, TensorError};

/// The number of elements of `shape`, or `None` when the product overflows. A shape with a
/// 0 dimension has no elements, whatever its other dimensions.
pub fn checked_numel(shape: &[usize]) -> Option<usize> {
    if shape.contains(&0) {
        return Some(0);
    }
    shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
}

/// The number of elements of `shape`, saturating at `usize::MAX` (for costs and estimates of
/// shapes that may never be allocated).
pub fn saturating_numel(shape: &[usize]) -> usize {
    checked_numel(shape).unwrap_or(usize::MAX)
}

/// The element count of a `dtype` tensor of `shape`, checked so that its byte size fits in
/// `isize::MAX` (the most any allocation or pointer offset can span).
pub fn checked_len(op: &str, shape: &[usize], dtype: DType) -> Result<usize> {
    checked_numel(shape)
        .filter(|n| {
            n.checked_mul(dtype.size_in_bytes())
                .is_some_and(|bytes| bytes <= isize::MAX as usize)
        })
        .ok_or_else(|| TensorError::ShapeOverflow {
            op: op.to_string(),
            shape: shape.to_vec(),
            dtype,
        })
}
