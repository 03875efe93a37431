//! `cat` lowered to one kernel of guarded loads: the kernel-IR interpreter and the JIT give
//! the eager kernel's result bit for bit, along every dim, for transposed and broadcast
//! operands, empty and legacy-empty inputs, f32 and f64 promoted, and signed zeros,
//! infinities and NaN; half, integer and bool inputs too (read in their storage type, summed
//! in f32 or i64); an integer input of a float result runs the eager kernel, reported as a
//! fallback.

use crate::common;

use common::{check_backends, eager, lowered};
use tessera_fx::Graph;
use tessera_tensor::op::IndexOp;
use tessera_tensor::{DType, Op, Tensor};

/// `shape` of `dtype`: steps of 0.25 with -0.0, infinities and NaN mixed in.
fn t(shape: &[usize], dtype: DType, seed: usize) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|i| match (i * 5 + seed) % 11 {
            2 => -0.0,
            5 => f64::INFINITY,
            8 => f64::NAN,
            k => (k as f64 - 5.0) * 0.25,
        })
        .collect();
    Tensor::from_vec(v, shape).unwrap().to_dtype(dtype).unwrap()
}

/// `cat` along `dim` of placeholders for `inputs`.
fn cat_graph(dim: usize, inputs: &[Tensor]) -> Graph {
    common::op_graph(Op::Index(IndexOp::Cat { dim }), inputs)
}

/// The lowering makes one kernel of `cat`, which agrees with eager bit for bit.
fn one_exact_kernel(what: &str, dim: usize, inputs: &[Tensor]) {
    let g = cat_graph(dim, inputs);
    let program = lowered(&g, inputs);
    assert!(program.fallbacks.is_empty(), "{what}\n{program}");
    assert_eq!(program.kernels().count(), 1, "{what}\n{program}");
    let want = eager(&g, inputs);
    check_backends(&program, inputs, &want, 0.0);
    let got = tessera_kernel::run_program(
        &program,
        &tessera_kernel::NoEnvironment,
        &tessera_kernel::Interpreter,
        inputs,
    )
    .unwrap();
    let bits = |x: &Tensor| -> Vec<u64> {
        x.to_vec_f64()
            .unwrap()
            .iter()
            .map(|v| if v.is_nan() { 0 } else { v.to_bits() })
            .collect()
    };
    assert_eq!(bits(&got[0]), bits(&want[0]), "{what}: signed zeros");
}

#[test]
fn cat_is_one_kernel_equal_to_eager_along_every_dim() {
    for dtype in [DType::F32, DType::F64] {
        for dim in 0..3 {
            let shape = |n: usize| {
                let mut s = vec![2, 3, 4];
                s[dim] = n;
                s
            };
            let inputs = [
                t(&shape(1), dtype, 1),
                t(&shape(3), dtype, 2),
                t(&shape(0), dtype, 3),
            ];
            one_exact_kernel(&format!("{dtype} dim {dim}"), dim, &inputs);
        }
        // A transposed and a broadcast operand, and the same slot twice.
        let a = t(&[4, 3], dtype, 4).t().unwrap();
        let b = t(&[1, 2], dtype, 5).expand(&[3, 2]).unwrap();
        one_exact_kernel(&format!("{dtype} views"), 1, &[a.clone(), b, a]);
    }
}

#[test]
fn cat_promotes_f32_to_f64_and_skips_legacy_empty_inputs() {
    let legacy = Tensor::zeros(&[0], DType::F32).unwrap();
    let inputs = [t(&[2, 3], DType::F32, 6), legacy, t(&[1, 3], DType::F64, 7)];
    one_exact_kernel("f32, [0] and f64", 0, &inputs);
}

/// Integers of `dtype` near both ends of its range.
fn ints(n: usize, dtype: DType, seed: i64) -> Tensor {
    tessera_testkit::narrow_int_values(n, dtype, seed)
}

#[test]
fn cat_of_halves_integers_and_bools_is_one_kernel_equal_to_eager() {
    for dtype in [DType::F16, DType::BF16] {
        let (a, b) = (t(&[2, 3], dtype, 10), t(&[3, 4], dtype, 11));
        one_exact_kernel(&format!("{dtype}"), 0, &[a.clone(), b.t().unwrap()]);
        one_exact_kernel(&format!("{dtype} dim 1"), 1, &[a, t(&[2, 2], dtype, 12)]);
    }
    let i64s = Tensor::from_vec(vec![1i64 << 40, -(1 << 40), 7, 0, -1], &[5]).unwrap();
    for (what, inputs) in [
        ("u8", vec![ints(5, DType::U8, 0), ints(7, DType::U8, 1)]),
        ("i8", vec![ints(6, DType::I8, 2), ints(3, DType::I8, 3)]),
        ("i32", vec![ints(4, DType::I32, 4), ints(6, DType::I32, 5)]),
        ("i64", vec![i64s.clone(), i64s.clone()]),
        (
            "u8 and i8 into i32",
            vec![ints(5, DType::U8, 6), ints(5, DType::I8, 7)],
        ),
        ("i32 and i64", vec![ints(4, DType::I32, 8), i64s]),
        (
            "bool",
            vec![ints(5, DType::Bool, 9), ints(4, DType::Bool, 10)],
        ),
        (
            "bool and u8",
            vec![ints(5, DType::Bool, 11), ints(3, DType::U8, 12)],
        ),
        (
            "f16 and f32",
            vec![t(&[3], DType::F16, 13), t(&[2], DType::F32, 14)],
        ),
    ] {
        one_exact_kernel(what, 0, &inputs);
    }
}

#[test]
fn cat_of_an_integer_into_a_float_result_runs_the_eager_kernel() {
    // An integer input's fill would be +0.0 and turn a float input's -0.0 positive.
    let ints = Tensor::from_vec(vec![3i64, -4], &[2]).unwrap();
    let inputs = [t(&[3], DType::F32, 8), ints];
    let g = cat_graph(0, &inputs);
    let program = lowered(&g, &inputs);
    assert_eq!(program.fallbacks.len(), 1, "{program}");
    check_backends(&program, &inputs, &eager(&g, &inputs), 0.0);
}
