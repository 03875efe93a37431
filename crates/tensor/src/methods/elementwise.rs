//! Elementwise methods: unary functions, arithmetic with tensors and scalars, comparisons,
//! `where` and `clamp`.

use crate::op::{BinaryOp, CompareOp, Op, ScalarOp, UnaryOp};
use crate::{DType, Result, Tensor};

macro_rules! unary_methods {
    ($($(#[$doc:meta])* $name:ident => $op:expr;)*) => {
        impl Tensor {
            $($(#[$doc])* pub fn $name(&self) -> Result<Tensor> {
                Op::Unary($op).apply1(&[self])
            })*
        }
    };
}

unary_methods! {
    neg => UnaryOp::Neg;
    abs => UnaryOp::Abs;
    /// -1, 0 or 1 by sign (0 gradient).
    sign => UnaryOp::Sign;
    exp => UnaryOp::Exp;
    log => UnaryOp::Log;
    sqrt => UnaryOp::Sqrt;
    rsqrt => UnaryOp::Rsqrt;
    sin => UnaryOp::Sin;
    cos => UnaryOp::Cos;
    tanh => UnaryOp::Tanh;
    sigmoid => UnaryOp::Sigmoid;
    relu => UnaryOp::Relu;
    silu => UnaryOp::Silu;
    /// Exact GELU, `x * Phi(x)`.
    gelu => UnaryOp::Gelu { tanh: false };
    /// GELU with the tanh approximation (`approximate="tanh"`).
    gelu_tanh => UnaryOp::Gelu { tanh: true };
    /// `min(max(x, 0), 6)`.
    relu6 => UnaryOp::Relu6;
    /// `x * relu6(x + 3) / 6`.
    hardswish => UnaryOp::Hardswish;
    /// `relu6(x + 3) / 6`.
    hardsigmoid => UnaryOp::Hardsigmoid;
}

macro_rules! binary_methods {
    ($($name:ident, $scalar:ident => $op:expr;)*) => {
        impl Tensor {
            $(
                #[doc = concat!("Elementwise `", stringify!($name), "` with broadcasting.")]
                pub fn $name(&self, other: &Tensor) -> Result<Tensor> {
                    Op::Binary($op).apply1(&[self, other])
                }
                #[doc = concat!("Elementwise `", stringify!($name), "` with a scalar.")]
                pub fn $scalar(&self, value: f64) -> Result<Tensor> {
                    Op::Scalar(ScalarOp { op: $op, value, reversed: false }).apply1(&[self])
                }
            )*
        }
    };
}

binary_methods! {
    add, add_scalar => BinaryOp::Add;
    sub, sub_scalar => BinaryOp::Sub;
    mul, mul_scalar => BinaryOp::Mul;
    div, div_scalar => BinaryOp::Div;
    pow, pow_scalar => BinaryOp::Pow;
    maximum, maximum_scalar => BinaryOp::Maximum;
    minimum, minimum_scalar => BinaryOp::Minimum;
}

macro_rules! compare_methods {
    ($($name:ident, $scalar:ident => $op:expr;)*) => {
        impl Tensor {
            $(
                #[doc = concat!("Elementwise `", stringify!($name), "` comparison giving bool.")]
                pub fn $name(&self, other: &Tensor) -> Result<Tensor> {
                    Op::Compare($op).apply1(&[self, other])
                }
                #[doc = concat!("Elementwise `", stringify!($name), "` comparison with a scalar.")]
                pub fn $scalar(&self, value: f64) -> Result<Tensor> {
                    let scalar = Tensor::full(&[], value, if self.dtype().is_float() { self.dtype() } else { DType::F64 })?;
                    Op::Compare($op).apply1(&[self, &scalar])
                }
            )*
        }
    };
}

compare_methods! {
    eq_, eq_scalar => CompareOp::Eq;
    ne, ne_scalar => CompareOp::Ne;
    lt, lt_scalar => CompareOp::Lt;
    le, le_scalar => CompareOp::Le;
    gt, gt_scalar => CompareOp::Gt;
    ge, ge_scalar => CompareOp::Ge;
}

impl Tensor {
    /// `scalar - self`.
    pub fn rsub_scalar(&self, value: f64) -> Result<Tensor> {
        Op::Scalar(ScalarOp {
            op: BinaryOp::Sub,
            value,
            reversed: true,
        })
        .apply1(&[self])
    }

    /// `scalar / self`.
    pub fn rdiv_scalar(&self, value: f64) -> Result<Tensor> {
        Op::Scalar(ScalarOp {
            op: BinaryOp::Div,
            value,
            reversed: true,
        })
        .apply1(&[self])
    }

    /// `x` where `x > 0`, `negative_slope * x` elsewhere.
    pub fn leaky_relu(&self, negative_slope: f64) -> Result<Tensor> {
        Op::Unary(UnaryOp::LeakyRelu { negative_slope }).apply1(&[self])
    }

    /// `x` where `x > 0`, `alpha * (exp(x) - 1)` elsewhere.
    pub fn elu(&self, alpha: f64) -> Result<Tensor> {
        Op::Unary(UnaryOp::Elu { alpha }).apply1(&[self])
    }

    /// `log(1 + exp(beta * x)) / beta`, and `x` itself where `beta * x > threshold`
    /// (PyTorch's defaults are `beta = 1`, `threshold = 20`).
    pub fn softplus(&self, beta: f64, threshold: f64) -> Result<Tensor> {
        Op::Unary(UnaryOp::Softplus { beta, threshold }).apply1(&[self])
    }

    /// `x * tanh(softplus(x))`, composed from the op table's softplus, tanh and mul.
    pub fn mish(&self) -> Result<Tensor> {
        self.mul(&self.softplus(1.0, 20.0)?.tanh()?)
    }

    /// `a` where `cond` holds, `b` elsewhere (PyTorch's `torch.where`), all broadcast.
    pub fn where_(cond: &Tensor, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        Op::Where.apply1(&[cond, a, b])
    }

    /// Clamps into `[min, max]`; either bound may be absent.
    pub fn clamp(&self, min: Option<f64>, max: Option<f64>) -> Result<Tensor> {
        Op::Clamp { min, max }.apply1(&[self])
    }

    /// Converts to `dtype` (a no-op handle when already of that dtype).
    pub fn to_dtype(&self, dtype: DType) -> Result<Tensor> {
        if self.dtype() == dtype {
            return Ok(self.clone());
        }
        Op::ToDType(dtype).apply1(&[self])
    }

    /// Moves to `device`: the CPU, the meta device (shape and dtype only), or a device whose
    /// crate registered a backend (see [`crate::backend`]); with none registered the device is
    /// `DeviceUnavailable`.
    pub fn to_device(&self, device: crate::Device) -> Result<Tensor> {
        crate::backend::dispatch::to_device(self, device)
    }
}
