//! The int8 linears (`quantized_linear(_relu)`, `linear_dynamic_int8`) as generated kernels,
//! lowered only when [`crate::LowerOptions::product_kernels`] asks for product kernels (a
//! device): the CPU keeps the eager packed u8 x i8 GEMM, faster than a reduction kernel.
//!
//! The static linear is one reduction kernel over the output `[.., N]` and the reduction loop
//! `[K]`: each tap `(x - x_zp) * (w[n, k] - w_zp[n])` summed in i64, which is the eager
//! corrected sum (`raw - w_zp * row_sum - x_zp * col_sum + K * x_zp * w_zp`) exactly (both are
//! the same integer, and wrap alike in i64). Its epilogue is eager's `Requantize` in f32:
//! `multiplier = (x_scale * w_scale[n]) / out_scale`, `shift = bias[n] / out_scale + out_zp`
//! (`out_zp` without bias), `v = f32(acc) * multiplier + shift` (a product and a sum, never
//! fused), clamped to `[lo, 255]` (`lo = out_zp` under ReLU, else 0), rounded half to even,
//! NaN to 0 (eager's scalar path; its SIMD path gives `lo`, which only a NaN bias reaches).
//! Per-channel parameters of one element are read with stride 0. A reduction long enough for
//! eager's i32 GEMM to wrap (`K * 255 * 128 > i32::MAX`) runs the eager kernel. The static
//! int8 conv2d ([`super::quant_conv`]) ends in the same epilogue ([`Lowering::static_product`]).

use super::dynamic_quant::x_qparams;
use super::fake_quant::Steps;
use super::frame::{Frame, FrameMap, Local};
use super::{Lowering, Val};
use crate::{BinaryFn, Expr, KernelBuilder, ReduceFn, Result, ScalarType, ValueId};
use std::collections::HashSet;
use tessera_fx::NodeId;
use tessera_tensor::op::QuantOp;
use tessera_tensor::{DType, Op};

/// Whether `op` is one of the int8 products this lowering generates: the linears and the
/// static conv2d.
pub(super) fn is_int8_product(op: &Op) -> bool {
    matches!(
        op,
        Op::Quant(QuantOp::Linear { .. } | QuantOp::LinearDynamic { .. } | QuantOp::Conv2d { .. })
    )
}

/// Whether a reduction of `k` u8 x i8 products is short enough for eager's i32 GEMM sum not
/// to wrap.
pub(super) fn eager_sum_fits(k: usize) -> bool {
    (k as u128) * 255 * 128 <= i32::MAX as u128
}

/// A static int8 product's parameters, as the eager kernel converts them.
pub(super) struct StaticParams {
    x_scale: f32,
    pub(super) x_zero_point: i64,
    out_scale: f32,
    out_zero_point: f32,
    relu: bool,
    pub(super) bias: bool,
}

impl StaticParams {
    /// The parameters of a static int8 op's attributes (`relu` and `bias` as given).
    fn new(x: (f64, i64), out: (f64, i64), relu: bool, bias: bool) -> StaticParams {
        StaticParams {
            x_scale: x.0 as f32,
            x_zero_point: x.1,
            out_scale: out.0 as f32,
            out_zero_point: out.1.clamp(0, 255) as f32,
            relu,
            bias,
        }
    }
}

/// The loaded operands of an int8 product, at an output point and reduction index: x (u8),
/// w (i8), and the per-output-channel w_scale (f32), w_zero_point (i64) and bias (f32).
pub(super) struct ProductOperands {
    pub(super) x: ValueId,
    pub(super) w: ValueId,
    pub(super) w_scale: ValueId,
    pub(super) w_zero_point: ValueId,
    pub(super) bias: Option<ValueId>,
}

/// The dtypes of an int8 product's graph operands: x, w, w_scale, w_zero_point, bias.
const OPERAND_DTYPES: [DType; 5] = [DType::U8, DType::I8, DType::F32, DType::I64, DType::F32];

impl ProductOperands {
    /// The operands from their loaded values (x, w, w_scale, w_zero_point[, bias]), or why
    /// their types are not those of an int8 product.
    pub(super) fn of(
        b: &KernelBuilder,
        loaded: &[ValueId],
    ) -> std::result::Result<ProductOperands, String> {
        for (i, (&v, dtype)) in loaded.iter().zip(OPERAND_DTYPES).enumerate() {
            let ty = ScalarType::of_buffer(dtype);
            if Some(b.ty(v)) != ty {
                return Err(format!("operand {i} is {}, not {dtype:?}", b.ty(v)));
            }
        }
        let [x, w, w_scale, w_zero_point, rest @ ..] = loaded else {
            return Err(format!("{} operands", loaded.len()));
        };
        Ok(ProductOperands {
            x: *x,
            w: *w,
            w_scale: *w_scale,
            w_zero_point: *w_zero_point,
            bias: rest.first().copied(),
        })
    }
}

/// An int8 product's input shape `[.., K]` and output shape `[.., N]`.
type InOutShapes = (Vec<usize>, Vec<usize>);

/// The kernel of an int8 product being built, over the output `shape`, and its operands.
struct ProductFrame {
    frame: Frame,
    shape: Vec<usize>,
    operands: ProductOperands,
}

impl Lowering<'_> {
    /// Lowers int8 product node `id` (a linear or the static conv2d) to its kernels, or runs
    /// its eager kernel (reported as a fallback) when the kernel IR cannot express it.
    pub(super) fn int8_product(&mut self, id: &NodeId, op: &Op) -> Result<()> {
        let attempt = match op {
            Op::Quant(QuantOp::Linear {
                x_scale,
                x_zero_point,
                out_scale,
                out_zero_point,
                relu,
                bias,
            }) => {
                let x = (*x_scale, *x_zero_point);
                let params = StaticParams::new(x, (*out_scale, *out_zero_point), *relu, *bias);
                self.static_linear_kernel(id, &params)?
            }
            Op::Quant(QuantOp::Conv2d {
                params,
                x_scale,
                x_zero_point,
                out_scale,
                out_zero_point,
                relu,
                bias,
            }) => {
                let x = (*x_scale, *x_zero_point);
                let p = StaticParams::new(x, (*out_scale, *out_zero_point), *relu, *bias);
                self.static_conv_kernel(id, params, &p)?
            }
            Op::Quant(QuantOp::LinearDynamic { bias, reduce_range }) => {
                self.dynamic_linear_kernels(id, *bias, *reduce_range)?
            }
            _ => Err("not an int8 product".into()),
        };
        if let Err(why) = attempt {
            self.not_generated(id, op, &why)?;
        }
        Ok(())
    }

    /// Whether node `id`'s operands make an int8 product this lowering generates (x of
    /// `x_dtype`, `[.., K]`, i8 weights `[N, K]`, f32 scales, i64 zero points, f32 bias, and a
    /// sum eager's i32 GEMM cannot wrap): the input's and output's shapes, or why not.
    fn product_check(
        &mut self,
        id: &NodeId,
        bias: bool,
        x_dtype: DType,
    ) -> Result<std::result::Result<InOutShapes, String>> {
        let Some(out) = self.meta(id)?.first().cloned() else {
            return Ok(Err("the op has no value".into()));
        };
        let operands = self.operands(id)?;
        if let Err(why) = self.product_dtypes(&operands, bias, x_dtype)? {
            return Ok(Err(why));
        }
        let x_shape = self.value(&operands[0])?.layout.shape;
        let w_shape = self.value(&operands[1])?.layout.shape;
        let shape = out.shape.clone();
        let (&[n, k], Some(&out_n)) = (w_shape.as_slice(), shape.last()) else {
            return Ok(Err(format!("weight {w_shape:?} for an output {shape:?}")));
        };
        if out_n != n || x_shape.last() != Some(&k) || x_shape.len() != shape.len() {
            return Ok(Err(format!(
                "input {x_shape:?} and weight {w_shape:?} for an output {shape:?}"
            )));
        }
        if !eager_sum_fits(k) {
            return Ok(Err(format!(
                "{k} products per output, whose sum the eager i32 GEMM may wrap"
            )));
        }
        Ok(Ok((x_shape, shape)))
    }

    /// Whether the graph `operands` of an int8 product are x of `x_dtype`, i8 weights, f32
    /// scales, i64 zero points and, when `bias`, an f32 bias; `Err` says why not.
    pub(super) fn product_dtypes(
        &self,
        operands: &[NodeId],
        bias: bool,
        x_dtype: DType,
    ) -> Result<std::result::Result<(), String>> {
        if operands.len() != 4 + usize::from(bias) {
            return Ok(Err(format!("{} operands", operands.len())));
        }
        let want = std::iter::once(x_dtype).chain(OPERAND_DTYPES.into_iter().skip(1));
        for (i, (o, want)) in operands.iter().zip(want).enumerate() {
            let dtype = self.program.slot(self.value(o)?.slot).meta.dtype;
            if dtype != want {
                return Ok(Err(format!("operand {i} is {dtype:?}, not {want:?}")));
            }
        }
        Ok(Ok(()))
    }

    /// A reduction kernel over the output `[.., N]` and `[K]` for node `id` (x `[.., K]`, w
    /// `[N, K]`), with the operands loaded, the u8 x from `x` when given; `Err` says why not.
    fn product_frame(
        &mut self,
        id: &NodeId,
        bias: bool,
        x: Option<Val>,
    ) -> Result<std::result::Result<ProductFrame, String>> {
        let x_dtype = if x.is_some() { DType::F32 } else { DType::U8 };
        let (x_shape, shape) = match self.product_check(id, bias, x_dtype)? {
            Ok(shapes) => shapes,
            Err(why) => return Ok(Err(why)),
        };
        let operands = self.operands(id)?;
        let (n, k) = (shape[shape.len() - 1], x_shape[x_shape.len() - 1]);
        let rows = &shape[..shape.len() - 1];
        let r = rows.len();
        let reduce_loop = shape.len();
        let name = format!("k{}_{}", self.kernel_count(), out_op_name(self, id)?);
        let mut frame = Frame::new(KernelBuilder::reduction(name, shape.clone(), vec![k]));
        let x_map: FrameMap = (0..r).map(Some).chain([Some(reduce_loop)]).collect();
        let w_map: FrameMap = vec![Some(r), Some(reduce_loop)];
        let channel_map: FrameMap = vec![Some(r)];
        let mut loaded = Vec::with_capacity(operands.len());
        for (i, o) in operands.iter().enumerate() {
            let v = match i {
                0 => match &x {
                    Some(v) => self.load(&mut frame, v.slot, &v.layout, &x_shape, &x_map)?,
                    None => self.operand(&mut frame, o, &x_shape, &x_map)?,
                },
                1 => self.operand(&mut frame, o, &[n, k], &w_map)?,
                _ => self.operand(&mut frame, o, &[n], &channel_map)?,
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
        Ok(Ok(ProductFrame {
            frame,
            shape,
            operands,
        }))
    }

    fn static_linear_kernel(
        &mut self,
        id: &NodeId,
        p: &StaticParams,
    ) -> Result<std::result::Result<(), String>> {
        let ProductFrame {
            frame,
            shape,
            operands,
        } = match self.product_frame(id, p.bias, None)? {
            Ok(f) => f,
            Err(why) => return Ok(Err(why)),
        };
        self.static_product(id, frame, shape, &operands, p)
    }

    /// Emits the static int8 product of node `id` over the output loops `shape` of `frame`,
    /// whose reduction loops walk the taps of `o`: the centred sum requantized to u8 as
    /// eager's `Requantize` (see the module's doc).
    pub(super) fn static_product(
        &mut self,
        id: &NodeId,
        mut frame: Frame,
        shape: Vec<usize>,
        o: &ProductOperands,
        p: &StaticParams,
    ) -> Result<std::result::Result<(), String>> {
        let mut e = Steps { b: &mut frame.b };
        let x_zero_point = e.c(ScalarType::I64, p.x_zero_point as f64);
        let acc = centred_product_sum(&mut e, o.x, x_zero_point, o.w, o.w_zero_point);
        let acc = e.cast(ScalarType::F32, acc);
        let x_scale = e.c(ScalarType::F32, f64::from(p.x_scale));
        let out_scale = e.c(ScalarType::F32, f64::from(p.out_scale));
        let scales = e.bin(BinaryFn::Mul, x_scale, o.w_scale);
        let multiplier = e.bin(BinaryFn::Div, scales, out_scale);
        let out_zero_point = e.c(ScalarType::F32, f64::from(p.out_zero_point));
        let shift = match o.bias {
            Some(bias) => {
                let scaled = e.bin(BinaryFn::Div, bias, out_scale);
                e.bin(BinaryFn::Add, scaled, out_zero_point)
            }
            None => out_zero_point,
        };
        let scaled = e.bin(BinaryFn::Mul, acc, multiplier);
        let v = e.bin(BinaryFn::Add, scaled, shift);
        let lo = if p.relu { p.out_zero_point } else { 0.0 };
        let clamped = e.clamp(v, f64::from(lo), 255.0);
        let rounded = e.round_half_even(clamped);
        let rounded = e.not_nan_or_zero(rounded);
        let wide = e.cast(ScalarType::I64, rounded);
        let value = e.cast(ScalarType::U8, wide);
        self.emit_product(id, frame, shape, value)
    }
}

impl Lowering<'_> {
    /// The dynamic linear's three kernels: x's range, x quantized to u8 with the parameters
    /// it gives, and the product with the f32 epilogue
    /// `f32(acc) * (w_scale[n] * x_scale) + bias[n]`, as eager.
    fn dynamic_linear_kernels(
        &mut self,
        id: &NodeId,
        bias: bool,
        reduce_range: bool,
    ) -> Result<std::result::Result<(), String>> {
        let x_shape = match self.product_check(id, bias, DType::F32)? {
            Ok((x_shape, _)) => x_shape,
            Err(why) => return Ok(Err(why)),
        };
        let x_node = self.operands(id)?[0];
        let range = match self.x_range(id, &x_node, &x_shape)? {
            Ok(r) => r,
            Err(why) => return Ok(Err(why)),
        };
        let xq = match self.quantize_x(id, &x_node, &x_shape, &range, reduce_range)? {
            Ok(v) => v,
            Err(why) => return Ok(Err(why)),
        };
        let ProductFrame {
            mut frame,
            shape,
            operands: o,
        } = match self.product_frame(id, bias, Some(xq))? {
            Ok(f) => f,
            Err(why) => return Ok(Err(why)),
        };
        let (x_scale, x_zero_point) = x_qparams(&mut frame, &range, reduce_range);
        let mut e = Steps { b: &mut frame.b };
        let x_zero_point = e.cast(ScalarType::I64, x_zero_point);
        let acc = centred_product_sum(&mut e, o.x, x_zero_point, o.w, o.w_zero_point);
        let acc = e.cast(ScalarType::F32, acc);
        let scale = e.bin(BinaryFn::Mul, o.w_scale, x_scale);
        let mut value = e.bin(BinaryFn::Mul, acc, scale);
        if let Some(bias) = o.bias {
            value = e.bin(BinaryFn::Add, value, bias);
        }
        self.emit_product(id, frame, shape, value)
    }
}

impl Lowering<'_> {
    /// Emits the product kernel of node `id`: `value` over the output loops `shape`, the
    /// node's one result.
    fn emit_product(
        &mut self,
        id: &NodeId,
        mut frame: Frame,
        shape: Vec<usize>,
        value: ValueId,
    ) -> Result<std::result::Result<(), String>> {
        let map: FrameMap = (0..shape.len()).map(Some).collect();
        frame.locals.insert(
            *id,
            vec![Local {
                value,
                shape,
                map: Some(map),
            }],
        );
        self.emit_frame(frame, &[*id], &HashSet::from([*id]))
    }
}

/// The op name of node `id`, for its kernel's name.
pub(super) fn out_op_name(l: &Lowering<'_>, id: &NodeId) -> Result<String> {
    Ok(l.op_of(id)?.map_or_else(|| "quant".into(), |op| op.name()))
}

/// `sum_k (x - x_zp) * (w - w_zp)` in i64 over the reduction loop, `x` and `w` narrow
/// integers and both zero points i64.
fn centred_product_sum(
    e: &mut Steps,
    x: ValueId,
    x_zero_point: ValueId,
    w: ValueId,
    w_zero_point: ValueId,
) -> ValueId {
    let x = e.cast(ScalarType::I64, x);
    let x = e.bin(BinaryFn::Sub, x, x_zero_point);
    let w = e.cast(ScalarType::I64, w);
    let w = e.bin(BinaryFn::Sub, w, w_zero_point);
    let tap = e.bin(BinaryFn::Mul, x, w);
    e.b.push(ScalarType::I64, Expr::Reduce(ReduceFn::Sum, tap))
}
