//! The static int8 conv2d: each image's patches are gathered into a u8 `[positions, K]`
//! matrix (padding reads the input's zero point, which stands for 0.0), multiplied with the
//! `[C_out, K]` int8 weights by the int8 GEMM, corrected for zero points and requantized to
//! u8 `[C_out, oH, oW]`, ReLU fused. Groups other than 1 are refused.

use super::affine::QParams;
use super::linear::{Weights, int8_product, requantize};
use crate::cpu::tensor_from;
use crate::op::ConvParams;
use crate::op::conv::Geometry;
use crate::{Result, Tensor, TensorError};

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

/// Fills `rows[oH*oW, C*kH*kW]` with the patches of one image `x[C, H, W]`.
fn im2row(g: &Geometry, x: &[u8], pad: u8, rows: &mut [u8]) {
    let p = &g.params;
    let k = g.c_in * g.kh * g.kw;
    for oy in 0..g.oh {
        for ox in 0..g.ow {
            let row = &mut rows[(oy * g.ow + ox) * k..][..k];
            let mut t = 0;
            for c in 0..g.c_in {
                let plane = &x[c * g.h * g.w..][..g.h * g.w];
                for i in 0..g.kh {
                    let iy = (oy * p.stride[0] + i * p.dilation[0]).wrapping_sub(p.padding[0]);
                    for j in 0..g.kw {
                        let ix = (ox * p.stride[1] + j * p.dilation[1]).wrapping_sub(p.padding[1]);
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
    let scales: Vec<f32> = w.scales.iter().map(|s| s * xq.scale).collect();
    let pad = xq.zero_point.clamp(0, 255) as u8;
    let mut out = vec![0u8; g.n * g.c_out * positions];
    inputs[0].with_slice(|x: &[u8]| -> Result<()> {
        let mut rows = vec![0u8; positions * k];
        for (img, y) in out.chunks_mut((g.c_out * positions).max(1)).enumerate() {
            im2row(&g, &x[img * image..][..image], pad, &mut rows);
            let (acc, row_sums) = int8_product(&rows, positions, &w)?;
            for (p, (acc, &rs)) in acc.chunks(w.n.max(1)).zip(&row_sums).enumerate() {
                for (co, &raw) in acc.iter().enumerate() {
                    let mut real = w.correct(raw, rs, xq.zero_point, co) as f32 * scales[co];
                    if let Some(b) = &w.bias {
                        real += b[co];
                    }
                    y[co * positions + p] = requantize(real, outq, relu);
                }
            }
        }
        Ok(())
    })??;
    Ok(tensor_from(out, &g.output_shape()))
}
