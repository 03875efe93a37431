//! The lowering table of `Op::UnaryBackward`: `grad * f'(v)` per element, each derivative
//! written with the operations, constants and order of `UnaryOp::derivative` in the eager
//! kernel, and an exact zero derivative giving `+0` (as the eager kernel's select does).

use crate::table::Emit;
use crate::{BinaryFn, CompareFn, UnaryFn, ValueId};
use tessera_tensor::op::UnaryOp;

const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
const GELU_TANH_COEFF: f64 = 0.044_715;
const INV_SQRT_2PI: f64 = 0.398_942_280_401_432_7;

impl Emit<'_> {
    /// `UnaryBackwardOp::cpu` for one element: `d == 0 ? +0 : grad * d`, `d = f'(v)`.
    pub(crate) fn unary_backward(&mut self, op: UnaryOp, grad: ValueId, v: ValueId) -> ValueId {
        let d = self.unary_derivative(op, v);
        let zero = self.c(0.0, self.b.ty(v));
        let product = self.bin(BinaryFn::Mul, grad, d);
        let is_zero = self.cmp(CompareFn::Eq, d, zero);
        self.select(is_zero, zero, product)
    }

    /// `UnaryOp::derivative`: dy/dx as a function of `x` or `y`, whichever the op reads.
    fn unary_derivative(&mut self, op: UnaryOp, v: ValueId) -> ValueId {
        let ty = self.b.ty(v);
        let zero = self.c(0.0, ty);
        let one = self.c(1.0, ty);
        match op {
            UnaryOp::Neg => self.c(-1.0, ty),
            UnaryOp::Abs => self.unary(UnaryOp::Sign, v),
            UnaryOp::Sign => zero,
            UnaryOp::Exp => v,
            UnaryOp::Log => self.bin(BinaryFn::Div, one, v),
            UnaryOp::Sqrt => {
                let half = self.c(0.5, ty);
                self.bin(BinaryFn::Div, half, v)
            }
            UnaryOp::Rsqrt => {
                // -0.5 * v * v * v.
                let k = self.c(-0.5, ty);
                let kv = self.bin(BinaryFn::Mul, k, v);
                let kvv = self.bin(BinaryFn::Mul, kv, v);
                self.bin(BinaryFn::Mul, kvv, v)
            }
            UnaryOp::Sin => self.un(UnaryFn::Cos, v),
            UnaryOp::Cos => {
                let s = self.un(UnaryFn::Sin, v);
                self.un(UnaryFn::Neg, s)
            }
            UnaryOp::Tanh => {
                let vv = self.bin(BinaryFn::Mul, v, v);
                self.bin(BinaryFn::Sub, one, vv)
            }
            UnaryOp::Sigmoid => {
                let onev = self.bin(BinaryFn::Sub, one, v);
                self.bin(BinaryFn::Mul, v, onev)
            }
            UnaryOp::Relu => self.positive_or(v, one, zero),
            UnaryOp::LeakyRelu { negative_slope } => {
                let slope = self.c(negative_slope, ty);
                self.positive_or(v, one, slope)
            }
            UnaryOp::Gelu { tanh: false } => {
                // 0.5 * (1 + erf(v * (1/sqrt 2))) + v * (exp(-0.5 * v * v) * (1/sqrt(2 pi))).
                let half = self.c(0.5, ty);
                let k = self.c(std::f64::consts::FRAC_1_SQRT_2, ty);
                let vk = self.bin(BinaryFn::Mul, v, k);
                let erf = self.un(UnaryFn::Erf, vk);
                let onee = self.bin(BinaryFn::Add, one, erf);
                let cdf = self.bin(BinaryFn::Mul, half, onee);
                let minus_half = self.c(-0.5, ty);
                let hv = self.bin(BinaryFn::Mul, minus_half, v);
                let hvv = self.bin(BinaryFn::Mul, hv, v);
                let e = self.un(UnaryFn::Exp, hvv);
                let norm = self.c(INV_SQRT_2PI, ty);
                let pdf = self.bin(BinaryFn::Mul, e, norm);
                let vpdf = self.bin(BinaryFn::Mul, v, pdf);
                self.bin(BinaryFn::Add, cdf, vpdf)
            }
            UnaryOp::Gelu { tanh: true } => {
                // t = tanh(s * (v + k * v * v * v)), d_inner = s * (1 + 3k * v * v),
                // 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * d_inner.
                let half = self.c(0.5, ty);
                let s = self.c(SQRT_2_OVER_PI, ty);
                let k = self.c(GELU_TANH_COEFF, ty);
                let kv = self.bin(BinaryFn::Mul, k, v);
                let kvv = self.bin(BinaryFn::Mul, kv, v);
                let kvvv = self.bin(BinaryFn::Mul, kvv, v);
                let sum = self.bin(BinaryFn::Add, v, kvvv);
                let inner = self.bin(BinaryFn::Mul, s, sum);
                let t = self.un(UnaryFn::Tanh, inner);
                let k3 = self.c(3.0 * GELU_TANH_COEFF, ty);
                let k3v = self.bin(BinaryFn::Mul, k3, v);
                let k3vv = self.bin(BinaryFn::Mul, k3v, v);
                let onek = self.bin(BinaryFn::Add, one, k3vv);
                let d_inner = self.bin(BinaryFn::Mul, s, onek);
                let onet = self.bin(BinaryFn::Add, one, t);
                let left = self.bin(BinaryFn::Mul, half, onet);
                let hv = self.bin(BinaryFn::Mul, half, v);
                let tt = self.bin(BinaryFn::Mul, t, t);
                let onett = self.bin(BinaryFn::Sub, one, tt);
                let hvt = self.bin(BinaryFn::Mul, hv, onett);
                let right = self.bin(BinaryFn::Mul, hvt, d_inner);
                self.bin(BinaryFn::Add, left, right)
            }
            UnaryOp::Silu => {
                // s = 1 / (1 + exp(-v)); s * (1 + v * (1 - s)).
                let s = self.unary(UnaryOp::Sigmoid, v);
                let ones = self.bin(BinaryFn::Sub, one, s);
                let vs = self.bin(BinaryFn::Mul, v, ones);
                let onevs = self.bin(BinaryFn::Add, one, vs);
                self.bin(BinaryFn::Mul, s, onevs)
            }
            UnaryOp::Elu { alpha } => {
                let a = self.c(alpha, ty);
                let e = self.un(UnaryFn::Exp, v);
                let ae = self.bin(BinaryFn::Mul, a, e);
                self.positive_or(v, one, ae)
            }
            UnaryOp::Hardswish => {
                // v <= -3 ? 0 : (v < 3 ? v / 3 + 0.5 : 1).
                let minus_three = self.c(-3.0, ty);
                let three = self.c(3.0, ty);
                let half = self.c(0.5, ty);
                let third = self.bin(BinaryFn::Div, v, three);
                let ramp = self.bin(BinaryFn::Add, third, half);
                let below_three = self.cmp(CompareFn::Lt, v, three);
                let upper = self.select(below_three, ramp, one);
                let low = self.cmp(CompareFn::Le, v, minus_three);
                self.select(low, zero, upper)
            }
            UnaryOp::Hardsigmoid => {
                let sixth = self.c(1.0 / 6.0, ty);
                self.strictly_between(v, -3.0, 3.0, sixth)
            }
            UnaryOp::Relu6 => self.strictly_between(v, 0.0, 6.0, one),
            UnaryOp::Softplus { beta, threshold } => {
                // beta * v > threshold ? 1 : z / (z + 1), z = exp(beta * v).
                let b = self.c(beta, ty);
                let t = self.c(threshold, ty);
                let bv = self.bin(BinaryFn::Mul, v, b);
                let z = self.un(UnaryFn::Exp, bv);
                let z1 = self.bin(BinaryFn::Add, z, one);
                let soft = self.bin(BinaryFn::Div, z, z1);
                let linear = self.cmp(CompareFn::Gt, bv, t);
                self.select(linear, one, soft)
            }
        }
    }

    /// `v > 0 ? a : b` (NaN takes `b`, as the eager `if`).
    fn positive_or(&mut self, v: ValueId, a: ValueId, b: ValueId) -> ValueId {
        let zero = self.c(0.0, self.b.ty(v));
        let positive = self.cmp(CompareFn::Gt, v, zero);
        self.select(positive, a, b)
    }

    /// `lo < v && v < hi ? inside : 0` (NaN gives 0).
    fn strictly_between(&mut self, v: ValueId, lo: f64, hi: f64, inside: ValueId) -> ValueId {
        let ty = self.b.ty(v);
        let zero = self.c(0.0, ty);
        let lo = self.c(lo, ty);
        let hi = self.c(hi, ty);
        let above = self.cmp(CompareFn::Gt, v, lo);
        let below = self.cmp(CompareFn::Lt, v, hi);
        let inner = self.select(below, inside, zero);
        self.select(above, inner, zero)
    }
}
