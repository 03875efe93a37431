//! Lowering of the elementwise quantized ops into one kernel each, bit for bit the eager
//! kernels (`tessera_tensor`'s `op/quant/affine.rs` and `add.rs`):
//!
//! - `quantize_per_tensor` / `quantize_per_channel` (any axis) of f32 or f64 to u8, i8 or
//!   i32: `clamp(rne(x * (1/scale)) + zp, qmin, qmax)` with the f32 reciprocal and product
//!   for f32 inputs, `rne(x / scale)` in f64 for f64 ones (NaN rounding to 0), the sum and
//!   the clamp in f64, where a rounded value beyond 2^53 lies outside the range on the same
//!   side as eager's saturating i64 sum. Per channel, a scale that is not positive and finite
//!   or a zero point outside the range fails the run as the eager kernel does: the scale is
//!   read through a gather checked on `zero_point - qmin` (made -1 by a bad scale) against
//!   the range's size ([`crate::KernelError::IndexOutOfRange`]). An empty per-channel input
//!   whose channels eager still checks runs the eager kernel (the kernel has no point to
//!   check them at).
//! - `dequantize_per_tensor` / `dequantize_per_channel`: `(q - zp) as f32 * scale`, the
//!   difference in i64 and converted through f64 (exact while `|q - zp| < 2^53`, so for every
//!   zero point a quantized tensor can have).
//! - `quantized_add(_relu)`: `(a - a_zp) * a_scale + (b - b_zp) * b_scale` in f32, requantized
//!   to u8 as above, clamped below at the output zero point under ReLU.
//!
//! The u8 average pools are window and adaptive pooling kernels ([`super::quant_pool`]); the
//! int8 linears and conv2d are reduction kernels when product kernels are requested
//! ([`super::quant_linear`], [`super::quant_conv`]), else they run their eager kernels.

use super::Lowering;
use super::fake_quant::{Steps, checked_load};
use super::frame::{Frame, FrameMap, Local};
use crate::{BinaryFn, CompareFn, KernelBuilder, Result, ScalarType, ValueId};
use std::collections::HashSet;
use tessera_fx::NodeId;
use tessera_tensor::op::QuantOp;
use tessera_tensor::{DType, Op};

/// Whether `op` is a quantized op this lowering generates.
pub(super) fn lowered_quant(op: &Op) -> bool {
    matches!(
        op,
        Op::Quant(
            QuantOp::QuantizePerTensor { .. }
                | QuantOp::QuantizePerChannel { .. }
                | QuantOp::DequantizePerTensor { .. }
                | QuantOp::DequantizePerChannel { .. }
                | QuantOp::Add { .. }
        )
    )
}

/// The range of a quantized storage type, or why it is not one.
fn range_of(dtype: DType) -> std::result::Result<(i64, i64), String> {
    ScalarType::of_buffer(dtype)
        .and_then(ScalarType::int_range)
        .ok_or_else(|| format!("a {dtype:?} quantized type"))
}

impl Lowering<'_> {
    /// Lowers quantized node `id` to one kernel, or runs its eager kernel (reported as a
    /// fallback) when the kernel IR cannot express it.
    pub(super) fn quant(&mut self, id: &NodeId, op: &Op) -> Result<()> {
        if let Err(why) = self.quant_kernel(id, op)? {
            self.not_generated(id, op, &why)?;
        }
        Ok(())
    }

    fn quant_kernel(&mut self, id: &NodeId, op: &Op) -> Result<std::result::Result<(), String>> {
        let Op::Quant(q) = op else {
            return Ok(Err("not a quantized op".into()));
        };
        let Some(out) = self.meta(id)?.first().cloned() else {
            return Ok(Err("the op has no value".into()));
        };
        let shape = out.shape.clone();
        let map: FrameMap = (0..shape.len()).map(Some).collect();
        let name = format!("k{}_{}", self.kernel_count(), op.name());
        let mut k = Frame::new(KernelBuilder::reduction(name, shape.clone(), Vec::new()));
        let operands = self.operands(id)?;
        // The operands: the data at the output's shape, then the parameters along `axis`.
        let axis = match q {
            QuantOp::QuantizePerChannel { axis, .. } | QuantOp::DequantizePerChannel { axis } => {
                Some(*axis)
            }
            _ => None,
        };
        let data = if axis.is_some() { 1 } else { operands.len() };
        let mut loaded = Vec::with_capacity(operands.len());
        for (i, o) in operands.iter().enumerate() {
            let v = if i < data {
                self.operand(&mut k, o, &shape, &map)?
            } else {
                self.parameter_operand(&mut k, o, axis, &shape, &map)?
            };
            match v {
                Ok(v) => loaded.push(v),
                Err(why) => return Ok(Err(why)),
            }
        }
        let b = &mut k.b;
        let value = match (q, loaded.as_slice()) {
            (
                QuantOp::QuantizePerTensor {
                    scale,
                    zero_point,
                    dtype,
                },
                &[x],
            ) => {
                let range = match range_of(*dtype) {
                    Ok(r) => r,
                    Err(why) => return Ok(Err(why)),
                };
                let scale = match b.ty(x) {
                    // The eager kernel's f32 scale, and its reciprocal computed as it does.
                    ScalarType::F32 => f64::from(1.0 / *scale as f32),
                    ScalarType::F64 => *scale,
                    other => return Ok(Err(format!("quantizing {other} values"))),
                };
                let ty = b.ty(x);
                let scale = b.push(ty, crate::Expr::Const(scale));
                let zp = b.push(ScalarType::F64, crate::Expr::Const(*zero_point as f64));
                quantize(b, x, scale, zp, range, *dtype)
            }
            (QuantOp::QuantizePerChannel { dtype, .. }, &[x, scale, zero_point]) => {
                if shape.contains(&0) && self.channels(&operands[1])? > 0 {
                    return Ok(Err(
                        "an empty input whose channels the eager kernel checks".into()
                    ));
                }
                let range = match range_of(*dtype) {
                    Ok(r) => r,
                    Err(why) => return Ok(Err(why)),
                };
                let Some(scale) = checked_channel_scale(b, scale, zero_point, range) else {
                    return Ok(Err("a scale that is not a plain load".into()));
                };
                let mut e = Steps { b };
                let scale = match e.b.ty(x) {
                    ScalarType::F32 => {
                        let one = e.c(ScalarType::F32, 1.0);
                        e.bin(BinaryFn::Div, one, scale)
                    }
                    ScalarType::F64 => e.cast(ScalarType::F64, scale),
                    other => return Ok(Err(format!("quantizing {other} values"))),
                };
                let zp = e.cast(ScalarType::F64, zero_point);
                quantize(b, x, scale, zp, range, *dtype)
            }
            (QuantOp::DequantizePerTensor { scale, zero_point }, &[q]) => {
                let scale = b.push(ScalarType::F32, crate::Expr::Const(*scale as f32 as f64));
                let zp = b.push(ScalarType::I64, crate::Expr::Const(*zero_point as f64));
                dequantize(b, q, scale, zp)
            }
            (QuantOp::DequantizePerChannel { .. }, &[q, scale, zero_point]) => {
                dequantize(b, q, scale, zero_point)
            }
            (QuantOp::Add { relu, .. }, &[a, bv]) => add(b, q, a, bv, *relu),
            _ => return Ok(Err(format!("{} operands", loaded.len()))),
        };
        let value = match value {
            Ok(v) => v,
            Err(why) => return Ok(Err(why)),
        };
        k.locals.insert(
            *id,
            vec![Local {
                value,
                shape,
                map: Some(map),
            }],
        );
        self.emit_frame(k, &[*id], &HashSet::from([*id]))
    }

    /// The number of per-channel parameters node `o` holds.
    fn channels(&mut self, o: &NodeId) -> Result<usize> {
        Ok(self.value(o)?.layout.shape.iter().product())
    }
}

/// The per-channel `scale` read again through a gather that fails the run unless the scale
/// is positive and finite and the i64 `zero_point` lies in `[qmin, qmax]` (the eager checks).
fn checked_channel_scale(
    b: &mut KernelBuilder,
    scale: ValueId,
    zero_point: ValueId,
    (qmin, qmax): (i64, i64),
) -> Option<ValueId> {
    if b.ty(scale) != ScalarType::F32 || b.ty(zero_point) != ScalarType::I64 {
        return None;
    }
    let mut e = Steps { b };
    let zero = e.c(ScalarType::F32, 0.0);
    let infinity = e.c(ScalarType::F32, f64::INFINITY);
    let positive = e.cmp(CompareFn::Gt, scale, zero);
    let finite = e.cmp(CompareFn::Lt, scale, infinity);
    let low = e.c(ScalarType::I64, qmin as f64);
    let by = e.bin(BinaryFn::Sub, zero_point, low);
    let bad = e.c(ScalarType::I64, -1.0);
    let by = e.select(finite, by, bad);
    let by = e.select(positive, by, bad);
    checked_load(b, scale, by, usize::try_from(qmax - qmin + 1).ok()?)
}

/// `clamp(rne(x * inverse) + zp, qmin, qmax)` for an f32 `x` (`inverse` the f32 reciprocal of
/// the scale), or `clamp(rne(x / scale) + zp, ..)` for an f64 one, stored as `dtype`; `zp` is
/// an f64.
fn quantize(
    b: &mut KernelBuilder,
    x: ValueId,
    scale: ValueId,
    zp: ValueId,
    (qmin, qmax): (i64, i64),
    dtype: DType,
) -> std::result::Result<ValueId, String> {
    let ty = b.ty(x);
    let scaled = match ty {
        ScalarType::F32 => Steps { b }.bin(BinaryFn::Mul, x, scale),
        ScalarType::F64 => Steps { b }.bin(BinaryFn::Div, x, scale),
        other => return Err(format!("quantizing {other} values")),
    };
    let q = requantize(b, scaled, zp, (qmin as f64, qmax as f64));
    let Some(out) = ScalarType::of_buffer(dtype) else {
        return Err(format!("a {dtype:?} output"));
    };
    Ok(Steps { b }.cast(out, q))
}

/// `clamp(rne(scaled) + zp, lo, hi)` (NaN rounding to 0) as an i64, `zp` an f64: the sum and
/// the clamp in f64, exact below 2^53 and on the eager side of the range beyond.
pub(super) fn requantize(
    b: &mut KernelBuilder,
    scaled: ValueId,
    zp: ValueId,
    (lo, hi): (f64, f64),
) -> ValueId {
    let mut e = Steps { b };
    let rounded = e.round_half_even(scaled);
    let rounded = e.not_nan_or_zero(rounded);
    let rounded = e.cast(ScalarType::F64, rounded);
    let shifted = e.bin(BinaryFn::Add, rounded, zp);
    let clamped = e.clamp(shifted, lo, hi);
    e.cast(ScalarType::I64, clamped)
}

/// `(q - zp) as f32 * scale`: `q` a narrow integer, `zp` an i64, `scale` an f32.
fn dequantize(
    b: &mut KernelBuilder,
    q: ValueId,
    scale: ValueId,
    zp: ValueId,
) -> std::result::Result<ValueId, String> {
    let (tq, ts, tz) = (b.ty(q), b.ty(scale), b.ty(zp));
    if !tq.is_narrow_int() || ts != ScalarType::F32 || tz != ScalarType::I64 {
        return Err(format!(
            "dequantizing {tq} with a {ts} scale and {tz} zero point"
        ));
    }
    let mut e = Steps { b };
    let wide = e.cast(ScalarType::I64, q);
    let steps = e.bin(BinaryFn::Sub, wide, zp);
    let steps = e.cast(ScalarType::F32, steps);
    Ok(e.bin(BinaryFn::Mul, steps, scale))
}

/// The static int8 add of u8 `a` and `b` with the op's parameters, as the eager kernel.
fn add(
    b: &mut KernelBuilder,
    q: &QuantOp,
    a: ValueId,
    bv: ValueId,
    relu: bool,
) -> std::result::Result<ValueId, String> {
    let QuantOp::Add {
        a_scale,
        a_zero_point,
        b_scale,
        b_zero_point,
        out_scale,
        out_zero_point,
        ..
    } = *q
    else {
        return Err("not an add".into());
    };
    if b.ty(a) != ScalarType::U8 || b.ty(bv) != ScalarType::U8 {
        return Err(format!("adding {} and {}", b.ty(a), b.ty(bv)));
    }
    let mut e = Steps { b };
    let ra = real_value(&mut e, a, a_scale, a_zero_point);
    let rb = real_value(&mut e, bv, b_scale, b_zero_point);
    let sum = e.bin(BinaryFn::Add, ra, rb);
    let inverse = e.c(ScalarType::F32, f64::from(1.0 / out_scale as f32));
    let scaled = e.bin(BinaryFn::Mul, sum, inverse);
    let zp = e.c(ScalarType::F64, out_zero_point as f64);
    let lo = if relu {
        out_zero_point.clamp(0, 255)
    } else {
        0
    };
    let q = requantize(b, scaled, zp, (lo as f64, 255.0));
    Ok(Steps { b }.cast(ScalarType::U8, q))
}

/// `(f32::from(x) - zp as f32) * scale as f32` for a u8 `x`, as the eager add.
fn real_value(e: &mut Steps, x: ValueId, scale: f64, zp: i64) -> ValueId {
    let wide = e.cast(ScalarType::I64, x);
    let x = e.cast(ScalarType::F32, wide);
    let zp = e.c(ScalarType::F32, zp as f32 as f64);
    let scale = e.c(ScalarType::F32, scale as f32 as f64);
    let shifted = e.bin(BinaryFn::Sub, x, zp);
    e.bin(BinaryFn::Mul, shifted, scale)
}
