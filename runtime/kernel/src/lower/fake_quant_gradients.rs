//! Lowering of the learnable fake-quantize backward (`fake_quantize_learnable_per_tensor_affine`
//! and `..._per_channel_affine`, LSQ) into one reduction kernel: its output loop is the
//! channel (none per tensor), its reduction loops every other dim of `x`. Per element it
//! computes the eager kernel's terms, operation for operation in f32: the zero point (the f32
//! one plus 0.5, clamped and truncated per tensor; rounded half to even and clamped per
//! channel; NaN giving 0), `q = round_half_even(zp + x * (1/scale))`, and
//! - inside `[quant_min, quant_max]`: `dX = dY`, `dScale = dY * (fq - x) * (1/scale) * f` with
//!   `fq = (q - zp) * scale`, `dZeroPoint = 0`;
//! - outside: `dX = 0`, `dScale = dY * (end - zp) * f` (`end` the bound passed),
//!   `dZeroPoint = -dY * scale * f`,
//!
//! where `f` is the op's `grad_factor` in f32. `dX` is stored in the sweep; the `dScale` and
//! `dZeroPoint` terms are summed in f64, as the eager kernel sums them, and rounded once to
//! f32. The eager kernel sums sequentially, the kernel in its own order (vector lanes on the
//! CPU, a tree on the GPU): a sum of f32 terms is exact in f64, and so equal in any order,
//! unless the terms span more than about 29 binary orders of magnitude; otherwise the two
//! differ by the f64 rounding of the partial sums, then at most one f32 rounding step.

use super::Lowering;
use super::fake_quant::{EXACT_RANGE, Steps};
use super::frame::{Frame, FrameMap, Local};
use crate::ValueId;
use crate::{BinaryFn, CompareFn, Expr, KernelBuilder, ReduceFn, Result, ScalarType, UnaryFn};
use std::collections::HashSet;
use tessera_fx::NodeId;
use tessera_tensor::Op;
use tessera_tensor::op::FakeQuantOp;

/// The learnable op whose backward `op` is: its range, axis and gradient factor.
fn learnable_backward(op: &Op) -> Option<((i64, i64), Option<usize>, f64)> {
    match *op {
        Op::FakeQuantBackward(FakeQuantOp::LearnablePerTensor {
            quant_min,
            quant_max,
            grad_factor,
        }) => Some(((quant_min, quant_max), None, grad_factor)),
        Op::FakeQuantBackward(FakeQuantOp::LearnablePerChannel {
            axis,
            quant_min,
            quant_max,
            grad_factor,
        }) => Some(((quant_min, quant_max), Some(axis), grad_factor)),
        _ => None,
    }
}

/// Whether `op` is a learnable fake-quantize backward, which this lowering generates.
pub(super) fn is_learnable_backward(op: &Op) -> bool {
    learnable_backward(op).is_some()
}

impl Lowering<'_> {
    /// Lowers learnable fake-quantize backward node `id` to one kernel, or runs its eager
    /// kernel (reported as a fallback) when the kernel IR cannot express it.
    pub(super) fn fake_quant_gradients(&mut self, id: &NodeId, op: &Op) -> Result<()> {
        if let Err(why) = self.fake_quant_gradients_kernel(id, op)? {
            self.not_generated(id, op, &why)?;
        }
        Ok(())
    }

    fn fake_quant_gradients_kernel(
        &mut self,
        id: &NodeId,
        op: &Op,
    ) -> Result<std::result::Result<(), String>> {
        let Some(((qmin, qmax), axis, grad_factor)) = learnable_backward(op) else {
            return Ok(Err("not a learnable fake-quantize backward".into()));
        };
        if qmin.abs() > EXACT_RANGE || qmax.abs() > EXACT_RANGE || qmin > qmax {
            return Ok(Err(format!(
                "the range [{qmin}, {qmax}] exceeds f32's exact integers"
            )));
        }
        let operands = self.operands(id)?;
        let &[grad, x, scale, zero_point] = operands.as_slice() else {
            return Ok(Err(format!("{} operands, not 4", operands.len())));
        };
        let metas = self.meta(id)?;
        let [dx_meta, ds_meta, dz_meta] = metas.as_slice() else {
            return Ok(Err(format!("{} outputs, not 3", metas.len())));
        };
        let shape = dx_meta.shape.clone();
        let nd = shape.len();
        // The channel (per channel) is the output loop, every other dim a reduction loop in
        // order; an input with none sweeps one loop of one element.
        let others: Vec<usize> = (0..nd).filter(|&d| Some(d) != axis).collect();
        let map: FrameMap = (0..nd)
            .map(|d| match axis {
                Some(a) if d == a => Some(0),
                Some(_) => others.iter().position(|&o| o == d).map(|l| l + 1),
                None => Some(d),
            })
            .collect();
        let domain: Vec<usize> = axis.map(|a| shape[a]).into_iter().collect();
        let mut reduce: Vec<usize> = others.iter().map(|&d| shape[d]).collect();
        if reduce.is_empty() {
            reduce.push(1);
        }
        let name = format!("k{}_{}", self.kernel_count(), op.name());
        let mut k = Frame::new(KernelBuilder::reduction(name, domain, reduce));
        let mut loaded = Vec::with_capacity(4);
        for (o, parameter) in [(grad, false), (x, false), (scale, true), (zero_point, true)] {
            let v = if parameter {
                self.parameter_operand(&mut k, &o, axis, &shape, &map)?
            } else {
                self.operand(&mut k, &o, &shape, &map)?
            };
            match v {
                Ok(v) if k.b.ty(v) == ScalarType::F32 => loaded.push(v),
                Ok(v) => return Ok(Err(format!("a {} operand", k.b.ty(v)))),
                Err(why) => return Ok(Err(why)),
            }
        }
        let terms = Terms {
            dy: loaded[0],
            x: loaded[1],
            scale: loaded[2],
            zero_point: loaded[3],
        };
        let [dx, dscale, dzero] = terms.push(&mut k.b, (qmin, qmax), axis, grad_factor);
        // A parameter is `[C]` along the output loop per channel, of one element otherwise.
        let parameter_map = |m: &tessera_tensor::TensorMeta| -> FrameMap {
            match axis {
                Some(_) => m.shape.iter().map(|_| Some(0)).collect(),
                None => m.shape.iter().map(|_| None).collect(),
            }
        };
        let locals = vec![
            Local {
                value: dx,
                shape: shape.clone(),
                map: Some(map),
            },
            Local {
                value: dscale,
                shape: ds_meta.shape.clone(),
                map: Some(parameter_map(ds_meta)),
            },
            Local {
                value: dzero,
                shape: dz_meta.shape.clone(),
                map: Some(parameter_map(dz_meta)),
            },
        ];
        k.locals.insert(*id, locals);
        self.emit_frame(k, &[*id], &HashSet::from([*id]))
    }
}

/// The loaded f32 values of one element: the upstream gradient, `x`, and its channel's scale
/// and float zero point.
struct Terms {
    dy: ValueId,
    x: ValueId,
    scale: ValueId,
    zero_point: ValueId,
}

impl Terms {
    /// `dX` of the element, and the sums over the reduction loops of its `dScale` and
    /// `dZeroPoint` terms (f64, rounded to f32).
    fn push(
        &self,
        b: &mut KernelBuilder,
        (qmin, qmax): (i64, i64),
        axis: Option<usize>,
        grad_factor: f64,
    ) -> [ValueId; 3] {
        let mut e = Steps { b };
        let (lo, hi) = (qmin as f64, qmax as f64);
        // The integer zero point, in f64.
        let zp = match axis {
            // `(zero_point + 0.5).clamp(lo, hi) as i64`.
            None => {
                let half = e.c(ScalarType::F32, 0.5);
                let z = e.bin(BinaryFn::Add, self.zero_point, half);
                let z = e.clamp(z, lo, hi);
                let z = e.cast(ScalarType::I64, z);
                e.cast(ScalarType::F64, z)
            }
            // `zero_point.round_ties_even().clamp(lo, hi) as i64`.
            Some(_) => {
                let z = e.round_half_even(self.zero_point);
                let z = e.clamp(z, lo, hi);
                let z = e.not_nan_or_zero(z);
                e.cast(ScalarType::F64, z)
            }
        };
        let zp32 = e.cast(ScalarType::F32, zp);
        let one = e.c(ScalarType::F32, 1.0);
        let inv = e.bin(BinaryFn::Div, one, self.scale);
        // q = round_half_even(zp + x * inv), NaN giving 0.
        let scaled = e.bin(BinaryFn::Mul, self.x, inv);
        let shifted = e.bin(BinaryFn::Add, zp32, scaled);
        let q = e.round_half_even(shifted);
        let q = e.not_nan_or_zero(q);
        let (lo32, hi32) = (e.c(ScalarType::F32, lo), e.c(ScalarType::F32, hi));
        let below = e.cmp(CompareFn::Lt, q, lo32);
        let above = e.cmp(CompareFn::Gt, q, hi32);
        let factor = e.c(ScalarType::F32, f64::from(grad_factor as f32));
        // Inside: dy * (fq - x) * inv * f, with fq = (q - zp) as f32 * scale.
        let q64 = e.cast(ScalarType::F64, q);
        let steps = e.bin(BinaryFn::Sub, q64, zp);
        let steps = e.cast(ScalarType::F32, steps);
        let fq = e.bin(BinaryFn::Mul, steps, self.scale);
        let error = e.bin(BinaryFn::Sub, fq, self.x);
        let ds_in = e.bin(BinaryFn::Mul, self.dy, error);
        let ds_in = e.bin(BinaryFn::Mul, ds_in, inv);
        let ds_in = e.bin(BinaryFn::Mul, ds_in, factor);
        // Outside: dy * (end - zp) as f32 * f, and -dy * scale * f.
        let (lo64, hi64) = (e.c(ScalarType::F64, lo), e.c(ScalarType::F64, hi));
        let end = e.select(below, lo64, hi64);
        let span = e.bin(BinaryFn::Sub, end, zp);
        let span = e.cast(ScalarType::F32, span);
        let ds_out = e.bin(BinaryFn::Mul, self.dy, span);
        let ds_out = e.bin(BinaryFn::Mul, ds_out, factor);
        let neg_dy =
            e.b.push(ScalarType::F32, Expr::Unary(UnaryFn::Neg, self.dy));
        let dz_out = e.bin(BinaryFn::Mul, neg_dy, self.scale);
        let dz_out = e.bin(BinaryFn::Mul, dz_out, factor);
        let zero = e.c(ScalarType::F32, 0.0);
        let pick = |e: &mut Steps, outside: ValueId, inside: ValueId| {
            let kept = e.select(above, outside, inside);
            e.select(below, outside, kept)
        };
        let dx = pick(&mut e, zero, self.dy);
        let ds = pick(&mut e, ds_out, ds_in);
        let dz = pick(&mut e, dz_out, zero);
        let [ds, dz] = [ds, dz].map(|term| {
            let wide = e.cast(ScalarType::F64, term);
            let sum = e.b.push(ScalarType::F64, Expr::Reduce(ReduceFn::Sum, wide));
            e.cast(ScalarType::F32, sum)
        });
        [dx, ds, dz]
    }
}
