//! Pooling functions (max_pool1d/2d, avg_pool1d/2d, adaptive_avg_pool2d, adaptive_max_pool2d) with PyTorch's signatures,
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
    values_and_indices(op, input)
}

/// Runs a max pooling op that gives its values and their indices.
fn values_and_indices(op: PoolOp, input: &Tensor) -> Result<(Tensor, Tensor)> {
    let op = Op::Pool(op);
    let outs = op.apply(&[input])?;
    match <[Tensor; 2]>::try_from(outs) {
        Ok([values, indices]) => Ok((values, indices)),
        Err(_) => Err(TensorError::invalid(
            op.name(),
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

/// Largest value over PyTorch's adaptive bins, giving an `output_size` (`[oh, ow]`) plane,
/// and the i64 index of each maximum in its flattened `H * W` input plane.
pub fn adaptive_max_pool2d_with_indices(
    input: &Tensor,
    output_size: [usize; 2],
) -> Result<(Tensor, Tensor)> {
    values_and_indices(PoolOp::AdaptiveMaxPool2d { output_size }, input)
}

/// Largest value over PyTorch's adaptive bins (the values of
/// [`adaptive_max_pool2d_with_indices`]).
pub fn adaptive_max_pool2d(input: &Tensor, output_size: [usize; 2]) -> Result<Tensor> {
    Ok(adaptive_max_pool2d_with_indices(input, output_size)?.0)
}

/// Runs a 2-D pooling `f` on `[N, C, L]` / `[C, L]` input seen as planes of one row.
fn over_rows<R>(op: &str, input: &Tensor, f: impl FnOnce(&Tensor) -> Result<R>) -> Result<R> {
    if !matches!(input.ndim(), 2 | 3) {
        return Err(TensorError::invalid(
            op,
            format!(
                "expected a 2-D [C, L] or 3-D [N, C, L] input, got shape {:?}",
                input.shape()
            ),
        ));
    }
    f(&input.unsqueeze(-2)?)
}

/// Max pooling along the last dimension of `[N, C, L]` or `[C, L]`; padding counts as -inf.
pub fn max_pool1d(
    input: &Tensor,
    kernel_size: usize,
    stride: usize,
    padding: usize,
    dilation: usize,
    ceil_mode: bool,
) -> Result<Tensor> {
    over_rows("max_pool1d", input, |x| {
        max_pool2d(
            x,
            [1, kernel_size],
            [1, stride],
            [0, padding],
            [1, dilation],
            ceil_mode,
        )?
        .squeeze_dim(-2)
    })
}

/// [`max_pool1d`] and the i64 index of each maximum along `L`.
pub fn max_pool1d_with_indices(
    input: &Tensor,
    kernel_size: usize,
    stride: usize,
    padding: usize,
    dilation: usize,
    ceil_mode: bool,
) -> Result<(Tensor, Tensor)> {
    over_rows("max_pool1d", input, |x| {
        let (values, indices) = max_pool2d_with_indices(
            x,
            [1, kernel_size],
            [1, stride],
            [0, padding],
            [1, dilation],
            ceil_mode,
        )?;
        Ok((values.squeeze_dim(-2)?, indices.squeeze_dim(-2)?))
    })
}

/// Average pooling along the last dimension of `[N, C, L]` or `[C, L]`; with
/// `count_include_pad` (PyTorch's default) padded zeros count in the divisor.
pub fn avg_pool1d(
    input: &Tensor,
    kernel_size: usize,
    stride: usize,
    padding: usize,
    ceil_mode: bool,
    count_include_pad: bool,
) -> Result<Tensor> {
    over_rows("avg_pool1d", input, |x| {
        avg_pool2d(
            x,
            [1, kernel_size],
            [1, stride],
            [0, padding],
            ceil_mode,
            count_include_pad,
        )?
        .squeeze_dim(-2)
    })
}
