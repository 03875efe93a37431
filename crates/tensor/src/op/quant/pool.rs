//! Checking a u8 average pool with a zero point (`quantized_avg_pool2d`,
//! `quantized_adaptive_avg_pool2d`): one u8 input, an average pool whose padding does not count
//! in the divisor, a zero point inside u8's range; the kernel is the pooling op's.

use super::{check_qparams, expect_count, expect_dtype};
use crate::op::{OpDef, PoolOp};
use crate::{DType, Result, TensorError, TensorMeta};

/// The u8 output of `pool` on `inputs`, or an error naming `op`.
pub(super) fn meta(
    op: &str,
    pool: &PoolOp,
    zero_point: i64,
    inputs: &[TensorMeta],
) -> Result<TensorMeta> {
    expect_count(op, inputs, 1)?;
    expect_dtype(op, "input", &inputs[0], &[DType::U8])?;
    if !matches!(
        pool,
        PoolOp::AvgPool2d { .. } | PoolOp::AdaptiveAvgPool2d { .. }
    ) {
        return Err(TensorError::invalid(
            op,
            format!("expected an average pool, got {}", pool.name()),
        ));
    }
    check_qparams(op, 1.0, zero_point, DType::U8)?;
    let mut out = pool.meta(inputs)?;
    Ok(out.remove(0))
}
