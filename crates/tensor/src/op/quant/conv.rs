//! The static int8 conv2d: each image's patches are gathered into a u8 `[positions, K]`
//! matrix (padding reads the input's zero point, which stands for 0.0), multiplied with the
//! `[C_out, K]` int8 weights by the int8 GEMM, corrected for zero points and requantized to
//! u8 `[C_out, oH, oW]`, ReLU fused. Groups other than 1 are refused.

use super::affine::QParams;
use super::linear::{Requantize, Weights, int8_product};
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

/// Fills `rows[oH*oW, C*kH*kW]` with the patches of one image `x[C, H, W]`; windows that
/// lie inside the image copy whole kernel rows, the others check every tap.
fn im2row(g: &Geometry, x: &[u8], pad: u8, rows: &mut [u8]) {
    let p = &g.params;
    let k = g.c_in * g.kh * g.kw;
    let (span_h, span_w) = (
        (g.kh - 1) * p.dilation[0] + 1,
        (g.kw - 1) * p.dilation[1] + 1,
    );
    for oy in 0..g.oh {
        let iy0 = (oy * p.stride[0]).wrapping_sub(p.padding[0]);
        let rows_inside = oy * p.stride[0] >= p.padding[0] && iy0 + span_h <= g.h;
        for ox in 0..g.ow {
            let ix0 = (ox * p.stride[1]).wrapping_sub(p.padding[1]);
            let row = &mut rows[(oy * g.ow + ox) * k..][..k];
            let inside = rows_inside && ox * p.stride[1] >= p.padding[1] && ix0 + span_w <= g.w;
            if inside && p.dilation[1] == 1 {
                for (t, dst) in row.chunks_exact_mut(g.kw).enumerate() {
                    let (c, i) = (t / g.kh, t % g.kh);
                    let start = (c * g.h + iy0 + i * p.dilation[0]) * g.w + ix0;
                    // A byte loop: kernel rows are a few bytes, too short for memcpy.
                    for (d, &v) in dst.iter_mut().zip(&x[start..start + g.kw]) {
                        *d = v;
                    }
                }
                continue;
            }
            let mut t = 0;
            for c in 0..g.c_in {
                let plane = &x[c * g.h * g.w..][..g.h * g.w];
                for i in 0..g.kh {
                    let iy = iy0.wrapping_add(i * p.dilation[0]);
                    for j in 0..g.kw {
                        let ix = ix0.wrapping_add(j * p.dilation[1]);
                        row[t] = if iy < g.h && ix < g.w {
                            plane[iy * g.w + ix]
                        } else {
                            pad
                        };
                        t += 1;
                    }
                }
            }
        }
    }
}

/// Inputs `x (u8 [N, C, H, W]), w (i8 [C_out, C, kH, kW]), w_scale, w_zero_point[, bias]`.
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
    let w = Weights::read(inputs)?;
    let (positions, k) = (g.oh * g.ow, w.k);
    let image = g.c_in * g.h * g.w;
    let requantize = Requantize::new(&w, xq, outq, relu);
    let pad = xq.zero_point.clamp(0, 255) as u8;
    let mut out = crate::cpu::try_uninit_buffer::<u8>("quantized_conv", g.n * g.c_out * positions)?;
    let per_image = (g.c_out * positions).max(1);
    // Images in parallel with serial GEMMs when there are several; one image uses the
    // parallel GEMM.
    let parallel = g.n == 1;
    inputs[0].with_slice(|x: &[u8]| -> Result<()> {
        out.par_chunks_mut(per_image)
            .enumerate()
            .try_for_each(|(img, y)| -> Result<()> {
                let mut rows = vec![0u8; positions * k];
                im2row(&g, &x[img * image..][..image], pad, &mut rows);
                let (acc, row_sums) = int8_product(&rows, positions, &w, parallel)?;
                // Each output position's channels, then scattered to the channel planes.
                let mut channels = vec![0u8; w.n];
                for (p, (acc, &rs)) in acc.chunks_exact(w.n.max(1)).zip(&row_sums).enumerate() {
                    requantize.row(acc, rs, &mut channels);
                    for (co, &v) in channels.iter().enumerate() {
                        y[co * positions + p] = v;
                    }
                }
                Ok(())
            })
    })??;
    Ok(tensor_from(out, &g.output_shape()))
}
