//! `Op::UnaryBackward` lowered to the kernel IR: for every unary op, in f32 and f64, the
//! kernel-IR interpreter and the JIT give the eager backward's bits (`grad * f'(v)`, `+0`
//! where the derivative is exactly zero) on values including zeros, infinities, NaN,
//! subnormals and the points where the derivatives switch. The one exception is f32 `exp`:
//! generated code computes it with the inline polynomial of `tessera_kernel::exp_poly`
//! (within `EXP_F32_MAX_ULP` of the correctly rounded `exp` eager code calls), so the four
//! derivatives that call `exp` (erf GELU, SiLU, ELU, softplus) are checked in f32 within
//! [`EXP_DERIVATIVE_ULP`] units in the last place; the interpreter and the JIT still agree
//! with each other bit for bit there. f16 and bf16 compute in f32 and round once, eager and
//! generated code alike (those four within one step of the half type).

use crate::common;

use common::{eager, jit_run, lowered};
use tessera_fx::Graph;
use tessera_kernel::{Interpreter, NoEnvironment, run_program};
use tessera_tensor::op::UnaryOp;
use tessera_tensor::{DType, Op, Tensor, TensorMeta};

/// The values the derivative reads: specials, subnormals, the kinks of the piecewise ops
/// (0, ±3, 6, softplus's `beta * v = threshold` at 2.5) and their neighbours.
fn values() -> Vec<f64> {
    let mut vs = vec![
        0.0,
        -0.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        f64::from(f32::MIN_POSITIVE) / 4.0,
        -f64::from(f32::MIN_POSITIVE) / 4.0,
        f64::MIN_POSITIVE / 4.0,
        -f64::MIN_POSITIVE / 4.0,
        1e-30,
        -1e-30,
        100.0,
        -100.0,
        1000.0,
        -1000.0,
    ];
    for kink in [0.0f64, 1.0, -1.0, 3.0, -3.0, 6.0, -6.0, 2.5, 0.5, -0.5] {
        vs.extend([kink, kink + 1e-3, kink - 1e-3]);
    }
    vs.extend((-40..=40).map(|i| f64::from(i) * 0.37));
    vs
}

/// Upstream gradients cycled against the values: ordinary, zero, infinite and NaN (a zero
/// derivative must still give `+0`).
const GRADS: [f64; 7] = [1.0, -2.5, 0.75, 0.0, f64::INFINITY, f64::NAN, -0.0];

/// The one-op graph `unary_backward(grad, v)` and its inputs in `dtype`.
fn case(op: UnaryOp, dtype: DType) -> (Graph, [Tensor; 2]) {
    let vs = values();
    let n = vs.len();
    let grads: Vec<f64> = (0..n).map(|i| GRADS[i % GRADS.len()]).collect();
    let mut graph = Graph::new();
    let g = graph.placeholder("grad", TensorMeta::new(vec![n], dtype));
    let v = graph.placeholder("v", TensorMeta::new(vec![n], dtype));
    let d = graph
        .call_function(Op::UnaryBackward(op), &[&g, &v])
        .unwrap();
    graph.output(&[&d]).unwrap();
    let tensor = |xs: Vec<f64>| Tensor::from_vec(xs, &[n]).unwrap().to_dtype(dtype).unwrap();
    (graph, [tensor(grads), tensor(vs)])
}

/// How far, in f32 units in the last place, a derivative that calls `exp` may be from the
/// eager one: the polynomial's error carried through the few roundings after it (the
/// largest distances measured over [`values`]: 1 for GELU and ELU, 2 for softplus, 3 for
/// SiLU, whose `1 - sigmoid` cancels).
const EXP_DERIVATIVE_ULP: u64 = 4;

/// Whether `op`'s derivative calls `exp` (and so differs from eager in f32 by the polynomial).
fn derivative_calls_exp(op: UnaryOp) -> bool {
    matches!(
        op,
        UnaryOp::Gelu { tanh: false }
            | UnaryOp::Silu
            | UnaryOp::Elu { .. }
            | UnaryOp::Softplus { .. }
    )
}

/// The distance in f32 units in the last place between two f32 values widened to f64 (0
/// for equal bits or two NaNs; `u64::MAX` where exactly one is NaN).
fn f32_ulps(a: u64, b: u64) -> u64 {
    let (a, b) = (f64::from_bits(a) as f32, f64::from_bits(b) as f32);
    if a.is_nan() || b.is_nan() {
        return if a.is_nan() && b.is_nan() {
            0
        } else {
            u64::MAX
        };
    }
    // The f32 bit patterns mapped to a monotonic integer line (negatives mirrored).
    let line = |x: f32| {
        let bits = i64::from(x.to_bits() as i32);
        if bits < 0 {
            i64::from(i32::MIN) - bits
        } else {
            bits
        }
    };
    line(a).abs_diff(line(b))
}

/// The spacing of the half type `dtype` (f16: 10 stored mantissa bits, bf16: 7) at magnitude
/// `x`, subnormal spacing below its normal range.
fn half_step(dtype: DType, x: f64) -> f64 {
    let (mantissa, smallest) = match dtype {
        DType::F16 => (10, -24),
        _ => (7, -133),
    };
    let exponent = if x > 0.0 {
        x.log2().floor() as i32
    } else {
        smallest
    };
    2f64.powi(exponent.saturating_sub(mantissa).max(smallest))
}

/// The elements of `t` as f64 bit patterns widened exactly, NaNs made one pattern.
fn bits(t: &Tensor) -> Vec<u64> {
    t.to_dtype(DType::F64)
        .unwrap()
        .to_vec::<f64>()
        .unwrap()
        .into_iter()
        .map(|x| {
            if x.is_nan() {
                f64::NAN.to_bits()
            } else {
                x.to_bits()
            }
        })
        .collect()
}

/// The ops (`op`'s name) whose interpreted or JIT result differs from eager in `dtype`, with
/// the first differing element.
fn mismatches(dtype: DType) -> Vec<String> {
    let mut bad = Vec::new();
    for op in UnaryOp::EVERY {
        let (graph, inputs) = case(op, dtype);
        let program = lowered(&graph, &inputs);
        assert!(
            program.kernels().count() == 1 && program.fallbacks.is_empty(),
            "{op:?} {dtype:?} did not lower to one kernel:\n{program}"
        );
        let expected = bits(&eager(&graph, &inputs)[0]);
        let interpreted = run_program(&program, &NoEnvironment, &Interpreter, &inputs).unwrap();
        let jitted = jit_run(&program, &inputs);
        let ulps = if dtype != DType::F64 && derivative_calls_exp(op) {
            assert_eq!(
                bits(&interpreted[0]),
                bits(&jitted[0]),
                "{op:?}: the interpreter and the JIT differ"
            );
            EXP_DERIVATIVE_ULP
        } else {
            0
        };
        for (backend, got) in [("interpreter", &interpreted[0]), ("JIT", &jitted[0])] {
            let got = bits(got);
            let differs = |i: usize| match ulps {
                0 => expected[i] != got[i],
                // A half result within one step of the half type (the f32 polynomial's
                // error may flip the final rounding), a zero keeping its sign.
                _ if matches!(dtype, DType::F16 | DType::BF16) => {
                    let (a, b) = (f64::from_bits(expected[i]), f64::from_bits(got[i]));
                    let both_zero = a == 0.0 && b == 0.0;
                    let apart = if a.is_finite() && b.is_finite() {
                        (a - b).abs() > half_step(dtype, a.abs().max(b.abs()))
                    } else {
                        expected[i] != got[i]
                    };
                    apart || (both_zero && expected[i] != got[i])
                }
                // Within the bound, and a zero keeps its sign.
                n => {
                    let both_zero =
                        f64::from_bits(expected[i]) == 0.0 && f64::from_bits(got[i]) == 0.0;
                    f32_ulps(expected[i], got[i]) > n || (both_zero && expected[i] != got[i])
                }
            };

            if let Some(i) = (0..expected.len()).find(|&i| differs(i)) {
                bad.push(format!(
                    "{op:?} {dtype:?} {backend}: v = {:e}, grad = {:e}: eager {:e}, got {:e}",
                    inputs[1]
                        .to_dtype(DType::F64)
                        .unwrap()
                        .to_vec::<f64>()
                        .unwrap()[i],
                    inputs[0]
                        .to_dtype(DType::F64)
                        .unwrap()
                        .to_vec::<f64>()
                        .unwrap()[i],
                    f64::from_bits(expected[i]),
                    f64::from_bits(got[i]),
                ));
            }
        }
    }
    bad
}

#[test]
fn every_unary_backward_equals_eager_bit_for_bit_in_f64() {
    let bad = mismatches(DType::F64);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn every_unary_backward_equals_eager_bit_for_bit_in_f32_but_exp_within_ulps() {
    let bad = mismatches(DType::F32);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn every_unary_backward_equals_eager_in_half_types_computed_in_f32() {
    // As every half op: the operands widened to f32, the f32 derivative, one rounding; bit for
    // bit but for the four derivatives calling `exp` (within one step of the half type).
    for dtype in [DType::F16, DType::BF16] {
        let bad = mismatches(dtype);
        assert!(bad.is_empty(), "{}", bad.join("\n"));
    }
}
