//! The lowering table: how each elementwise op of the op table computes one element from its
//! operands' elements, as a scalar expression over the kernel IR's primitives. Every formula
//! follows its eager kernel operation for operation (same constants, same order), so the
//! generated code rounds exactly as eager code does. A new elementwise op is one arm here.

use crate::update_table::lower_update;
use crate::{BinaryFn, CompareFn, Expr, KernelBuilder, ScalarType, UnaryFn, ValueId};
use tessera_tensor::Op;
use tessera_tensor::op::{BinaryOp, CompareOp, ScalarOp, UnaryOp};

const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
const GELU_TANH_COEFF: f64 = 0.044_715;

/// `op` with a u8, i8 or i32 (`narrow`) operand or result, as the eager kernels compute it:
/// the operands converted to the promoted dtype (a widening, so exact) and on to i64, the op
/// in i64 (wrapping) or in the float result's type, and an integer result converted back with
/// the eager cast (saturating). Arithmetic (`+ - *`, maximum, minimum, with a tensor or a
/// scalar; `/` and `**` give floats), comparisons and `where`; the eager unary ops and clamp
/// take floats only.
fn narrow_integer(
    op: &Op,
    b: &mut KernelBuilder,
    operands: &[ValueId],
    out: ScalarType,
    narrow: ScalarType,
) -> Result<ValueId, String> {
    if !matches!(
        op,
        Op::Binary(_) | Op::Scalar(_) | Op::Compare(_) | Op::Where
    ) {
        return Err(format!("{} on {narrow} tensors is not lowered", op.name()));
    }
    let mut e = Emit { b };
    let mut wide = Vec::with_capacity(operands.len());
    for &v in operands {
        wide.push(if e.b.ty(v).is_narrow_int() {
            e.convert(v, ScalarType::I64)?
        } else {
            v
        });
    }
    if !out.is_narrow_int() {
        return lower_elementwise(op, e.b, &wide, out);
    }
    let computed = lower_elementwise(op, e.b, &wide, ScalarType::I64)?;
    Emit { b }.convert(computed, out)
}

/// The scalar expression of `op` on the elements `operands`, giving a value of type `out`,
/// or why the op has no entry (it is not elementwise, or not at these types).
///
/// An op whose result is f16 or bf16 computes in f32 and rounds its result once to the half
/// type, as its eager kernel does (half operands are widened exactly); a cast converts
/// directly.
pub fn lower_elementwise(
    op: &Op,
    b: &mut KernelBuilder,
    operands: &[ValueId],
    out: ScalarType,
) -> Result<ValueId, String> {
    if let Op::ToDType(_) = op {
        if operands.len() != 1 {
            return Err(format!("expected 1 operand, got {}", operands.len()));
        }
        return Emit { b }.convert(operands[0], out);
    }
    let narrow = std::iter::once(out)
        .chain(operands.iter().map(|&v| b.ty(v)))
        .find(|t| t.is_narrow_int());
    if let Some(ty) = narrow {
        return narrow_integer(op, b, operands, out, ty);
    }
    if out.is_half() {
        let computed = lower_elementwise(op, b, operands, out.compute())?;
        return Emit { b }.convert(computed, out);
    }
    let mut e = Emit { b };
    let arity = |n: usize| -> Result<(), String> {
        if operands.len() == n {
            Ok(())
        } else {
            Err(format!("expected {n} operands, got {}", operands.len()))
        }
    };
    match op {
        Op::Unary(u) => {
            arity(1)?;
            let x = e.float_as(operands[0], out)?;
            Ok(e.unary(*u, x))
        }
        Op::Binary(f) => {
            arity(2)?;
            let a = e.number_as(operands[0], out, *f)?;
            let y = e.number_as(operands[1], out, *f)?;
            Ok(e.binary(*f, a, y))
        }
        Op::Scalar(ScalarOp {
            op,
            value,
            reversed,
        }) => {
            arity(1)?;
            let x = e.number_as(operands[0], out, *op)?;
            let s = e.c(*value, out);
            Ok(if *reversed {
                e.binary(*op, s, x)
            } else {
                e.binary(*op, x, s)
            })
        }
        Op::Compare(c) => {
            arity(2)?;
            // Bools compare as the integers 0 and 1.
            let ty = match promote(e.b.ty(operands[0]), e.b.ty(operands[1])) {
                ScalarType::Bool => ScalarType::I64,
                ty => ty,
            };
            let a = e.convert(operands[0], ty)?;
            let y = e.convert(operands[1], ty)?;
            Ok(e.cmp(compare_fn(*c), a, y))
        }
        Op::Where => {
            arity(3)?;
            if e.b.ty(operands[0]) != ScalarType::Bool {
                return Err("the condition is not bool".into());
            }
            // Any type but a half one (handled above) selects: floats, i64 and bool.
            let a = e.convert(operands[1], out)?;
            let y = e.convert(operands[2], out)?;
            Ok(e.select(operands[0], a, y))
        }
        Op::Clamp { min, max } => {
            arity(1)?;
            let v = e.float_as(operands[0], out)?;
            let mut x = v;
            // Eager: NaN stays, below `min` gives `min`, above `max` gives `max`.
            if let Some(hi) = max {
                let hi = e.c(*hi, out);
                let above = e.cmp(CompareFn::Gt, x, hi);
                x = e.select(above, hi, x);
            }
            if let Some(lo) = min {
                let lo = e.c(*lo, out);
                let below = e.cmp(CompareFn::Lt, v, lo);
                x = e.select(below, lo, x);
            }
            Ok(x)
        }
        Op::UnaryBackward(u) => {
            arity(2)?;
            let grad = e.float_as(operands[0], out)?;
            let v = e.float_as(operands[1], out)?;
            Ok(e.unary_backward(*u, grad, v))
        }
        // An update with one output (SGD without momentum) fuses like any elementwise op.
        Op::Optim(update) => match lower_update(update, e.b, operands, out)?[..] {
            [only] => Ok(only),
            _ => Err(format!("{} has several outputs", op.name())),
        },
        other => Err(format!("{} is not an elementwise op", other.name())),
    }
}

/// The type two kernel types are compared in: their promoted type (f64 wins, bool loses, as
/// the op table promotes; i64 against a float is the float), f32 for the half types.
fn promote(a: ScalarType, b: ScalarType) -> ScalarType {
    ScalarType::of_value(a.dtype().promote(b.dtype()))
        .unwrap_or(ScalarType::F64)
        .compute()
}

fn compare_fn(c: CompareOp) -> CompareFn {
    match c {
        CompareOp::Eq => CompareFn::Eq,
        CompareOp::Ne => CompareFn::Ne,
        CompareOp::Lt => CompareFn::Lt,
        CompareOp::Le => CompareFn::Le,
        CompareOp::Gt => CompareFn::Gt,
        CompareOp::Ge => CompareFn::Ge,
    }
}

/// Shorthands that push values into the kernel being built.
pub(crate) struct Emit<'a> {
    pub(crate) b: &'a mut KernelBuilder,
}

impl Emit<'_> {
    pub(crate) fn c(&mut self, value: f64, ty: ScalarType) -> ValueId {
        self.b.push(ty, Expr::Const(value))
    }

    /// `v` converted to the float type `ty` (the op table converts operands to the result
    /// dtype before computing).
    fn float_as(&mut self, v: ValueId, ty: ScalarType) -> Result<ValueId, String> {
        if !ty.is_arithmetic() {
            return Err(format!("the op computes in {ty}, not f32 or f64"));
        }
        self.convert(v, ty)
    }

    /// `v` converted to the type `ty` of an op computing `op`: a float type, or i64 for the
    /// ops integers compute exactly (add, sub, mul, maximum, minimum), as the eager kernels
    /// compute integer tensors in i64.
    fn number_as(&mut self, v: ValueId, ty: ScalarType, op: BinaryOp) -> Result<ValueId, String> {
        let integer = matches!(
            op,
            BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Maximum | BinaryOp::Minimum
        );
        if ty == ScalarType::I64 && integer {
            return self.convert(v, ty);
        }
        self.float_as(v, ty)
    }

    /// `v` converted to `ty` as the eager cast does (`as` through f64): a narrow integer type
    /// through i64 (widening exactly; narrowing truncates a float towards zero and saturates,
    /// as `as` does straight to the narrow type), a half type through f32 (from f64 and i64
    /// too, rounding twice as the eager cast and PyTorch's do).
    pub(crate) fn convert(&mut self, v: ValueId, ty: ScalarType) -> Result<ValueId, String> {
        let from = self.b.ty(v);
        if from == ty {
            return Ok(v);
        }
        if from.is_narrow_int() {
            let wide = self.cast(v, ScalarType::I64);
            return self.convert(wide, ty);
        }
        if ty.is_narrow_int() {
            let wide = self.convert(v, ScalarType::I64)?;
            return Ok(self.cast(wide, ty));
        }
        if !(from.is_half() || ty.is_half()) {
            return Ok(self.cast(v, ty));
        }
        let wide = self.cast(v, ScalarType::F32);
        Ok(self.cast(wide, ty))
    }

    pub(crate) fn cast(&mut self, v: ValueId, ty: ScalarType) -> ValueId {
        if self.b.ty(v) == ty {
            v
        } else {
            self.b.push(ty, Expr::Cast(v))
        }
    }

    pub(crate) fn un(&mut self, f: UnaryFn, x: ValueId) -> ValueId {
        let ty = self.b.ty(x);
        self.b.push(ty, Expr::Unary(f, x))
    }

    pub(crate) fn bin(&mut self, f: BinaryFn, a: ValueId, b: ValueId) -> ValueId {
        let ty = self.b.ty(a);
        self.b.push(ty, Expr::Binary(f, a, b))
    }

    pub(crate) fn cmp(&mut self, f: CompareFn, a: ValueId, b: ValueId) -> ValueId {
        self.b.push(ScalarType::Bool, Expr::Compare(f, a, b))
    }

    pub(crate) fn select(&mut self, cond: ValueId, a: ValueId, b: ValueId) -> ValueId {
        let ty = self.b.ty(a);
        self.b.push(ty, Expr::Select { cond, a, b })
    }

    /// `BinaryOp::eval`.
    pub(crate) fn binary(&mut self, op: BinaryOp, a: ValueId, b: ValueId) -> ValueId {
        let f = match op {
            BinaryOp::Add => BinaryFn::Add,
            BinaryOp::Sub => BinaryFn::Sub,
            BinaryOp::Mul => BinaryFn::Mul,
            BinaryOp::Div => BinaryFn::Div,
            BinaryOp::Pow => BinaryFn::Pow,
            // `a` when `a` is NaN or wins, else `b`.
            BinaryOp::Maximum | BinaryOp::Minimum => {
                let wins = if op == BinaryOp::Maximum {
                    CompareFn::Gt
                } else {
                    CompareFn::Lt
                };
                let a_wins = self.cmp(wins, a, b);
                let a_or_b = self.select(a_wins, a, b);
                let a_nan = self.cmp(CompareFn::Ne, a, a);
                return self.select(a_nan, a, a_or_b);
            }
        };
        self.bin(f, a, b)
    }

    /// `UnaryOp::eval`.
    pub(crate) fn unary(&mut self, op: UnaryOp, x: ValueId) -> ValueId {
        let ty = self.b.ty(x);
        let zero = self.c(0.0, ty);
        let one = self.c(1.0, ty);
        match op {
            UnaryOp::Neg => self.un(UnaryFn::Neg, x),
            UnaryOp::Abs => self.un(UnaryFn::Abs, x),
            UnaryOp::Exp => self.un(UnaryFn::Exp, x),
            UnaryOp::Log => self.un(UnaryFn::Log, x),
            UnaryOp::Sqrt => self.un(UnaryFn::Sqrt, x),
            UnaryOp::Sin => self.un(UnaryFn::Sin, x),
            UnaryOp::Cos => self.un(UnaryFn::Cos, x),
            UnaryOp::Tanh => self.un(UnaryFn::Tanh, x),
            UnaryOp::Sign => {
                let minus_one = self.c(-1.0, ty);
                let negative = self.cmp(CompareFn::Lt, x, zero);
                let rest = self.select(negative, minus_one, x);
                let positive = self.cmp(CompareFn::Gt, x, zero);
                self.select(positive, one, rest)
            }
            UnaryOp::Rsqrt => {
                let s = self.un(UnaryFn::Sqrt, x);
                self.bin(BinaryFn::Div, one, s)
            }
            UnaryOp::Sigmoid | UnaryOp::Silu => {
                // 1 / (1 + exp(-x)) and x / (1 + exp(-x)).
                let minus_x = self.un(UnaryFn::Neg, x);
                let e = self.un(UnaryFn::Exp, minus_x);
                let d = self.bin(BinaryFn::Add, one, e);
                let n = if op == UnaryOp::Silu { x } else { one };
                self.bin(BinaryFn::Div, n, d)
            }
            UnaryOp::Relu => {
                let positive = self.cmp(CompareFn::Gt, x, zero);
                self.select(positive, x, zero)
            }
            UnaryOp::LeakyRelu { negative_slope } => {
                let slope = self.c(negative_slope, ty);
                let scaled = self.bin(BinaryFn::Mul, x, slope);
                let positive = self.cmp(CompareFn::Gt, x, zero);
                self.select(positive, x, scaled)
            }
            UnaryOp::Gelu { tanh: false } => {
                // x * 0.5 * (1 + erf(x * (1/sqrt 2))).
                let half = self.c(0.5, ty);
                let k = self.c(std::f64::consts::FRAC_1_SQRT_2, ty);
                let xk = self.bin(BinaryFn::Mul, x, k);
                let erf = self.un(UnaryFn::Erf, xk);
                let cdf = self.bin(BinaryFn::Add, one, erf);
                let xh = self.bin(BinaryFn::Mul, x, half);
                self.bin(BinaryFn::Mul, xh, cdf)
            }
            UnaryOp::Gelu { tanh: true } => {
                // 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x * x * x))).
                let half = self.c(0.5, ty);
                let s = self.c(SQRT_2_OVER_PI, ty);
                let k = self.c(GELU_TANH_COEFF, ty);
                let kx = self.bin(BinaryFn::Mul, k, x);
                let kxx = self.bin(BinaryFn::Mul, kx, x);
                let kxxx = self.bin(BinaryFn::Mul, kxx, x);
                let sum = self.bin(BinaryFn::Add, x, kxxx);
                let inner = self.bin(BinaryFn::Mul, s, sum);
                let t = self.un(UnaryFn::Tanh, inner);
                let onet = self.bin(BinaryFn::Add, one, t);
                let hx = self.bin(BinaryFn::Mul, half, x);
                self.bin(BinaryFn::Mul, hx, onet)
            }
            UnaryOp::Elu { alpha } => {
                // x > 0 ? x : alpha * (exp(x) - 1).
                let a = self.c(alpha, ty);
                let e = self.un(UnaryFn::Exp, x);
                let em1 = self.bin(BinaryFn::Sub, e, one);
                let neg = self.bin(BinaryFn::Mul, a, em1);
                let positive = self.cmp(CompareFn::Gt, x, zero);
                self.select(positive, x, neg)
            }
            UnaryOp::Relu6 => self.relu6(x),
            UnaryOp::Hardsigmoid | UnaryOp::Hardswish => {
                // relu6(x + 3) / 6, times x for hardswish.
                let three = self.c(3.0, ty);
                let six = self.c(6.0, ty);
                let shifted = self.bin(BinaryFn::Add, x, three);
                let r = self.relu6(shifted);
                if op == UnaryOp::Hardswish {
                    let xr = self.bin(BinaryFn::Mul, x, r);
                    self.bin(BinaryFn::Div, xr, six)
                } else {
                    self.bin(BinaryFn::Div, r, six)
                }
            }
            UnaryOp::Softplus { beta, threshold } => {
                // beta * x > threshold ? x : log(1 + exp(beta * x)) / beta.
                let b = self.c(beta, ty);
                let t = self.c(threshold, ty);
                let bx = self.bin(BinaryFn::Mul, x, b);
                let e = self.un(UnaryFn::Exp, bx);
                let onee = self.bin(BinaryFn::Add, one, e);
                let l = self.un(UnaryFn::Log, onee);
                let soft = self.bin(BinaryFn::Div, l, b);
                let linear = self.cmp(CompareFn::Gt, bx, t);
                self.select(linear, x, soft)
            }
        }
    }

    /// `UnaryOp::Relu6`: `x < 0 ? 0 : (x > 6 ? 6 : x)`, so NaN passes through.
    fn relu6(&mut self, x: ValueId) -> ValueId {
        let ty = self.b.ty(x);
        let zero = self.c(0.0, ty);
        let six = self.c(6.0, ty);
        let above = self.cmp(CompareFn::Gt, x, six);
        let upper = self.select(above, six, x);
        let below = self.cmp(CompareFn::Lt, x, zero);
        self.select(below, zero, upper)
    }
}
