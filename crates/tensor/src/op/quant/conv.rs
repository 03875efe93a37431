//! The static int8 conv2d, channels last: the patches of a block of output positions are
//! gathered into a u8 `[rows, kH*kW*C]` matrix (padding reads the input's zero point, which
//! stands for 0.0), multiplied with the `[C_out, kH*kW*C]` int8 weights by the int8 GEMM,
//! corrected for zero points and requantized to u8 rows of `C_out` channels, ReLU fused.
//! Groups other than 1 are refused.

use super::affine::QParams;
use super::direct_conv::DirectConv;
use super::linear::{Requantize, int8_product};
use super::weights::Weights;
use crate::cpu::tensor_from;
use crate::op::ConvParams;
use crate::op::conv::Geometry;
use crate::{Result, Tensor, TensorError};
use rayon::prelude::*;

/// The geometry of a quantized conv2d, or an error naming the op.
pub(super) fn geometry(
    op: &str,
    params: &ConvParams,
    x: &[usize],
    w: &[usize],
) -> Result<Geometry> {
    if params.spatial_dims != 2 || params.groups != 1 {
        return Err(TensorError::invalid(
            op,
            format!(
                "only 2-D convolutions with groups=1 are supported, got spatial_dims={} and groups={}",
                params.spatial_dims, params.groups
            ),
        ));
    }
    Geometry::new(*params, x, w).map_err(|e| match e {
        TensorError::ShapeMismatch {
            lhs, rhs, detail, ..
        } => TensorError::ShapeMismatch {
            op: op.into(),
            lhs,
            rhs,
            detail,
        },
        TensorError::InvalidArgument { msg, .. } => TensorError::invalid(op, msg),
        other => other,
    })
}

/// Fills `patches[rows, kH*kW*C]` with the windows of output rows `first..first + rows`
/// (row `r` is image `r / (oH*oW)`, position `r % (oH*oW)`) of channels-last `x [N, H, W, C]`:
/// each tap copies the `C` channels of one pixel, a kernel row inside the image copies its
/// `kW*C` bytes at once (undilated), and taps in the padding read `pad`.
fn im2row_nhwc(g: &Geometry, x: &[u8], pad: u8, first: usize, patches: &mut [u8]) {
    let p = &g.params;
    let (c, k) = (g.c_in, g.kh * g.kw * g.c_in);
    let positions = g.oh * g.ow;
    let span_w = (g.kw - 1) * p.dilation[1] + 1;
    // The output pixel of the first row, then advanced row by row (no division per row).
    let (mut img, position) = (first / positions.max(1), first % positions.max(1));
    let (mut oy, mut ox) = (position / g.ow.max(1), position % g.ow.max(1));
    for row in patches.chunks_exact_mut(k.max(1)) {
        let image = &x[img * g.h * g.w * c..][..g.h * g.w * c];
        let ix0 = (ox * p.stride[1]).wrapping_sub(p.padding[1]);
        let row_inside = ox * p.stride[1] >= p.padding[1] && ix0 + span_w <= g.w;
        for (i, taps) in row.chunks_exact_mut(g.kw * c).enumerate() {
            let iy = (oy * p.stride[0] + i * p.dilation[0]).wrapping_sub(p.padding[0]);
            if iy >= g.h {
                fill_bytes(taps, pad);
            } else if row_inside && p.dilation[1] == 1 {
                copy_bytes(taps, &image[(iy * g.w + ix0) * c..][..g.kw * c]);
            } else {
                for (j, tap) in taps.chunks_exact_mut(c).enumerate() {
                    let ix = ix0.wrapping_add(j * p.dilation[1]);
                    if ix < g.w {
                        copy_bytes(tap, &image[(iy * g.w + ix) * c..][..c]);
                    } else {
                        fill_bytes(tap, pad);
                    }
                }
            }
        }
        ox += 1;
        if ox == g.ow {
            (ox, oy) = (0, oy + 1);
            if oy == g.oh {
                (oy, img) = (0, img + 1);
            }
        }
    }
}

/// Calls `f` with the bytes of u8 `x [N, C, H, W]` in channels-last order `[N, H, W, C]`:
/// in place for a channels-last view, transposed plane by plane for a contiguous one (the
/// network's input, quantized from NCHW floats), gathered otherwise.
fn with_channels_last<R>(op: &str, x: &Tensor, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
    let nhwc = x.permute(&[0, 2, 3, 1])?;
    if nhwc.is_contiguous() || !x.is_contiguous() {
        return nhwc.with_slice(f);
    }
    let shape = x.shape();
    let (c, pixels) = (shape[1], shape[2] * shape[3]);
    let mut transposed = crate::cpu::try_uninit_buffer::<u8>(op, x.numel())?;
    x.with_slice(|x: &[u8]| {
        transposed
            .par_chunks_mut((c * pixels).max(1))
            .zip(x.par_chunks((c * pixels).max(1)))
            .for_each(|(dst, src)| {
                for (ch, plane) in src.chunks_exact(pixels.max(1)).enumerate() {
                    for (p, &v) in plane.iter().enumerate() {
                        dst[p * c + ch] = v;
                    }
                }
            })
    })?;
    let result = f(&transposed);
    crate::buffer_cache::recycle(transposed);
    Ok(result)
}

/// `dst.copy_from_slice(src[..dst.len()])` for the few bytes of a narrow layer's kernel row
/// (3 channels by 3 taps: 9 bytes), where a call to `memcpy` costs more than the copy: up to
/// 32 bytes move as two fixed-size, possibly overlapping, head and tail copies.
#[inline]
fn copy_bytes(dst: &mut [u8], src: &[u8]) {
    let n = dst.len();
    let src = &src[..n];
    match n {
        0..=3 => {
            for (d, &v) in dst.iter_mut().zip(src) {
                *d = v;
            }
        }
        4..=7 => {
            dst[..4].copy_from_slice(&src[..4]);
            dst[n - 4..].copy_from_slice(&src[n - 4..]);
        }
        8..=16 => {
            dst[..8].copy_from_slice(&src[..8]);
            dst[n - 8..].copy_from_slice(&src[n - 8..]);
        }
        17..=32 => {
            dst[..16].copy_from_slice(&src[..16]);
            dst[n - 16..].copy_from_slice(&src[n - 16..]);
        }
        _ => dst.copy_from_slice(src),
    }
}

/// `dst.fill(value)`, by a byte loop for the few bytes of a padded tap.
#[inline]
fn fill_bytes(dst: &mut [u8], value: u8) {
    if dst.len() >= 64 {
        dst.fill(value);
    } else {
        for d in dst {
            *d = value;
        }
    }
}

/// Whether every output row's window is its own input pixel: a 1x1 kernel, stride 1, no
/// padding. The channels-last input is then the patch matrix itself.
fn is_pointwise(g: &Geometry) -> bool {
    let p = &g.params;
    g.kh == 1 && g.kw == 1 && p.stride == [1, 1] && p.padding == [0, 0]
}

/// Output rows per parallel task: about four tasks per thread, in whole groups of four rows
/// (the GEMM's micro-kernel height), with at most 32 KiB of patches (`k` bytes a row) and
/// 512 rows, so that a task's patches stay in cache.
fn rows_per_task(rows: usize, k: usize) -> usize {
    let tasks = rayon::current_num_threads() * 4;
    let most = ((32 << 10) / k.max(1)).clamp(4, 512) / 4;
    rows.div_ceil(tasks).div_ceil(4).clamp(1, most) * 4
}

/// Inputs `x (u8 [N, C, H, W]), w (i8 [C_out, C, kH, kW]), w_scale, w_zero_point[, bias]`.
/// Runs channels last, as fbgemm does: `x` is read as `[N, H, W, C]` (in place when it is a
/// channels-last view, such as this op's own output), the weights are packed as
/// `[C_out, kH*kW*C]`, output rows are split over the thread pool (each task gathers its
/// patches, multiplies and requantizes them while they are in cache), and the result is a
/// channels-last view `[N, C_out, oH, oW]` over `[N, oH, oW, C_out]` storage.
pub(super) fn conv2d_static(
    inputs: &[&Tensor],
    params: &ConvParams,
    xq: QParams,
    outq: QParams,
    relu: bool,
) -> Result<Tensor> {
    let op = if relu {
        "quantized_conv2d_relu"
    } else {
        "quantized_conv2d"
    };
    let g = geometry(op, params, &inputs[0].shape(), &inputs[1].shape())?;
    let weight = inputs[1].permute(&[0, 2, 3, 1])?;
    let mut channels_last = inputs.to_vec();
    channels_last[1] = &weight;
    let w = Weights::cached(&channels_last)?;
    let (rows, k, n) = (g.n * g.oh * g.ow, w.k, w.n);
    let requantize = Requantize::new(&w, xq, outq, relu);
    let pad = xq.zero_point.clamp(0, 255) as u8;
    let mut out = crate::cpu::try_uninit_buffer::<u8>(op, rows * n)?;
    let per_task = rows_per_task(rows, k);
    // Few input channels (a first layer): no patches, the padded input read directly.
    let direct = if is_pointwise(&g) {
        None
    } else {
        DirectConv::new(&g, &weight, &w.zero_points)?
    };
    with_channels_last(op, inputs[0], |x: &[u8]| -> Result<()> {
        let padded = direct.as_ref().map(|d| d.pad(&g, x, pad));
        out.par_chunks_mut((per_task * n).max(1))
            .enumerate()
            .try_for_each(|(task, y)| -> Result<()> {
                let (first, count) = (task * per_task, y.len() / n.max(1));
                let product = if let (Some(direct), Some(input)) = (&direct, &padded) {
                    let mut acc = crate::cpu::try_uninit_buffer::<i32>(op, count * n)?;
                    direct.rows(&g, input, first, &mut acc);
                    (acc, vec![0; count])
                } else if is_pointwise(&g) {
                    int8_product(&x[first * k..(first + count) * k], count, &w, false)?
                } else {
                    let mut patches = crate::cpu::try_uninit_buffer::<u8>(op, count * k)?;
                    im2row_nhwc(&g, x, pad, first, &mut patches);
                    let product = int8_product(&patches, count, &w, false)?;
                    crate::buffer_cache::recycle(patches);
                    product
                };
                let (acc, row_sums) = product;
                requantize.rows(&acc, &row_sums, y);
                crate::buffer_cache::recycle(acc);
                Ok(())
            })
    })??;
    tensor_from(out, &[g.n, g.oh, g.ow, g.c_out]).permute(&[0, 3, 1, 2])
}
