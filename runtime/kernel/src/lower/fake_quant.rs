//! Lowering of the learnable fake-quantize forwards (`fake_quantize_learnable_per_tensor_affine`
//! and `..._per_channel_affine`) into one elementwise kernel, bit for bit the eager kernel:
//! the f32 zero point rounded half to even and clamped to `[quant_min, quant_max]` (NaN
//! giving 0), then `(clamp(rne(x * (1/scale)) + zp, qmin, qmax) - zp) * scale` with the
//! reciprocal and the products in f32 and the integer steps in f64, where every value is an
//! exact integer (the range is lowered only when it fits in f32's 24-bit significand).
//!
//! The non-learnable variants (`fake_quantize_per_tensor_affine`, `..._per_channel_affine`)
//! take an i64 zero point, which the eager kernel requires to lie in `[quant_min,
//! quant_max]`: the kernel reads the scale through a gather checked on `zero_point -
//! quant_min` against the range's size, so a zero point outside it fails the run with
//! [`crate::KernelError::IndexOutOfRange`] (index `zero_point - quant_min`, size `quant_max -
//! quant_min + 1`) and an in-range one is the same integer in f32. Their backward is the
//! forward's mask applied to the gradient, one elementwise kernel; the learnable backward
//! (scale and zero-point gradients summed per channel) is `fake_quant_gradients.rs`.

use super::Lowering;
use super::frame::{FrameMap, Local};
use crate::{BinaryFn, CompareFn, Expr, KernelBuilder, Result, ScalarType, UnaryFn, ValueId};
use std::collections::HashSet;
use tessera_fx::NodeId;
use tessera_tensor::Op;
use tessera_tensor::op::FakeQuantOp;

/// The largest magnitude of `quant_min` and `quant_max` the kernel computes with: every
/// integer up to it is exact in f32, so the eager `qmin as f32` clamp bounds are exact.
pub(super) const EXACT_RANGE: i64 = 1 << 24;

/// 2^23: adding and subtracting it rounds a non-negative f32 below it to an integer, half to
/// even (the ulp of `[2^23, 2^24)` is 1).
const ROUNDING_OFFSET: f64 = 8_388_608.0;

/// 2^52, the same for an f64 (the ulp of `[2^52, 2^53)` is 1).
const ROUNDING_OFFSET_F64: f64 = 4_503_599_627_370_496.0;

/// What a fake-quantize node this lowering generates computes.
#[derive(Debug, Clone, Copy)]
pub(super) struct FakeQuantForm {
    range: (i64, i64),
    axis: Option<usize>,
    /// A float zero point (the learnable ops) rather than an i64 one.
    learnable: bool,
    /// The straight-through gradient `dX` of a non-learnable op rather than its forward.
    backward: bool,
}

/// The form of a fake-quantize op this lowering generates: every forward, and the backward
/// of the non-learnable ops (whose only gradient is elementwise).
pub(super) fn lowered_fake_quant(op: &Op) -> Option<FakeQuantForm> {
    let (f, backward) = match op {
        Op::FakeQuant(f) => (f, false),
        Op::FakeQuantBackward(
            f @ (FakeQuantOp::PerTensor { .. } | FakeQuantOp::PerChannel { .. }),
        ) => (f, true),
        _ => return None,
    };
    let (range, axis, learnable) = match *f {
        FakeQuantOp::PerTensor {
            quant_min,
            quant_max,
        } => ((quant_min, quant_max), None, false),
        FakeQuantOp::PerChannel {
            axis,
            quant_min,
            quant_max,
        } => ((quant_min, quant_max), Some(axis), false),
        FakeQuantOp::LearnablePerTensor {
            quant_min,
            quant_max,
            ..
        } => ((quant_min, quant_max), None, true),
        FakeQuantOp::LearnablePerChannel {
            axis,
            quant_min,
            quant_max,
            ..
        } => ((quant_min, quant_max), Some(axis), true),
    };
    Some(FakeQuantForm {
        range,
        axis,
        learnable,
        backward,
    })
}

impl Lowering<'_> {
    /// Lowers fake-quantize node `id` to one kernel, or runs its eager kernel (reported as a
    /// fallback) when the kernel IR cannot express it.
    pub(super) fn fake_quant(&mut self, id: &NodeId, op: &Op) -> Result<()> {
        if let Err(why) = self.fake_quant_kernel(id, op)? {
            self.not_generated(id, op, &why)?;
        }
        Ok(())
    }

    fn fake_quant_kernel(
        &mut self,
        id: &NodeId,
        op: &Op,
    ) -> Result<std::result::Result<(), String>> {
        let Some(FakeQuantForm {
            range: (qmin, qmax),
            axis,
            learnable,
            backward,
        }) = lowered_fake_quant(op)
        else {
            return Ok(Err("not a fake-quantize op this lowering generates".into()));
        };
        if qmin.abs() > EXACT_RANGE || qmax.abs() > EXACT_RANGE || qmin > qmax {
            return Ok(Err(format!(
                "the range [{qmin}, {qmax}] exceeds f32's exact integers"
            )));
        }
        let operands = self.operands(id)?;
        let (grad, operands) = match (backward, operands.split_first()) {
            (true, Some((grad, rest))) => (Some(*grad), rest),
            _ => (None, operands.as_slice()),
        };
        let &[x, scale, zero_point] = operands else {
            return Ok(Err(format!("{} operands, not 3", operands.len())));
        };
        let Some(out) = self.meta(id)?.first().cloned() else {
            return Ok(Err("the op has no value".into()));
        };
        if out.dtype != tessera_tensor::DType::F32 {
            return Ok(Err(format!("a {:?} output", out.dtype)));
        }
        let shape = out.shape.clone();
        let map: FrameMap = (0..shape.len()).map(Some).collect();
        let name = format!("k{}_{}", self.kernel_count(), op.name());
        let mut k =
            super::frame::Frame::new(KernelBuilder::reduction(name, shape.clone(), Vec::new()));
        let mut loaded = Vec::with_capacity(3);
        let zero_point_type = if learnable {
            ScalarType::F32
        } else {
            ScalarType::I64
        };
        let mut reads = vec![
            (x, None, ScalarType::F32),
            (scale, Some(axis), ScalarType::F32),
            (zero_point, Some(axis), zero_point_type),
        ];
        reads.extend(grad.map(|g| (g, None, ScalarType::F32)));
        for (o, per_channel, ty) in reads {
            let v = match per_channel {
                None => self.operand(&mut k, &o, &shape, &map)?,
                Some(axis) => self.parameter_operand(&mut k, &o, axis, &shape, &map)?,
            };
            match v {
                Ok(v) if k.b.ty(v) == ty => loaded.push(v),
                Ok(v) => return Ok(Err(format!("a {} operand", k.b.ty(v)))),
                Err(why) => return Ok(Err(why)),
            }
        }
        if !learnable {
            let Some(scale) = checked_scale(&mut k.b, loaded[1], loaded[2], (qmin, qmax)) else {
                return Ok(Err("a scale that is not a plain load".into()));
            };
            loaded[1] = scale;
            loaded[2] = k.b.push(ScalarType::F32, Expr::Cast(loaded[2]));
        }
        let value = match loaded.get(3) {
            Some(&grad) => straight_through(
                &mut k.b,
                grad,
                loaded[0],
                loaded[1],
                loaded[2],
                (qmin, qmax),
            ),
            None => forward(&mut k.b, loaded[0], loaded[1], loaded[2], (qmin, qmax)),
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
}

/// The load `scale` as a gather checked on the i64 `zero_point - qmin` against the range's
/// size (stride 0: an in-range zero point reads the same scale), or `None` when `scale` is
/// not a load.
fn checked_scale(
    b: &mut KernelBuilder,
    scale: ValueId,
    zero_point: ValueId,
    (qmin, qmax): (i64, i64),
) -> Option<ValueId> {
    let low = b.push(ScalarType::I64, Expr::Const(qmin as f64));
    let by = b.push(
        ScalarType::I64,
        Expr::Binary(BinaryFn::Sub, zero_point, low),
    );
    checked_load(b, scale, by, usize::try_from(qmax - qmin + 1).ok()?)
}

/// The load `value` again as a gather of stride 0 checked on the i64 `by` against `len`: the
/// same element where `by` lies in `0..len`, a failed run ([`crate::KernelError::IndexOutOfRange`])
/// elsewhere; `None` when `value` is not a load.
pub(super) fn checked_load(
    b: &mut KernelBuilder,
    value: ValueId,
    by: ValueId,
    len: usize,
) -> Option<ValueId> {
    let Expr::Load { buffer, index } = b.expr(value).clone() else {
        return None;
    };
    let status = b.buffer(
        crate::BufferRole::Scratch,
        ScalarType::I64,
        crate::gather::STATUS_LEN,
    );
    let ty = b.ty(value);
    Some(b.push(
        ty,
        Expr::Gather {
            buffer,
            index,
            by,
            stride: 0,
            len,
            status,
        },
    ))
}

/// The eager forward of one element, from `x`, its channel's `scale` and f32 `zero_point`.
fn forward(
    b: &mut KernelBuilder,
    x: ValueId,
    scale: ValueId,
    zero_point: ValueId,
    (qmin, qmax): (i64, i64),
) -> ValueId {
    let mut e = Steps { b };
    let (shifted, zp) = e.level(x, scale, zero_point, (qmin, qmax));
    let q = e.clamp(shifted, qmin as f64, qmax as f64);
    // (q - zp) as f32 * scale.
    let steps = e.bin(BinaryFn::Sub, q, zp);
    let steps = e.cast(ScalarType::F32, steps);
    e.bin(BinaryFn::Mul, steps, scale)
}

/// The straight-through gradient of a non-learnable op: `grad` where the forward's
/// `round_half_even(x * (1/scale)) + zero_point` lies in `[qmin, qmax]`, `0` elsewhere (the
/// eager kernel's mask, NaN rounding to 0, huge values outside).
fn straight_through(
    b: &mut KernelBuilder,
    grad: ValueId,
    x: ValueId,
    scale: ValueId,
    zero_point: ValueId,
    (qmin, qmax): (i64, i64),
) -> ValueId {
    let mut e = Steps { b };
    let (q, _) = e.level(x, scale, zero_point, (qmin, qmax));
    let lo = e.c(ScalarType::F64, qmin as f64);
    let hi = e.c(ScalarType::F64, qmax as f64);
    let below = e.cmp(CompareFn::Lt, q, lo);
    let above = e.cmp(CompareFn::Gt, q, hi);
    let zero = e.c(ScalarType::F32, 0.0);
    let kept = e.select(below, zero, grad);
    e.select(above, zero, kept)
}

/// Pushes the operations of the forward (the quantized ops' lowering and the learnable
/// gradients share them).
pub(super) struct Steps<'b> {
    pub(super) b: &'b mut KernelBuilder,
}

impl Steps<'_> {
    /// The quantized level before its clamp, `round_half_even(x * (1 / scale)) + zp` in f64
    /// (NaN rounding to 0), and the zero point `zp` the forward uses: the f32 `zero_point`
    /// rounded half to even and clamped to `[qmin, qmax]`, NaN giving 0 (an in-range integer
    /// is itself). Exact while `|x / scale| < 2^53 - 2^24`; beyond, the level lies outside the
    /// range on the same side as eager's saturating i64 sum.
    fn level(
        &mut self,
        x: ValueId,
        scale: ValueId,
        zero_point: ValueId,
        (qmin, qmax): (i64, i64),
    ) -> (ValueId, ValueId) {
        let zp = self.round_half_even(zero_point);
        let zp = self.clamp(zp, qmin as f64, qmax as f64);
        let zp = self.not_nan_or_zero(zp);
        let zp = self.cast(ScalarType::F64, zp);
        let one = self.c(ScalarType::F32, 1.0);
        let inv = self.bin(BinaryFn::Div, one, scale);
        let scaled = self.bin(BinaryFn::Mul, x, inv);
        let rounded = self.round_half_even(scaled);
        let rounded = self.not_nan_or_zero(rounded);
        let rounded = self.cast(ScalarType::F64, rounded);
        (self.bin(BinaryFn::Add, rounded, zp), zp)
    }

    pub(super) fn c(&mut self, ty: ScalarType, v: f64) -> ValueId {
        self.b.push(ty, Expr::Const(v))
    }

    pub(super) fn bin(&mut self, f: BinaryFn, a: ValueId, b: ValueId) -> ValueId {
        let ty = self.b.ty(a);
        self.b.push(ty, Expr::Binary(f, a, b))
    }

    pub(super) fn cmp(&mut self, f: CompareFn, a: ValueId, b: ValueId) -> ValueId {
        self.b.push(ScalarType::Bool, Expr::Compare(f, a, b))
    }

    pub(super) fn select(&mut self, cond: ValueId, a: ValueId, b: ValueId) -> ValueId {
        let ty = self.b.ty(a);
        self.b.push(ty, Expr::Select { cond, a, b })
    }

    pub(super) fn cast(&mut self, ty: ScalarType, v: ValueId) -> ValueId {
        self.b.push(ty, Expr::Cast(v))
    }

    /// `v` rounded to an integer, half to even: `|v| < 2^23` rounds through `|v| + 2^23`
    /// (2^52 for an f64), larger values (and infinities) are integers already; the sign is put
    /// back after (the rounding is symmetric). NaN stays NaN.
    pub(super) fn round_half_even(&mut self, v: ValueId) -> ValueId {
        let ty = self.b.ty(v);
        let magnitude = self.b.push(ty, Expr::Unary(UnaryFn::Abs, v));
        let offset = if ty == ScalarType::F64 {
            ROUNDING_OFFSET_F64
        } else {
            ROUNDING_OFFSET
        };
        let offset = self.c(ty, offset);
        let small = self.cmp(CompareFn::Lt, magnitude, offset);
        let up = self.bin(BinaryFn::Add, magnitude, offset);
        let down = self.bin(BinaryFn::Sub, up, offset);
        let rounded = self.select(small, down, magnitude);
        let zero = self.c(ty, 0.0);
        let negative = self.cmp(CompareFn::Lt, v, zero);
        let flipped = self.b.push(ty, Expr::Unary(UnaryFn::Neg, rounded));
        self.select(negative, flipped, rounded)
    }

    /// `v` clamped to `[lo, hi]` (NaN stays NaN).
    pub(super) fn clamp(&mut self, v: ValueId, lo: f64, hi: f64) -> ValueId {
        let ty = self.b.ty(v);
        let lo = self.c(ty, lo);
        let hi = self.c(ty, hi);
        let below = self.cmp(CompareFn::Lt, v, lo);
        let raised = self.select(below, lo, v);
        let above = self.cmp(CompareFn::Gt, raised, hi);
        self.select(above, hi, raised)
    }

    /// `v`, or 0 where it is NaN (the eager float-to-integer conversion).
    pub(super) fn not_nan_or_zero(&mut self, v: ValueId) -> ValueId {
        let ty = self.b.ty(v);
        let nan = self.cmp(CompareFn::Ne, v, v);
        let zero = self.c(ty, 0.0);
        self.select(nan, zero, v)
    }
}
