//! Pooling functions (max_pool2d, avg_pool2d, adaptive_avg_pool2d) with PyTorch's signatures,
//! over `[N, C, H, W]` or unbatched `[C, H, W]` inputs. Pass `stride = kernel_size` for
//! PyTorch's default stride.

use crate::op::{Op, PoolOp};
use crate::{Result, Tensor, TensorError};

/// Largest value of each window; padding counts as -inf.
pub fn max_pool2d(
    input: &Tensor,
    kernel_size: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
    ceil_mode: bool,
) -> Result<Tensor> {
    let op = PoolOp::max_pool2d_values(kernel_size, stride, padding, dilation, ceil_mode);
    Op::Pool(op).apply1(&[input])
}

/// [`max_pool2d`] and the i64 index of each maximum in its flattened `H * W` input plane
/// (PyTorch's `return_indices=True`).
pub fn max_pool2d_with_indices(
    input: &Tensor,
    kernel_size: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
    ceil_mode: bool,
) -> Result<(Tensor, Tensor)> {
    let op = PoolOp::max_pool2d(kernel_size, stride, padding, dilation, ceil_mode);
    let outs = Op::Pool(op).apply(&[input])?;
    match <[Tensor; 2]>::try_from(outs) {
        Ok([values, indices]) => Ok((values, indices)),
        Err(_) => Err(TensorError::invalid(
            "max_pool2d",
            "expected values and indices",
        )),
    }
}

/// Mean of each window; with `count_include_pad` (PyTorch's default) padded zeros count in
/// the divisor.
pub fn avg_pool2d(
    input: &Tensor,
    kernel_size: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    ceil_mode: bool,
    count_include_pad: bool,
) -> Result<Tensor> {
    let op = PoolOp::avg_pool2d(kernel_size, stride, padding, ceil_mode, count_include_pad);
    Op::Pool(op).apply1(&[input])
}

/// Mean over PyTorch's adaptive bins, giving an `output_size` (`[oh, ow]`) plane.
pub fn adaptive_avg_pool2d(input: &Tensor, output_size: [usize; 2]) -> Result<Tensor> {
    Op::Pool(PoolOp::AdaptiveAvgPool2d { output_size }).apply1(&[input])
}
