//! Elementwise functions of one tensor, each with its derivative written as a scalar function
//! of the input or of the output, whichever the backward formula reads.

use super::{BackwardCtx, Op, OpDef, OpKind, expect_float, expect_inputs};
use crate::cpu::{float_dispatch, map, zip};
use crate::{DType, Float, Result, Tensor, TensorError, TensorMeta};

/// An elementwise function of one float tensor.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum UnaryOp {
    Neg,
    Abs,
    Sign,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Sin,
    Cos,
    Tanh,
    Sigmoid,
    Relu,
    LeakyRelu {
        negative_slope: f64,
    },
    /// GELU, exact (`x * Phi(x)`) or with the tanh approximation.
    Gelu {
        tanh: bool,
    },
    Silu,
    /// `x` where `x > 0`, `alpha * (exp(x) - 1)` elsewhere.
    Elu {
        alpha: f64,
    },
    /// `x * relu6(x + 3) / 6`.
    Hardswish,
    /// `relu6(x + 3) / 6`.
    Hardsigmoid,
    /// `min(max(x, 0), 6)`.
    Relu6,
    /// `log(1 + exp(beta * x)) / beta`, or `x` where `beta * x > threshold`.
    Softplus {
        beta: f64,
        threshold: f64,
    },
}

/// Whether a derivative is a function of the input `x` or of the output `y`.
enum Reads {
    Input,
    Output,
}

const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
const GELU_TANH_COEFF: f64 = 0.044_715;

fn erf<T: Float>(x: T) -> T {
    T::from_f64(libm::erf(x.as_f64()))
}

/// `1`, `-1` or `x` itself (zeros and NaN), as PyTorch's `sign`.
#[inline(always)]
fn sign<T: Float>(x: T) -> T {
    if x > T::zero() {
        T::one()
    } else if x < T::zero() {
        -T::one()
    } else {
        x
    }
}

/// `min(max(x, 0), 6)`; NaN passes through both comparisons, as PyTorch's hardtanh.
#[inline(always)]
fn relu6<T: Float>(x: T) -> T {
    let six = T::from_f64(6.0);
    if x < T::zero() {
        T::zero()
    } else if x > six {
        six
    } else {
        x
    }
}

impl UnaryOp {
    /// One op of every variant, with representative attributes (for tests that cover them
    /// all: a variant added to the enum belongs here too).
    pub const EVERY: [UnaryOp; 21] = [
        UnaryOp::Neg,
        UnaryOp::Abs,
        UnaryOp::Sign,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Sqrt,
        UnaryOp::Rsqrt,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::Relu,
        UnaryOp::LeakyRelu {
            negative_slope: 0.1,
        },
        UnaryOp::Gelu { tanh: false },
        UnaryOp::Gelu { tanh: true },
        UnaryOp::Silu,
        UnaryOp::Elu { alpha: 0.5 },
        UnaryOp::Hardswish,
        UnaryOp::Hardsigmoid,
        UnaryOp::Relu6,
        UnaryOp::Softplus {
            beta: 2.0,
            threshold: 5.0,
        },
    ];

    #[inline(always)]
    pub(crate) fn eval<T: Float>(self, x: T) -> T {
        let c = |v: f64| T::from_f64(v);
        match self {
            UnaryOp::Neg => -x,
            UnaryOp::Abs => x.abs(),
            UnaryOp::Sign => sign(x),
            UnaryOp::Exp => x.exp(),
            UnaryOp::Log => x.ln(),
            UnaryOp::Sqrt => x.sqrt(),
            UnaryOp::Rsqrt => x.sqrt().recip(),
            UnaryOp::Sin => x.sin(),
            UnaryOp::Cos => x.cos(),
            UnaryOp::Tanh => x.tanh(),
            UnaryOp::Sigmoid => T::one() / (T::one() + (-x).exp()),
            UnaryOp::Relu => {
                if x > T::zero() {
                    x
                } else {
                    T::zero()
                }
            }
            UnaryOp::LeakyRelu { negative_slope } => {
                if x > T::zero() {
                    x
                } else {
                    x * c(negative_slope)
                }
            }
            UnaryOp::Gelu { tanh: false } => {
                x * c(0.5) * (T::one() + erf(x * c(std::f64::consts::FRAC_1_SQRT_2)))
            }
            UnaryOp::Gelu { tanh: true } => {
                let inner = c(SQRT_2_OVER_PI) * (x + c(GELU_TANH_COEFF) * x * x * x);
                c(0.5) * x * (T::one() + inner.tanh())
            }
            UnaryOp::Silu => x / (T::one() + (-x).exp()),
            UnaryOp::Elu { alpha } => {
                if x > T::zero() {
                    x
                } else {
                    c(alpha) * (x.exp() - T::one())
                }
            }
            UnaryOp::Hardswish => x * relu6(x + c(3.0)) / c(6.0),
            UnaryOp::Hardsigmoid => relu6(x + c(3.0)) / c(6.0),
            UnaryOp::Relu6 => relu6(x),
            UnaryOp::Softplus { beta, threshold } => {
                let bx = x * c(beta);
                if bx > c(threshold) {
                    x
                } else {
                    (T::one() + bx.exp()).ln() / c(beta)
                }
            }
        }
    }

    fn reads(self) -> Reads {
        match self {
            UnaryOp::Exp
            | UnaryOp::Sqrt
            | UnaryOp::Rsqrt
            | UnaryOp::Tanh
            | UnaryOp::Sigmoid
            | UnaryOp::Relu => Reads::Output,
            _ => Reads::Input,
        }
    }

    /// dy/dx as a function of `x` or `y` (see [`UnaryOp::reads`]).
    #[inline(always)]
    fn derivative<T: Float>(self, v: T) -> T {
        let c = |v: f64| T::from_f64(v);
        match self {
            UnaryOp::Neg => -T::one(),
            UnaryOp::Abs => sign(v),
            UnaryOp::Sign => T::zero(),
            UnaryOp::Exp => v,
            UnaryOp::Log => v.recip(),
            UnaryOp::Sqrt => c(0.5) / v,
            UnaryOp::Rsqrt => c(-0.5) * v * v * v,
            UnaryOp::Sin => v.cos(),
            UnaryOp::Cos => -v.sin(),
            UnaryOp::Tanh => T::one() - v * v,
            UnaryOp::Sigmoid => v * (T::one() - v),
            UnaryOp::Relu => {
                if v > T::zero() {
                    T::one()
                } else {
                    T::zero()
                }
            }
            UnaryOp::LeakyRelu { negative_slope } => {
                if v > T::zero() {
                    T::one()
                } else {
                    c(negative_slope)
                }
            }
            UnaryOp::Gelu { tanh: false } => {
                let cdf = c(0.5) * (T::one() + erf(v * c(std::f64::consts::FRAC_1_SQRT_2)));
                let pdf = (c(-0.5) * v * v).exp() * c(0.398_942_280_401_432_7);
                cdf + v * pdf
            }
            UnaryOp::Gelu { tanh: true } => {
                let inner = c(SQRT_2_OVER_PI) * (v + c(GELU_TANH_COEFF) * v * v * v);
                let t = inner.tanh();
                let d_inner = c(SQRT_2_OVER_PI) * (T::one() + c(3.0 * GELU_TANH_COEFF) * v * v);
                c(0.5) * (T::one() + t) + c(0.5) * v * (T::one() - t * t) * d_inner
            }
            UnaryOp::Silu => {
                let s = T::one() / (T::one() + (-v).exp());
                s * (T::one() + v * (T::one() - s))
            }
            UnaryOp::Elu { alpha } => {
                if v > T::zero() {
                    T::one()
                } else {
                    c(alpha) * v.exp()
                }
            }
            // PyTorch's subgradients: 0 at x = -3, 1 at x = 3.
            UnaryOp::Hardswish => {
                if v <= c(-3.0) {
                    T::zero()
                } else if v < c(3.0) {
                    v / c(3.0) + c(0.5)
                } else {
                    T::one()
                }
            }
            // 1/6 strictly inside (-3, 3), 0 at the kinks.
            UnaryOp::Hardsigmoid => {
                if v > c(-3.0) && v < c(3.0) {
                    c(1.0 / 6.0)
                } else {
                    T::zero()
                }
            }
            // 1 strictly inside (0, 6), 0 at the kinks.
            UnaryOp::Relu6 => {
                if v > T::zero() && v < c(6.0) {
                    T::one()
                } else {
                    T::zero()
                }
            }
            UnaryOp::Softplus { beta, threshold } => {
                let bx = v * c(beta);
                if bx > c(threshold) {
                    T::one()
                } else {
                    let z = bx.exp();
                    z / (z + T::one())
                }
            }
        }
    }
}

/// Expands `$body` once per variant with `$op` naming that variant as a constant (not a
/// captured value), so that every elementwise loop is compiled and vectorised for a single
/// function instead of matching on the op per element.
macro_rules! specialize_unary {
    ($value:expr, $op:ident => $body:expr) => {
        #[allow(non_upper_case_globals)]
        match $value {
            UnaryOp::Neg => {
                const $op: UnaryOp = UnaryOp::Neg;
                $body
            }
            UnaryOp::Abs => {
                const $op: UnaryOp = UnaryOp::Abs;
                $body
            }
            UnaryOp::Sign => {
                const $op: UnaryOp = UnaryOp::Sign;
                $body
            }
            UnaryOp::Exp => {
                const $op: UnaryOp = UnaryOp::Exp;
                $body
            }
            UnaryOp::Log => {
                const $op: UnaryOp = UnaryOp::Log;
                $body
            }
            UnaryOp::Sqrt => {
                const $op: UnaryOp = UnaryOp::Sqrt;
                $body
            }
            UnaryOp::Rsqrt => {
                const $op: UnaryOp = UnaryOp::Rsqrt;
                $body
            }
            UnaryOp::Sin => {
                const $op: UnaryOp = UnaryOp::Sin;
                $body
            }
            UnaryOp::Cos => {
                const $op: UnaryOp = UnaryOp::Cos;
                $body
            }
            UnaryOp::Tanh => {
                const $op: UnaryOp = UnaryOp::Tanh;
                $body
            }
            UnaryOp::Sigmoid => {
                const $op: UnaryOp = UnaryOp::Sigmoid;
                $body
            }
            UnaryOp::Relu => {
                const $op: UnaryOp = UnaryOp::Relu;
                $body
            }
            UnaryOp::LeakyRelu { negative_slope } => {
                let $op = LeakyRelu(negative_slope);
                $body
            }
            UnaryOp::Gelu { tanh: true } => {
                const $op: UnaryOp = UnaryOp::Gelu { tanh: true };
                $body
            }
            UnaryOp::Gelu { tanh: false } => {
                const $op: UnaryOp = UnaryOp::Gelu { tanh: false };
                $body
            }
            UnaryOp::Silu => {
                const $op: UnaryOp = UnaryOp::Silu;
                $body
            }
            UnaryOp::Hardswish => {
                const $op: UnaryOp = UnaryOp::Hardswish;
                $body
            }
            UnaryOp::Hardsigmoid => {
                const $op: UnaryOp = UnaryOp::Hardsigmoid;
                $body
            }
            UnaryOp::Relu6 => {
                const $op: UnaryOp = UnaryOp::Relu6;
                $body
            }
            // Ops with attributes capture them as values.
            op @ (UnaryOp::Elu { .. } | UnaryOp::Softplus { .. }) => {
                let $op = op;
                $body
            }
        }
    };
}

/// Leaky ReLU with its slope as the only captured value.
#[derive(Clone, Copy)]
struct LeakyRelu(f64);

impl LeakyRelu {
    #[inline(always)]
    fn eval<T: Float>(self, x: T) -> T {
        UnaryOp::LeakyRelu {
            negative_slope: self.0,
        }
        .eval(x)
    }

    #[inline(always)]
    fn derivative<T: Float>(self, v: T) -> T {
        UnaryOp::LeakyRelu {
            negative_slope: self.0,
        }
        .derivative(v)
    }
}

impl OpDef for UnaryOp {
    op_identity!(attributes: variant, kind: ElementwiseUnary);

    fn backward_reads_output(&self) -> bool {
        matches!(self.reads(), Reads::Output)
    }

    fn name(&self) -> String {
        match self {
            UnaryOp::Neg => "neg",
            UnaryOp::Abs => "abs",
            UnaryOp::Sign => "sign",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Rsqrt => "rsqrt",
            UnaryOp::Sin => "sin",
            UnaryOp::Cos => "cos",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Sigmoid => "sigmoid",
            UnaryOp::Relu => "relu",
            UnaryOp::LeakyRelu { .. } => "leaky_relu",
            UnaryOp::Gelu { .. } => "gelu",
            UnaryOp::Silu => "silu",
            UnaryOp::Elu { .. } => "elu",
            UnaryOp::Hardswish => "hardswish",
            UnaryOp::Hardsigmoid => "hardsigmoid",
            UnaryOp::Relu6 => "relu6",
            UnaryOp::Softplus { .. } => "softplus",
        }
        .into()
    }

    fn meta(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>> {
        expect_inputs(&self.name(), inputs, 1)?;
        expect_float(&self.name(), &inputs[0])?;
        Ok(vec![inputs[0].clone()])
    }

    fn cpu(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        let op = *self;
        let x = inputs[0];
        Ok(vec![
            float_dispatch!(x.dtype(), self.name(), T => specialize_unary!(op, o => map(x, move |v: T| o.eval(v))?)),
        ])
    }

    fn backward(&self, cx: &BackwardCtx) -> Result<Vec<Option<Tensor>>> {
        let source = match self.reads() {
            Reads::Input => &cx.inputs[0],
            Reads::Output => &cx.outputs[0],
        };
        let grad = Op::UnaryBackward(*self).apply1(&[&cx.grad(0)?, source])?;
        Ok(vec![Some(grad)])
    }
}

/// The derivative of a unary op: `grad * f'(v)` elementwise, `v` being the op's input or its
/// output (whichever [`UnaryOp`]'s derivative reads); an exact zero derivative gives `+0`.
/// Inputs `grad, v`, of one shape and dtype.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct UnaryBackwardOp(pub(crate) UnaryOp);

impl UnaryBackwardOp {
    /// Whether `f''` is zero wherever `f'` is defined (piecewise-linear functions), so that
    /// the gradient with respect to `v` of a second backward is zero.
    fn piecewise_linear(self) -> bool {
        matches!(
            self.0,
            UnaryOp::Neg
                | UnaryOp::Abs
                | UnaryOp::Sign
                | UnaryOp::Relu
                | UnaryOp::LeakyRelu { .. }
                | UnaryOp::Hardsigmoid
                | UnaryOp::Relu6
        )
    }
}

impl OpDef for UnaryBackwardOp {
    fn name(&self) -> String {
        format!("{}_backward", self.0.name())
    }

    fn attributes(&self) -> Option<String> {
        self.0.attributes()
    }

    fn kind(&self) -> OpKind {
        OpKind::ElementwiseBinary
    }

    fn meta(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>> {
        let name = self.name();
        expect_inputs(&name, inputs, 2)?;
        expect_float(&name, &inputs[0])?;
        if inputs[0].shape != inputs[1].shape {
            return Err(TensorError::shapes(
                name,
                &inputs[0].shape,
                &inputs[1].shape,
                "grad and the value the derivative reads must have one shape",
            ));
        }
        if inputs[0].dtype != inputs[1].dtype {
            return Err(TensorError::DTypeMismatch {
                op: name,
                expected: inputs[0].dtype,
                got: inputs[1].dtype,
            });
        }
        Ok(vec![inputs[0].clone()])
    }

    fn cpu(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        let (g, source) = (inputs[0], inputs[1]);
        let shape = g.shape();
        let dtype: DType = g.dtype();
        let grad = float_dispatch!(dtype, self.name(), T => specialize_unary!(self.0, o => zip(g, source, &shape, "backward", move |g: T, v: T| {
            let d = o.derivative(v);
            // An exact zero derivative gives +0, never -0 (as PyTorch's threshold_backward).
            let zero: T = num_traits::Zero::zero();
            if d == zero { zero } else { g * d }
        })?));
        Ok(vec![grad])
    }

    /// Linear in `grad` (its adjoint is itself); in `v` only piecewise-linear functions have a
    /// second derivative defined here (zero).
    fn backward(&self, cx: &BackwardCtx) -> Result<Vec<Option<Tensor>>> {
        let upstream = cx.grad(0)?;
        let grad = if cx.needs[0] {
            Some(Op::UnaryBackward(self.0).apply1(&[&upstream, &cx.inputs[1]])?)
        } else {
            None
        };
        if cx.needs[1] && !self.piecewise_linear() {
            return Err(TensorError::NoDoubleBackward {
                op: self.name(),
                input: 1,
            });
        }
        Ok(vec![grad, None])
    }
}

/// The unary backward op that prints as `name` with `attrs` (`relu_backward`).
pub(crate) fn decode_backward(
    name: &str,
    attrs: Option<&serde_json::Value>,
) -> Option<UnaryBackwardOp> {
    let base = name.strip_suffix("_backward")?;
    super::text::decode_variant::<UnaryOp>(base, attrs).map(UnaryBackwardOp)
}
