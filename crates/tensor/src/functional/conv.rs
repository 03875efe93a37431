//! Convolution functions (conv1d, conv2d, conv_transpose1d) with PyTorch's signatures; unbatched inputs gain and
//! lose a batch dimension around the batched op.

use crate::op::{ConvOp, ConvParams, Op};
use crate::{Result, Tensor, TensorError};

/// Runs a convolution, treating an input with one dimension fewer than the weight as one
/// unbatched sample.
fn convolve(input: &Tensor, weight: &Tensor, bias: Option<&Tensor>, op: ConvOp) -> Result<Tensor> {
    let (x, unbatched) = batched(input, weight.ndim().saturating_sub(1))?;
    let y = match bias {
        Some(b) => Op::Conv(op).apply1(&[&x, weight, b])?,
        None => Op::Conv(op).apply1(&[&x, weight])?,
    };
    unbatch(y, unbatched)
}

/// `input` with a batch dimension, and whether it gained one: an input of `unbatched_rank`
/// dimensions is one sample.
pub(super) fn batched(input: &Tensor, unbatched_rank: usize) -> Result<(Tensor, bool)> {
    if input.ndim() == unbatched_rank {
        Ok((input.unsqueeze(0)?, true))
    } else {
        Ok((input.clone(), false))
    }
}

/// Removes the batch dimension [`batched`] added.
pub(super) fn unbatch(y: Tensor, unbatched: bool) -> Result<Tensor> {
    if unbatched { y.squeeze_dim(0) } else { Ok(y) }
}

/// 1-D convolution (cross-correlation, as PyTorch) of `input` `[N, C_in, L]` or `[C_in, L]`
/// with `weight` `[C_out, C_in/groups, K]` plus an optional `bias` `[C_out]`.
pub fn conv1d(
    input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    stride: usize,
    padding: usize,
    dilation: usize,
    groups: usize,
) -> Result<Tensor> {
    let op = ConvOp::conv1d(stride, padding, dilation, groups, bias.is_some());
    convolve(input, weight, bias, op)
}

/// 2-D convolution (cross-correlation, as PyTorch) of `input` `[N, C_in, H, W]` or
/// `[C_in, H, W]` with `weight` `[C_out, C_in/groups, kH, kW]` plus an optional `bias`
/// `[C_out]`; `stride`, `padding` and `dilation` are `[height, width]`.
pub fn conv2d(
    input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
    groups: usize,
) -> Result<Tensor> {
    let op = ConvOp::conv2d(stride, padding, dilation, groups, bias.is_some());
    convolve(input, weight, bias, op)
}

/// Transposed 1-D convolution (the gradient of a conv1d with respect to its input) of
/// `input` `[N, C_in, L]` or `[C_in, L]` with `weight` `[C_in, C_out/groups, K]` plus an
/// optional `bias` `[C_out]`; the output length is
/// `(L - 1) * stride - 2 * padding + dilation * (K - 1) + output_padding + 1`.
#[allow(clippy::too_many_arguments)]
pub fn conv_transpose1d(
    input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    stride: usize,
    padding: usize,
    output_padding: usize,
    groups: usize,
    dilation: usize,
) -> Result<Tensor> {
    let (x, unbatched) = batched(input, 2)?;
    let (shape, kernel) = (x.shape(), weight.shape());
    if shape.len() != 3 || kernel.len() != 3 {
        return Err(TensorError::invalid(
            "conv_transpose1d",
            format!(
                "expected a 3-D input and weight, got input {:?} and weight {kernel:?}",
                input.shape()
            ),
        ));
    }
    // Length arithmetic in i128, so no size a caller passes can overflow it.
    let length = (shape[2] as i128 - 1) * stride as i128 - 2 * padding as i128
        + dilation as i128 * (kernel[2] as i128 - 1)
        + output_padding as i128
        + 1;
    if shape[2] == 0 || length <= 0 || output_padding >= stride.max(dilation) {
        return Err(TensorError::invalid(
            "conv_transpose1d",
            format!(
                "input {:?} with weight {kernel:?}, stride {stride}, padding {padding}, \
                 output_padding {output_padding} and dilation {dilation} gives no valid output \
                 length ({length}); output_padding must be smaller than stride or dilation",
                input.shape()
            ),
        ));
    }
    let length = usize::try_from(length).map_err(|_| {
        TensorError::invalid(
            "conv_transpose1d",
            format!("output length {length} overflows"),
        )
    })?;
    let params = ConvParams::conv1d(stride, padding, dilation, groups);
    let op = ConvOp::BackwardInput {
        params,
        input_size: [1, length],
    };
    let mut y = Op::Conv(op).apply1(&[&x, weight])?;
    if let Some(b) = bias {
        let channels = y.shape()[1];
        y = y.add(&b.reshape(&[1, channels, 1])?)?;
    }
    unbatch(y, unbatched)
}
