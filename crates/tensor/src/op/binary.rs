//! Elementwise ops of two operands with PyTorch's broadcasting and type promotion, of a tensor
//! and a scalar attribute, comparisons, `where` and `clamp`.

use super::{BackwardCtx, OpDef, OpKind, expect_inputs};
use crate::cpu::{any_dispatch, float_dispatch, map, zip};
use crate::layout::broadcast_shapes;
use crate::{DType, Element, Float, Result, Tensor, TensorError, TensorMeta};

/// An arithmetic function of two broadcast operands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Maximum,
    Minimum,
}

impl BinaryOp {
    /// Every variant (for tests that cover them all).
    pub const EVERY: [BinaryOp; 7] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Pow,
        BinaryOp::Maximum,
        BinaryOp::Minimum,
    ];

    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Pow => "pow",
            BinaryOp::Maximum => "maximum",
            BinaryOp::Minimum => "minimum",
        }
    }

    #[inline(always)]
    pub(crate) fn eval<T: Float>(self, a: T, b: T) -> T {
        match self {
            BinaryOp::Add => a + b,
            BinaryOp::Sub => a - b,
            BinaryOp::Mul => a * b,
            BinaryOp::Div => a / b,
            BinaryOp::Pow => a.powf(b),
            BinaryOp::Maximum => {
                if a.is_nan() || a > b {
                    a
                } else {
                    b
                }
            }
            BinaryOp::Minimum => {
                if a.is_nan() || a < b {
                    a
                } else {
                    b
                }
            }
        }
    }

    #[inline(always)]
    fn eval_int(self, a: i64, b: i64) -> i64 {
        match self {
            BinaryOp::Add => a.wrapping_add(b),
            BinaryOp::Sub => a.wrapping_sub(b),
            BinaryOp::Mul => a.wrapping_mul(b),
            BinaryOp::Maximum => a.max(b),
            BinaryOp::Minimum => a.min(b),
            BinaryOp::Div | BinaryOp::Pow => unreachable!("promoted to float by meta"),
        }
    }

    /// The dtype of `a op b`: promotion, with true division and pow of integers giving f32.
    fn result_dtype(self, a: DType, b: DType) -> DType {
        let d = a.promote(b);
        if matches!(self, BinaryOp::Div | BinaryOp::Pow) && !d.is_float() {
            DType::F32
        } else {
            d
        }
    }
}

/// Expands `$body` once per variant with `$op` naming that variant as a constant (not a
/// captured value), so that every elementwise loop is compiled and vectorised for a single
/// function instead of matching on the op per element.
macro_rules! specialize_binary {
    ($value:expr, $op:ident => $body:expr) => {
        #[allow(non_upper_case_globals)]
        match $value {
            BinaryOp::Add => {
                const $op: BinaryOp = BinaryOp::Add;
                $body
            }
            BinaryOp::Sub => {
                const $op: BinaryOp = BinaryOp::Sub;
                $body
            }
            BinaryOp::Mul => {
                const $op: BinaryOp = BinaryOp::Mul;
                $body
            }
            BinaryOp::Div => {
                const $op: BinaryOp = BinaryOp::Div;
                $body
            }
            BinaryOp::Pow => {
                const $op: BinaryOp = BinaryOp::Pow;
                $body
            }
            BinaryOp::Maximum => {
                const $op: BinaryOp = BinaryOp::Maximum;
                $body
            }
            BinaryOp::Minimum => {
                const $op: BinaryOp = BinaryOp::Minimum;
                $body
            }
        }
    };
}

/// Computes `op` on tensors already converted to `dtype`, broadcast to `shape`.
fn binary_kernel(
    op: BinaryOp,
    a: &Tensor,
    b: &Tensor,
    shape: &[usize],
    dtype: DType,
) -> Result<Tensor> {
    let a = a.to_dtype(dtype)?;
    let b = b.to_dtype(dtype)?;
    if dtype.is_float() {
        return Ok(
            float_dispatch!(dtype, op.name(), T => specialize_binary!(op, o => zip(&a, &b, shape, o.name(), move |x: T, y: T| o.eval(x, y))?)),
        );
    }
    if dtype == DType::Bool {
        return Err(TensorError::dtype(op.name(), dtype));
    }
    let (a, b) = (a.to_dtype(DType::I64)?, b.to_dtype(DType::I64)?);
    zip(&a, &b, shape, op.name(), move |x: i64, y: i64| {
        op.eval_int(x, y)
    })?
    .to_dtype(dtype)
}

impl OpDef for BinaryOp {
    op_identity!(attributes: variant, kind: ElementwiseBinary);

    fn name(&self) -> String {
        BinaryOp::name(*self).into()
    }

    fn meta(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>> {
        expect_inputs(BinaryOp::name(*self), inputs, 2)?;
        let shape = broadcast_shapes(BinaryOp::name(*self), &inputs[0].shape, &inputs[1].shape)?;
        Ok(vec![TensorMeta::new(
            shape,
            self.result_dtype(inputs[0].dtype, inputs[1].dtype),
        )])
    }

    fn cpu(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        let meta = self.meta(&[inputs[0].meta(), inputs[1].meta()])?.remove(0);
        Ok(vec![binary_kernel(
            *self,
            inputs[0],
            inputs[1],
            &meta.shape,
            meta.dtype,
        )?])
    }

    fn backward(&self, cx: &BackwardCtx) -> Result<Vec<Option<Tensor>>> {
        let g = cx.grad(0)?;
        let (a, b, y) = (&cx.inputs[0], &cx.inputs[1], &cx.outputs[0]);
        let (ga, gb) = match self {
            BinaryOp::Add => (Some(g.clone()), Some(g)),
            BinaryOp::Sub => (Some(g.clone()), Some(g.neg()?)),
            BinaryOp::Mul => (
                lazy(cx.needs[0], || g.mul(b))?,
                lazy(cx.needs[1], || g.mul(a))?,
            ),
            BinaryOp::Div => (
                lazy(cx.needs[0], || g.div(b))?,
                lazy(cx.needs[1], || g.mul(y)?.div(b)?.neg())?,
            ),
            BinaryOp::Pow => (
                lazy(cx.needs[0], || g.mul(b)?.mul(&a.pow(&b.sub_scalar(1.0)?)?))?,
                lazy(cx.needs[1], || {
                    // d(a^b)/db = a^b ln a, taken as 0 where a == 0 (PyTorch's convention).
                    let log_a = Tensor::where_(
                        &a.gt_scalar(0.0)?,
                        &a.log()?,
                        &Tensor::zeros(&[], a.dtype())?,
                    )?;
                    g.mul(y)?.mul(&log_a)
                })?,
            ),
            BinaryOp::Maximum | BinaryOp::Minimum => {
                let wins_a = if *self == BinaryOp::Maximum {
                    a.gt(b)?
                } else {
                    a.lt(b)?
                };
                let tie = a.eq_(b)?.to_dtype(g.dtype())?.mul_scalar(0.5)?;
                let share_a = wins_a.to_dtype(g.dtype())?.add(&tie)?;
                let share_b = share_a.neg()?.add_scalar(1.0)?;
                (Some(g.mul(&share_a)?), Some(g.mul(&share_b)?))
            }
        };
        Ok(vec![reduce_grad(ga, a)?, reduce_grad(gb, b)?])
    }
}

fn lazy(needed: bool, f: impl FnOnce() -> Result<Tensor>) -> Result<Option<Tensor>> {
    if needed { f().map(Some) } else { Ok(None) }
}

/// Sums a broadcast gradient back to the operand's shape and dtype.
pub(crate) fn reduce_grad(grad: Option<Tensor>, input: &Tensor) -> Result<Option<Tensor>> {
    let Some(g) = grad else { return Ok(None) };
    if !input.dtype().is_float() {
        return Ok(None);
    }
    let g = g.sum_to_shape(&input.shape())?;
    Ok(Some(if g.dtype() != input.dtype() {
        g.to_dtype(input.dtype())?
    } else {
        g
    }))
}

/// `tensor op scalar` (or `scalar op tensor` when `reversed`), the scalar kept as an attribute.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ScalarOp {
    pub op: BinaryOp,
    pub value: f64,
    pub reversed: bool,
}

impl ScalarOp {
    fn result_dtype(&self, dtype: DType) -> DType {
        let integral = self.value.fract() == 0.0;
        match dtype {
            d if d.is_float() => d,
            DType::Bool => DType::F32,
            d if integral && !matches!(self.op, BinaryOp::Div | BinaryOp::Pow) => d,
            _ => DType::F32,
        }
    }
}

impl OpDef for ScalarOp {
    op_identity!(attributes: fields, kind: ElementwiseUnary);

    fn name(&self) -> String {
        BinaryOp::name(self.op).into()
    }

    fn meta(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>> {
        expect_inputs(&self.name(), inputs, 1)?;
        Ok(vec![TensorMeta::new(
            inputs[0].shape.clone(),
            self.result_dtype(inputs[0].dtype),
        )])
    }

    fn cpu(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        let dtype = self.result_dtype(inputs[0].dtype());
        let x = inputs[0].to_dtype(dtype)?;
        let ScalarOp {
            op,
            value,
            reversed,
        } = *self;
        if dtype.is_float() {
            return Ok(vec![float_dispatch!(dtype, self.name(), T => {
                let s = T::from_f64(value);
                specialize_binary!(op, o => if reversed { map(&x, move |v: T| o.eval(s, v))? } else { map(&x, move |v: T| o.eval(v, s))? })
            })]);
        }
        let s = value as i64;
        let x = x.to_dtype(DType::I64)?;
        let out = if reversed {
            map(&x, move |v: i64| op.eval_int(s, v))?
        } else {
            map(&x, move |v: i64| op.eval_int(v, s))?
        };
        Ok(vec![out.to_dtype(dtype)?])
    }

    fn backward(&self, cx: &BackwardCtx) -> Result<Vec<Option<Tensor>>> {
        let g = cx.grad(0)?;
        let (x, y, s) = (&cx.inputs[0], &cx.outputs[0], self.value);
        let grad = match (self.op, self.reversed) {
            (BinaryOp::Add, _) | (BinaryOp::Sub, false) => g,
            (BinaryOp::Sub, true) => g.neg()?,
            (BinaryOp::Mul, _) => g.mul_scalar(s)?,
            (BinaryOp::Div, false) => g.div_scalar(s)?,
            (BinaryOp::Div, true) => g.mul(y)?.div(x)?.neg()?,
            (BinaryOp::Pow, false) => g.mul(&x.pow_scalar(s - 1.0)?)?.mul_scalar(s)?,
            (BinaryOp::Pow, true) => g.mul(y)?.mul_scalar(s.ln())?,
            (BinaryOp::Maximum | BinaryOp::Minimum, _) => {
                let wins = if self.op == BinaryOp::Maximum {
                    x.gt_scalar(s)?
                } else {
                    x.lt_scalar(s)?
                };
                let tie = x.eq_scalar(s)?.to_dtype(g.dtype())?.mul_scalar(0.5)?;
                g.mul(&wins.to_dtype(g.dtype())?.add(&tie)?)?
            }
        };
        Ok(vec![Some(
            if grad.dtype() != x.dtype() && x.dtype().is_float() {
                grad.to_dtype(x.dtype())?
            } else {
                grad
            },
        )])
    }
}

/// An elementwise comparison of two broadcast operands, giving bool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum CompareOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CompareOp {
    /// Every variant (for tests that cover them all).
    pub const EVERY: [CompareOp; 6] = [
        CompareOp::Eq,
        CompareOp::Ne,
        CompareOp::Lt,
        CompareOp::Le,
        CompareOp::Gt,
        CompareOp::Ge,
    ];

    #[inline(always)]
    fn eval<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            CompareOp::Eq => a == b,
            CompareOp::Ne => a != b,
            CompareOp::Lt => a < b,
            CompareOp::Le => a <= b,
            CompareOp::Gt => a > b,
            CompareOp::Ge => a >= b,
        }
    }
}

impl OpDef for CompareOp {
    op_identity!(attributes: variant, kind: ElementwiseBinary);

    fn name(&self) -> String {
        format!("{self:?}").to_lowercase()
    }

    fn meta(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>> {
        expect_inputs(&self.name(), inputs, 2)?;
        let shape = broadcast_shapes(&self.name(), &inputs[0].shape, &inputs[1].shape)?;
        Ok(vec![TensorMeta::new(shape, DType::Bool)])
    }

    fn cpu(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        let op = *self;
        let shape = broadcast_shapes(&self.name(), &inputs[0].shape(), &inputs[1].shape())?;
        let dtype = inputs[0].dtype().promote(inputs[1].dtype());
        let (a, b) = (inputs[0].to_dtype(dtype)?, inputs[1].to_dtype(dtype)?);
        Ok(vec![
            any_dispatch!(dtype, T => zip(&a, &b, &shape, &self.name(), move |x: T, y: T| op.eval(x, y))?),
        ])
    }

    fn backward(&self, _cx: &BackwardCtx) -> Result<Vec<Option<Tensor>>> {
        Ok(vec![None, None])
    }

    fn output_is_differentiable(&self, _index: usize) -> bool {
        false
    }
}

/// `where(cond, a, b)`: `a` where `cond` holds, else `b`, all three broadcast.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct WhereOp;

impl OpDef for WhereOp {
    op_identity!(name: "where", attributes: none, kind: ElementwiseTernary);

    fn meta(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>> {
        expect_inputs("where", inputs, 3)?;
        if inputs[0].dtype != DType::Bool {
            return Err(TensorError::DTypeMismatch {
                op: "where".into(),
                expected: DType::Bool,
                got: inputs[0].dtype,
            });
        }
        let shape = broadcast_shapes("where", &inputs[0].shape, &inputs[1].shape)?;
        let shape = broadcast_shapes("where", &shape, &inputs[2].shape)?;
        Ok(vec![TensorMeta::new(
            shape,
            inputs[1].dtype.promote(inputs[2].dtype),
        )])
    }

    fn cpu(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        let meta = self
            .meta(&inputs.iter().map(|t| t.meta()).collect::<Vec<_>>())?
            .remove(0);
        let cond = inputs[0].expand(&meta.shape)?.to_vec::<bool>()?;
        let (a, b) = (
            inputs[1].to_dtype(meta.dtype)?.expand(&meta.shape)?,
            inputs[2].to_dtype(meta.dtype)?.expand(&meta.shape)?,
        );
        Ok(vec![any_dispatch!(meta.dtype, T => {
            let (a, b) = (a.to_vec::<T>()?, b.to_vec::<T>()?);
            let out: Vec<T> = cond.iter().zip(a.iter().zip(&b)).map(|(&c, (&x, &y))| if c { x } else { y }).collect();
            crate::cpu::tensor_from(out, &meta.shape)
        })])
    }

    fn backward(&self, cx: &BackwardCtx) -> Result<Vec<Option<Tensor>>> {
        let g = cx.grad(0)?;
        let zeros = Tensor::zeros(&[], g.dtype())?;
        let cond = &cx.inputs[0];
        let ga = reduce_grad(Some(Tensor::where_(cond, &g, &zeros)?), &cx.inputs[1])?;
        let gb = reduce_grad(Some(Tensor::where_(cond, &zeros, &g)?), &cx.inputs[2])?;
        Ok(vec![None, ga, gb])
    }
}

/// Clamps into `[min, max]` (either bound optional).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct ClampOp {
    pub(crate) min: Option<f64>,
    pub(crate) max: Option<f64>,
}

impl OpDef for ClampOp {
    op_identity!(name: "clamp", attributes: fields, kind: ElementwiseUnary);

    fn meta(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>> {
        expect_inputs("clamp", inputs, 1)?;
        if self.min.is_none() && self.max.is_none() {
            return Err(TensorError::invalid(
                "clamp",
                "at least one of min and max must be given",
            ));
        }
        if inputs[0].dtype == DType::Bool {
            return Err(TensorError::dtype("clamp", DType::Bool));
        }
        Ok(vec![inputs[0].clone()])
    }

    fn cpu(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        let (lo, hi) = (
            self.min.unwrap_or(f64::NEG_INFINITY),
            self.max.unwrap_or(f64::INFINITY),
        );
        let x = inputs[0];
        Ok(vec![any_dispatch!(x.dtype(), T => map(x, move |v: T| {
            let f = v.as_f64();
            if f.is_nan() { v } else if f < lo { T::from_f64(lo) } else if f > hi { T::from_f64(hi) } else { v }
        })?)])
    }

    fn backward(&self, cx: &BackwardCtx) -> Result<Vec<Option<Tensor>>> {
        let g = cx.grad(0)?;
        let x = &cx.inputs[0];
        let (lo, hi) = (
            self.min.unwrap_or(f64::NEG_INFINITY),
            self.max.unwrap_or(f64::INFINITY),
        );
        let inside = x
            .ge_scalar(lo)?
            .to_dtype(g.dtype())?
            .mul(&x.le_scalar(hi)?.to_dtype(g.dtype())?)?;
        Ok(vec![Some(g.mul(&inside)?)])
    }
}
