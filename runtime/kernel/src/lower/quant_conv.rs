//! The static int8 conv2d (`quantized_conv2d(_relu)`) as one generated reduction kernel,
//! lowered only when [`crate::LowerOptions::product_kernels`] asks for product kernels (a
//! device): the CPU keeps the eager channels-last VNNI/AVX2 kernel, faster than a reduction.
//!
//! The kernel runs over the output `[N, C_out, oH, oW]` and the reduction loops
//! `[C_in, kH, kW]`: each tap `(x - x_zp) * (w[co, ci, i, j] - w_zp[co])` summed in i64, the
//! input read at row `oh * stride + i * dilation - pad` (columns likewise). Along an axis with
//! padding the taps are guarded loads ([`crate::guard`]) that give the input's zero point
//! outside the input, as eager pads its patches with it, so a padded tap adds 0; the sum is
//! then eager's corrected GEMM sum exactly, whatever the padding (a window wholly in the
//! padding included). The epilogue is the static int8 linear's
//! ([`Lowering::static_product`]: eager's f32 requantize with bias, clamp, rounding half to
//! even, output zero point). Stride, padding and dilation are eager's; groups other than 1
//! (which eager refuses) and a reduction `C_in * kH * kW` long enough for eager's i32 sum to
//! wrap run the eager kernel.

use super::Lowering;
use super::frame::{Frame, FrameMap};
use super::pool::Axis;
use super::quant_linear::{ProductOperands, StaticParams, eager_sum_fits, out_op_name};
use crate::{Bound, Expr, IndexExpr, KernelBuilder, Result, ScalarType, ValueId};
use tessera_fx::NodeId;
use tessera_tensor::DType;
use tessera_tensor::layout::Layout;
use tessera_tensor::op::ConvParams;

/// The kernel's loops: the output's `[N, C_out, oH, oW]`, then the reduction's `[C_in, kH, kW]`.
const LOOPS: usize = 7;

impl Lowering<'_> {
    /// The static int8 conv2d of node `id` with `params` as one reduction kernel; `Err` says
    /// why not.
    pub(super) fn static_conv_kernel(
        &mut self,
        id: &NodeId,
        params: &ConvParams,
        p: &StaticParams,
    ) -> Result<std::result::Result<(), String>> {
        if params.spatial_dims != 2 || params.groups != 1 {
            return Ok(Err(format!(
                "a {}-D convolution of {} groups",
                params.spatial_dims, params.groups
            )));
        }
        let Some(out) = self.meta(id)?.first().cloned() else {
            return Ok(Err("the op has no value".into()));
        };
        let operands = self.operands(id)?;
        if let Err(why) = self.product_dtypes(&operands, p.bias, DType::U8)? {
            return Ok(Err(why));
        }
        let x = self.value(&operands[0])?;
        let w_shape = self.value(&operands[1])?.layout.shape;
        let shape = out.shape.clone();
        let axes = match conv_axes(params, &x.layout.shape, &w_shape, &shape) {
            Ok(axes) => axes,
            Err(why) => return Ok(Err(why)),
        };
        let reduction = [w_shape[1], w_shape[2], w_shape[3]];
        let taps = reduction.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        if !taps.is_some_and(eager_sum_fits) {
            return Ok(Err(format!(
                "{reduction:?} products per output, whose sum the eager i32 GEMM may wrap"
            )));
        }
        let name = format!("k{}_{}", self.kernel_count(), out_op_name(self, id)?);
        let mut frame = Frame::new(KernelBuilder::reduction(
            name,
            shape.clone(),
            reduction.to_vec(),
        ));
        let buffer = Self::input_buffer(&mut frame, x.slot, ScalarType::U8);
        let fill = p.x_zero_point.clamp(0, 255) as f64;
        let mut loaded = vec![input_tap(&mut frame.b, buffer, &x.layout, &axes, fill)];
        let w_map: FrameMap = vec![Some(1), Some(4), Some(5), Some(6)];
        let channel_map: FrameMap = vec![Some(1)];
        for (i, o) in operands.iter().enumerate().skip(1) {
            let v = match i {
                1 => self.operand(&mut frame, o, &w_shape, &w_map)?,
                _ => self.operand(&mut frame, o, &shape[1..2], &channel_map)?,
            };
            match v {
                Ok(v) => loaded.push(v),
                Err(why) => return Ok(Err(why)),
            }
        }
        let operands = match ProductOperands::of(&frame.b, &loaded) {
            Ok(o) => o,
            Err(why) => return Ok(Err(why)),
        };
        self.static_product(id, frame, shape, &operands, p)
    }
}

/// The two spatial axes of a conv2d of `x [N, C, H, W]` by `w [C_out, C, kH, kW]` into `out`,
/// or why the shapes are not those of one (with groups 1).
fn conv_axes(
    params: &ConvParams,
    x: &[usize],
    w: &[usize],
    out: &[usize],
) -> std::result::Result<[Axis; 2], String> {
    let mismatch = || format!("input {x:?} and weight {w:?} for an output {out:?}");
    let (&[n, c, ..], &[c_out, w_c, ..], &[out_n, out_c, ..]) = (x, w, out) else {
        return Err(mismatch());
    };
    if x.len() != 4 || w.len() != 4 || out.len() != 4 || (n, c, c_out) != (out_n, w_c, out_c) {
        return Err(mismatch());
    }
    let axis = |a: usize| {
        Axis {
            output: out[2 + a],
            input: x[2 + a],
            kernel: w[2 + a],
            stride: params.stride[a],
            pad: params.padding[a],
            dilation: params.dilation[a],
        }
        .checked()
        .filter(|axis| expected_output(axis) == Some(axis.output))
    };
    match (axis(0), axis(1)) {
        (Some(rows), Some(cols)) => Ok([rows, cols]),
        _ => Err(mismatch()),
    }
}

/// The number of windows eager's geometry gives along `axis`: `(input + 2 * pad - span) /
/// stride + 1`, `span = (kernel - 1) * dilation + 1`; `None` when no window fits.
fn expected_output(axis: &Axis) -> Option<usize> {
    let padded = axis.pad.checked_mul(2)?.checked_add(axis.input)?;
    let span = (axis.kernel - 1)
        .checked_mul(axis.dilation)?
        .checked_add(1)?;
    let room = padded.checked_sub(span)?;
    Some(room / axis.stride.max(1) + 1)
}

/// The u8 input tap of `x` (seen with `layout`) at the kernel's point: image `n`, channel
/// `ci`, row `oh * stride + i * dilation - pad` and column likewise, a guarded load reading
/// `fill` (the input's zero point) outside the input along each axis with padding.
fn input_tap(
    b: &mut KernelBuilder,
    buffer: crate::BufferId,
    layout: &Layout,
    axes: &[Axis; 2],
    fill: f64,
) -> ValueId {
    let mut index = IndexExpr {
        offset: layout.offset,
        strides: vec![0; LOOPS],
    };
    index.strides[0] = layout.strides[0];
    index.strides[4] = layout.strides[1];
    let mut bounds = Vec::new();
    for (a, axis) in axes.iter().enumerate() {
        // The position in the padded input: `o * stride + k * dilation`.
        let mut coord = IndexExpr {
            offset: 0,
            strides: vec![0; LOOPS],
        };
        coord.strides[2 + a] = axis.stride;
        coord.strides[5 + a] = axis.dilation;
        let stride = layout.strides[2 + a];
        if axis.guarded() {
            bounds.push(Bound {
                coord,
                pad: axis.pad,
                len: axis.input,
                stride,
            });
        } else {
            for (s, c) in index.strides.iter_mut().zip(&coord.strides) {
                *s += c * stride;
            }
        }
    }
    let expr = if bounds.is_empty() {
        Expr::Load { buffer, index }
    } else {
        Expr::LoadIf {
            buffer,
            index,
            bounds,
            fill,
        }
    };
    b.push(ScalarType::U8, expr)
}
