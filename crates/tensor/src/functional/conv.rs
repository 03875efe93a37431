//! Convolution functions (conv1d, conv2d) with PyTorch's signatures; unbatched inputs gain and
//! lose a batch dimension around the batched op.

use crate::op::{ConvOp, Op};
use crate::{Result, Tensor};

/// Runs a convolution, treating an input with one dimension fewer than the weight as one
/// unbatched sample.
fn convolve(input: &Tensor, weight: &Tensor, bias: Option<&Tensor>, op: ConvOp) -> Result<Tensor> {
    let unbatched = input.ndim() + 1 == weight.ndim();
    let x = if unbatched {
        input.unsqueeze(0)?
    } else {
        input.clone()
    };
    let y = match bias {
        Some(b) => Op::Conv(op).apply1(&[&x, weight, b])?,
        None => Op::Conv(op).apply1(&[&x, weight])?,
    };
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
