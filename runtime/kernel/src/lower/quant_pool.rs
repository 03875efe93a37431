//! The u8 mean of the quantized average pools (`quantized_avg_pool2d`,
//! `quantized_adaptive_avg_pool2d`, and `avg_pool2d` / `adaptive_avg_pool2d` of u8 tensors,
//! whose zero point is 0), shared by the window ([`super::pool`]) and adaptive
//! ([`super::adaptive_pool`]) lowerings, bit for bit the eager `requantize_mean`: the taps'
//! sum and the divisor `n` (the taps inside the input) are exact i64s, and
//! `clamp(rne((sum - n * zp) as f32 * ((1 / n) as f32)) + zp, 0, 255)` is computed as eager
//! does, the reciprocal in f64 rounded to f32, the product in f32 and the rounding and clamp
//! of the elementwise quantized ops ([`super::quant`]). A window with no tap inside the input
//! gives 0, as eager.

use super::fake_quant::Steps;
use super::quant::requantize;
use crate::{BinaryFn, CompareFn, Expr, KernelBuilder, ScalarType, ValueId};
use tessera_tensor::Op;
use tessera_tensor::op::{PoolOp, QuantOp};

/// The average pool and zero point of a u8 average: `quantized_(adaptive_)avg_pool2d`, or a
/// plain average pool whose value is u8 (`u8` says so; zero point 0, as its eager kernel).
pub(super) fn u8_average(op: &Op, u8: bool) -> Option<(&PoolOp, i64)> {
    match op {
        Op::Quant(QuantOp::AvgPool { pool, zero_point }) => Some((pool, *zero_point)),
        Op::Pool(pool @ (PoolOp::AvgPool2d { .. } | PoolOp::AdaptiveAvgPool2d { .. })) if u8 => {
            Some((pool, 0))
        }
        _ => None,
    }
}

/// The sum of u8 `taps` as an i64 (exact, in any order).
pub(super) fn sum_u8(b: &mut KernelBuilder, taps: impl IntoIterator<Item = ValueId>) -> ValueId {
    let mut e = Steps { b };
    let mut sum = None;
    for tap in taps {
        let wide = e.cast(ScalarType::I64, tap);
        sum = Some(match sum {
            None => wide,
            Some(acc) => e.bin(BinaryFn::Add, acc, wide),
        });
    }
    sum.unwrap_or_else(|| e.c(ScalarType::I64, 0.0))
}

/// The u8 mean of a window from the i64 `sum` of its taps and the i64 number `n` of them
/// inside the input (a constant or computed per point), with `zero_point`, as the eager
/// `requantize_mean`; 0 where `n` is not positive.
pub(super) fn requantize_mean(
    b: &mut KernelBuilder,
    sum: ValueId,
    n: ValueId,
    zero_point: i64,
) -> ValueId {
    let constant = match b.expr(n) {
        Expr::Const(c) => Some(*c),
        _ => None,
    };
    let mut e = Steps { b };
    let zp = e.c(ScalarType::I64, zero_point as f64);
    let shift = e.bin(BinaryFn::Mul, n, zp);
    let acc = e.bin(BinaryFn::Sub, sum, shift);
    let acc = e.cast(ScalarType::F32, acc);
    // Eager: `(1.0 / n as f64) as f32`.
    let multiplier = match constant {
        Some(n) => e.c(ScalarType::F32, f64::from((1.0 / n) as f32)),
        None => {
            let n = e.cast(ScalarType::F64, n);
            let one = e.c(ScalarType::F64, 1.0);
            let reciprocal = e.bin(BinaryFn::Div, one, n);
            e.cast(ScalarType::F32, reciprocal)
        }
    };
    let mean = e.bin(BinaryFn::Mul, acc, multiplier);
    let zp = e.c(ScalarType::F64, zero_point as f64);
    let q = requantize(b, mean, zp, (0.0, 255.0));
    let mut e = Steps { b };
    let zero = e.c(ScalarType::I64, 0.0);
    let empty = e.cmp(CompareFn::Le, n, zero);
    let q = e.select(empty, zero, q);
    e.cast(ScalarType::U8, q)
}
