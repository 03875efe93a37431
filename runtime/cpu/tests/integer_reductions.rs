//! Reductions of integer and bool tensors as generated kernels: `sum` (an i64, wrapping as
//! the eager kernel), `amax`/`amin` (of the input's dtype) and `argmax`/`argmin`, computed
//! exactly in i64. The kernel-IR interpreter and the JIT equal the eager kernels bit for bit
//! on values beyond 2^53 that differ by one (an f64 accumulator would merge them), ties (the
//! first position wins), `i64::MIN`/`i64::MAX`, a sum that wraps, every dim and all dims,
//! keepdim or not, transposed inputs, and bool, u8, i8 and i32 inputs; `(a == b).sum()`, the
//! accuracy count, is one kernel with the comparison fused into the sum.

use crate::common;

use common::{jit_run, lowered, op_graph};
use tessera_fx::Graph;
use tessera_kernel::{Interpreter, NoEnvironment, Program, run_program};
use tessera_tensor::op::{CompareOp, ReduceKind, ReduceOp};
use tessera_tensor::{DType, Op, Tensor, TensorMeta};

const KINDS: [ReduceKind; 5] = [
    ReduceKind::Sum,
    ReduceKind::Amax,
    ReduceKind::Amin,
    ReduceKind::ArgMax,
    ReduceKind::ArgMin,
];

/// Values near 2^60 that differ by one, with ties, one `i64::MAX` and one `i64::MIN`.
fn wide_values(n: usize) -> Vec<i64> {
    let base = 1i64 << 60;
    let mut v: Vec<i64> = (0..n)
        .map(|i| base + ((i * 7 + i / 3) % 4) as i64 - if i % 5 == 2 { 2 * base } else { 0 })
        .collect();
    if n > 8 {
        v[8] = i64::MAX;
    }
    if n > 11 {
        v[11] = i64::MIN;
    }
    v
}

/// `n` small values of `dtype`'s range (0/1 for bool), with ties.
fn narrow_values(n: usize, dtype: DType) -> Vec<i64> {
    (0..n)
        .map(|i| {
            let v = ((i * 5 + i / 4) % 7) as i64;
            match dtype {
                DType::Bool => v % 2,
                DType::U8 => v * 36,
                _ => v * 36 - 110,
            }
        })
        .collect()
}

fn tensor(values: Vec<i64>, shape: &[usize], dtype: DType, transposed: bool) -> Tensor {
    let t = Tensor::from_vec(values, shape)
        .unwrap()
        .to_dtype(dtype)
        .unwrap();
    if transposed && shape.len() >= 2 {
        t.transpose(0, -1).unwrap()
    } else {
        t
    }
}

fn exact(t: &Tensor) -> Vec<i64> {
    t.to_dtype(DType::I64).unwrap().to_vec::<i64>().unwrap()
}

/// `graph` lowered with no fallback; the interpreter and the JIT equal `want` bit for bit.
fn equal_exactly(graph: &Graph, inputs: &[Tensor], want: &[Tensor]) -> Program {
    let program = lowered(graph, inputs);
    assert!(program.fallbacks.is_empty(), "{program}");
    let interpreted = run_program(&program, &NoEnvironment, &Interpreter, inputs).unwrap();
    let jitted = jit_run(&program, inputs);
    for (runner, got) in [("interpreter", &interpreted), ("jit", &jitted)] {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert_eq!(
                (g.shape(), g.dtype()),
                (w.shape(), w.dtype()),
                "{runner}\n{program}"
            );
            assert_eq!(exact(g), exact(w), "{runner}\n{program}");
        }
    }
    program
}

/// Every kind over each dim (and all dims, for the kinds that take several), keepdim or not.
fn every_reduction(x: &Tensor) {
    let ndim = x.ndim();
    for kind in KINDS {
        let single = matches!(kind, ReduceKind::ArgMax | ReduceKind::ArgMin);
        let mut dim_sets: Vec<Vec<usize>> = (0..ndim).map(|d| vec![d]).collect();
        if !single && ndim > 1 {
            dim_sets.push((0..ndim).collect());
        }
        for dims in dim_sets {
            for keepdim in [false, true] {
                let op = Op::Reduce(ReduceOp {
                    kind,
                    dims: dims.clone(),
                    keepdim,
                });
                let want = op.apply(&[x]).unwrap();
                equal_exactly(
                    &op_graph(op, std::slice::from_ref(x)),
                    std::slice::from_ref(x),
                    &want,
                );
            }
        }
    }
}

#[test]
fn i64_reductions_are_exact_beyond_2_pow_53() {
    for shape in [&[13][..], &[3, 5], &[2, 1, 9]] {
        let n = shape.iter().product();
        for transposed in [false, true] {
            every_reduction(&tensor(wide_values(n), shape, DType::I64, transposed));
        }
    }
}

#[test]
fn narrow_integer_and_bool_reductions_equal_eager() {
    for dtype in [DType::Bool, DType::U8, DType::I8, DType::I32] {
        for shape in [&[11][..], &[4, 6]] {
            let n = shape.iter().product();
            for transposed in [false, true] {
                every_reduction(&tensor(narrow_values(n, dtype), shape, dtype, transposed));
            }
        }
    }
}

#[test]
fn an_i64_sum_wraps_as_the_eager_kernel() {
    let x = Tensor::from_vec(vec![i64::MAX, 1, 5, i64::MAX], &[4]).unwrap();
    let op = Op::Reduce(ReduceOp {
        kind: ReduceKind::Sum,
        dims: vec![0],
        keepdim: false,
    });
    let want = op.apply(&[&x]).unwrap();
    assert_eq!(
        exact(&want[0]),
        vec![
            i64::MAX
                .wrapping_add(1)
                .wrapping_add(5)
                .wrapping_add(i64::MAX)
        ]
    );
    equal_exactly(&op_graph(op, std::slice::from_ref(&x)), &[x], &want);
}

#[test]
fn an_accuracy_count_is_one_kernel_summing_a_comparison() {
    let predicted = Tensor::from_vec((0..40i64).map(|i| i % 7).collect(), &[40]).unwrap();
    let target = Tensor::from_vec((0..40i64).map(|i| i % 5).collect(), &[40]).unwrap();
    let mut g = Graph::new();
    let a = g.placeholder("predicted", TensorMeta::new([40], DType::I64));
    let b = g.placeholder("target", TensorMeta::new([40], DType::I64));
    let hits = g
        .call_function(Op::Compare(CompareOp::Eq), &[&a, &b])
        .unwrap();
    let sum = Op::Reduce(ReduceOp {
        kind: ReduceKind::Sum,
        dims: vec![0],
        keepdim: false,
    });
    let count = g.call_function(sum, &[&hits]).unwrap();
    g.output(&[&count]).unwrap();
    let want = predicted
        .eq_(&target)
        .unwrap()
        .sum_dims(&[0], false)
        .unwrap();
    // i % 7 == i % 5 for i in 0..5 and 35..40.
    assert_eq!(exact(&want), vec![10]);
    let program = equal_exactly(&g, &[predicted, target], &[want]);
    assert_eq!(program.kernels().count(), 1, "{program}");
}
