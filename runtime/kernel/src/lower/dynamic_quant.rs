//! The per-call activation quantization of the dynamic int8 linear as kernels, bit for bit the
//! eager `linear_dynamic`: a reduction kernel storing the smallest and largest element of `x`
//! (NaN ignored, as eager's `f32::min`/`max` fold: NaN is replaced by the identity), then an
//! elementwise kernel quantizing `x` to u8 with fbgemm's parameters recomputed from those two
//! values exactly as [`tessera_tensor`]'s `dynamic_qparams` (widened to hold 0, an empty or
//! all-NaN range read as `(0, 0)`, the scale from f64 rounded to f32, 0.1 where it is 0 or its
//! reciprocal is not finite, the zero point from the end with the smaller error, rounded half
//! to even in f64 with NaN giving 0, clamped) and `quantize_f32` (the f32 reciprocal of the
//! scale, rounding half to even, clamped to `[0, 255]`, or `[0, 127]` with `reduce_range`).

use super::fake_quant::Steps;
use super::frame::{Frame, FrameMap};
use super::quant::requantize;
use super::{Lowering, Val};
use crate::{
    BinaryFn, CompareFn, Expr, IndexExpr, KernelBuilder, ReduceFn, Result, ScalarType, SlotId,
    UnaryFn, ValueId,
};
use tessera_fx::NodeId;
use tessera_tensor::{DType, TensorMeta};

/// The slots holding the smallest and largest element of `x` (f32 `[1]` each).
pub(super) struct XRange {
    pub(super) lo: SlotId,
    pub(super) hi: SlotId,
}

impl Lowering<'_> {
    /// The kernel reducing f32 `x` (of `shape`, node `id`'s operand `x_node`) to its range;
    /// `Err` says why not.
    pub(super) fn x_range(
        &mut self,
        id: &NodeId,
        x_node: &NodeId,
        shape: &[usize],
    ) -> Result<std::result::Result<XRange, String>> {
        let name = format!("k{}_dynamic_range", self.kernel_count());
        let mut k = Frame::new(KernelBuilder::reduction(name, vec![1], shape.to_vec()));
        let map: FrameMap = (1..=shape.len()).map(Some).collect();
        let x = match self.operand(&mut k, x_node, shape, &map)? {
            Ok(x) => x,
            Err(why) => return Ok(Err(why)),
        };
        if k.b.ty(x) != ScalarType::F32 {
            return Ok(Err(format!("a {} input", k.b.ty(x))));
        }
        let mut e = Steps { b: &mut k.b };
        let nan = e.cmp(CompareFn::Ne, x, x);
        let mut extreme = |f: ReduceFn| {
            let identity = e.c(ScalarType::F32, f.identity());
            let v = e.select(nan, identity, x);
            e.b.push(ScalarType::F32, Expr::Reduce(f, v))
        };
        let lo = extreme(ReduceFn::Min);
        let hi = extreme(ReduceFn::Max);
        let meta = TensorMeta::new(vec![1], DType::F32);
        let slots = self.emit_values(k, id, vec![(lo, meta.clone()), (hi, meta)])?;
        Ok(Ok(XRange {
            lo: slots[0].slot,
            hi: slots[1].slot,
        }))
    }

    /// The elementwise kernel quantizing f32 `x` (node `x_node`, of `shape`) to a new packed
    /// u8 slot with the parameters of `range`.
    pub(super) fn quantize_x(
        &mut self,
        id: &NodeId,
        x_node: &NodeId,
        shape: &[usize],
        range: &XRange,
        reduce_range: bool,
    ) -> Result<std::result::Result<Val, String>> {
        let name = format!("k{}_dynamic_quantize", self.kernel_count());
        let mut k = Frame::new(KernelBuilder::new(name, shape.to_vec()));
        let map: FrameMap = (0..shape.len()).map(Some).collect();
        let x = match self.operand(&mut k, x_node, shape, &map)? {
            Ok(x) => x,
            Err(why) => return Ok(Err(why)),
        };
        let (scale, zero_point) = x_qparams(&mut k, range, reduce_range);
        let b = &mut k.b;
        let mut e = Steps { b };
        let one = e.c(ScalarType::F32, 1.0);
        let inverse = e.bin(BinaryFn::Div, one, scale);
        let scaled = e.bin(BinaryFn::Mul, x, inverse);
        let q = requantize(b, scaled, zero_point, (0.0, qmax(reduce_range)));
        let q = Steps { b }.cast(ScalarType::U8, q);
        let meta = TensorMeta::new(shape.to_vec(), DType::U8);
        Ok(Ok(self.emit_values(k, id, vec![(q, meta)])?.remove(0)))
    }
}

/// The top of the activations' range.
fn qmax(reduce_range: bool) -> f64 {
    if reduce_range { 127.0 } else { 255.0 }
}

/// The value of 0-d slot `slot` (an f32 `[1]`) at every point of `k`.
fn scalar_load(k: &mut Frame, slot: SlotId) -> ValueId {
    let buffer = Lowering::input_buffer(k, slot, ScalarType::F32);
    let index = IndexExpr {
        offset: 0,
        strides: vec![0; k.b.loop_count()],
    };
    k.b.push(ScalarType::F32, Expr::Load { buffer, index })
}

/// The activations' f32 scale and f64 zero point computed in `k` from `range`, as eager's
/// `dynamic_qparams` (see the module's doc).
pub(super) fn x_qparams(k: &mut Frame, range: &XRange, reduce_range: bool) -> (ValueId, ValueId) {
    let top = qmax(reduce_range);
    let lo = scalar_load(k, range.lo);
    let hi = scalar_load(k, range.hi);
    let mut e = Steps { b: &mut k.b };
    let f32_zero = e.c(ScalarType::F32, 0.0);
    // An empty or all-NaN input: `(0, 0)`.
    let ordered = e.cmp(CompareFn::Le, lo, hi);
    let lo = e.select(ordered, lo, f32_zero);
    let hi = e.select(ordered, hi, f32_zero);
    // `min.min(0.0)`, `max.max(0.0)` (neither is NaN here), widened.
    let negative = e.cmp(CompareFn::Lt, lo, f32_zero);
    let min = e.select(negative, lo, f32_zero);
    let positive = e.cmp(CompareFn::Gt, hi, f32_zero);
    let max = e.select(positive, hi, f32_zero);
    let min = e.cast(ScalarType::F64, min);
    let max = e.cast(ScalarType::F64, max);
    let (qmin, qmax) = (e.c(ScalarType::F64, 0.0), e.c(ScalarType::F64, top));
    let span = e.bin(BinaryFn::Sub, max, min);
    let steps = e.bin(BinaryFn::Sub, qmax, qmin);
    let scale = e.bin(BinaryFn::Div, span, steps);
    let scale = e.cast(ScalarType::F32, scale);
    // 0.1 where the scale is 0 or its reciprocal is not finite (NaN or infinite).
    let one = e.c(ScalarType::F32, 1.0);
    let inverse = e.bin(BinaryFn::Div, one, scale);
    let magnitude =
        e.b.push(ScalarType::F32, Expr::Unary(UnaryFn::Abs, inverse));
    let infinity = e.c(ScalarType::F32, f64::INFINITY);
    let finite = e.cmp(CompareFn::Lt, magnitude, infinity);
    let zero = e.cmp(CompareFn::Eq, scale, f32_zero);
    let tenth = e.c(ScalarType::F32, f64::from(0.1f32));
    let scale = e.select(finite, scale, tenth);
    let scale = e.select(zero, tenth, scale);
    let s = e.cast(ScalarType::F64, scale);
    let min_steps = e.bin(BinaryFn::Div, min, s);
    let max_steps = e.bin(BinaryFn::Div, max, s);
    let from_min = e.bin(BinaryFn::Sub, qmin, min_steps);
    let from_max = e.bin(BinaryFn::Sub, qmax, max_steps);
    let abs = |e: &mut Steps, v| e.b.push(ScalarType::F64, Expr::Unary(UnaryFn::Abs, v));
    let (qmin_abs, min_abs) = (abs(&mut e, qmin), abs(&mut e, min_steps));
    let (qmax_abs, max_abs) = (abs(&mut e, qmax), abs(&mut e, max_steps));
    let err_min = e.bin(BinaryFn::Add, qmin_abs, min_abs);
    let err_max = e.bin(BinaryFn::Add, qmax_abs, max_abs);
    let by_min = e.cmp(CompareFn::Lt, err_min, err_max);
    let initial = e.select(by_min, from_min, from_max);
    let rounded = e.round_half_even(initial);
    let rounded = e.not_nan_or_zero(rounded);
    let zero_point = e.clamp(rounded, 0.0, top);
    (scale, zero_point)
}
