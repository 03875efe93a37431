//! 3-D convolution composed from the op table's conv2d: each kernel depth slice convolves the
//! input depths it reads (gathered with `index_select`, batched as `N * D_out` images), and
//! the slices' results are summed, so autograd, graphs and compilers see ordinary ops.

use super::conv::{batched, unbatch};
use super::conv2d;
use crate::{Result, Tensor, TensorError};

/// 3-D convolution (cross-correlation) of `input` `[N, C_in, D, H, W]` or `[C_in, D, H, W]`
/// with `weight` `[C_out, C_in/groups, kD, kH, kW]` plus an optional `bias` `[C_out]`;
/// `stride`, `padding` and `dilation` are `[depth, height, width]`.
pub fn conv3d(
    input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    stride: [usize; 3],
    padding: [usize; 3],
    dilation: [usize; 3],
    groups: usize,
) -> Result<Tensor> {
    let invalid = |msg: String| Err(TensorError::invalid("conv3d", msg));
    let (x, unbatched) = batched(input, 4)?;
    let (shape, kernel) = (x.shape(), weight.shape());
    if shape.len() != 5 || kernel.len() != 5 {
        return invalid(format!(
            "expected a 5-D input and weight, got input {:?} and weight {kernel:?}",
            input.shape()
        ));
    }
    if stride.contains(&0) || dilation.contains(&0) || kernel[2] == 0 {
        return invalid(format!(
            "stride {stride:?}, dilation {dilation:?} and kernel {kernel:?} must be positive"
        ));
    }
    let (n, c, d, h, w) = (shape[0], shape[1], shape[2], shape[3], shape[4]);
    let (out_channels, kd) = (kernel[0], kernel[2]);
    // Depth arithmetic in i128, so no size a caller passes can overflow it.
    let padded = d as i128 + 2 * padding[0] as i128;
    let span = dilation[0] as i128 * (kd as i128 - 1) + 1;
    if padded < span {
        return invalid(format!(
            "input {:?} is smaller in depth than the dilated kernel {kernel:?} (padding {padding:?})",
            input.shape()
        ));
    }
    let depth_out = ((padded - span) / stride[0] as i128 + 1) as usize;
    let x = if padding[0] > 0 {
        let zeros = Tensor::zeros(&[n, c, padding[0], h, w], x.dtype())?;
        Tensor::cat(&[&zeros, &x, &zeros], 2)?
    } else {
        x
    };
    let mut sum: Option<Tensor> = None;
    for tap in 0..kd {
        let depths: Vec<i64> = (0..depth_out)
            .map(|o| (o * stride[0] + tap * dilation[0]) as i64)
            .collect();
        let slices = x.index_select(2, &Tensor::from_vec(depths, &[depth_out])?)?;
        let images = slices
            .permute(&[0, 2, 1, 3, 4])?
            .reshape(&[n * depth_out, c, h, w])?;
        let y = conv2d(
            &images,
            &weight.select(2, tap)?,
            None,
            [stride[1], stride[2]],
            [padding[1], padding[2]],
            [dilation[1], dilation[2]],
            groups,
        )?;
        sum = Some(match sum {
            Some(s) => s.add(&y)?,
            None => y,
        });
    }
    let Some(mut y) = sum else {
        return invalid("the kernel has no depth".into());
    };
    if let Some(b) = bias {
        y = y.add(&b.reshape(&[1, out_channels, 1, 1])?)?;
    }
    let [ho, wo] = [y.shape()[2], y.shape()[3]];
    let y = y
        .reshape(&[n, depth_out, out_channels, ho, wo])?
        .permute(&[0, 2, 1, 3, 4])?
        .contiguous()?;
    unbatch(y, unbatched)
}
