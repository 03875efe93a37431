//! Reductions of integer and bool tensors, exact in i64 (as PyTorch: a sum is i64; `amax`/
//! `amin` keep the input's dtype; `argmax`/`argmin` give the first position of the extreme).

use super::{ReduceKind, ReduceOp, op_name, per_row};
use crate::cpu::tensor_from;
use crate::{DType, Result, Tensor, TensorError};

/// `op` over `x` (an integer or bool tensor) into `out_shape`.
pub(super) fn integer_kernel(
    op: &ReduceOp,
    x: &Tensor,
    out_shape: &[usize],
) -> Result<Vec<Tensor>> {
    let (rows, n, data) = op.rows::<i64>(&x.to_dtype(DType::I64)?)?;
    if n == 0 && op.kind != ReduceKind::Sum {
        return Err(TensorError::invalid(
            op_name(op),
            format!(
                "cannot compute {} of an empty dimension (input shape {:?})",
                op_name(op),
                x.shape()
            ),
        ));
    }
    let largest = matches!(op.kind, ReduceKind::Amax | ReduceKind::ArgMax);
    // The first position of the row's extreme.
    let first_extreme = |r: &[i64]| {
        let mut best = 0;
        for (i, &v) in r.iter().enumerate() {
            if (largest && v > r[best]) || (!largest && v < r[best]) {
                best = i;
            }
        }
        best
    };
    Ok(vec![match op.kind {
        ReduceKind::Sum => tensor_from(
            per_row(&data, rows, n, |r| {
                r.iter().fold(0i64, |a, &v| a.wrapping_add(v))
            }),
            out_shape,
        ),
        ReduceKind::Amax | ReduceKind::Amin => {
            tensor_from(per_row(&data, rows, n, |r| r[first_extreme(r)]), out_shape)
                .to_dtype(x.dtype())?
        }
        ReduceKind::ArgMax | ReduceKind::ArgMin => tensor_from(
            per_row(&data, rows, n, |r| first_extreme(r) as i64),
            out_shape,
        ),
        _ => return Err(TensorError::dtype(op_name(op), x.dtype())),
    }])
}
