//! Reductions with positions as generated kernels: `argmax`/`argmin` along a dim or over the
//! flattened tensor, and `max`/`min` along a dim with their i64 indices. The kernel-IR
//! interpreter and the JIT agree with the eager kernels exactly (indices bit for bit, values
//! as numbers) for every dim, keepdim or not, ties (the first position wins), NaN (the first
//! NaN wins), rows of -inf or +inf only, size-1 and odd reduction lengths and transposed
//! inputs, in f32, f64, f16 and bf16 (compared in f32, as eager compares them).

use crate::common;

use common::{check_backends, eager, lowered};
use tessera_fx::Graph;
use tessera_kernel::{Expr, Program, ReduceFn};
use tessera_tensor::op::{ReduceKind, ReduceOp, ViewOp};
use tessera_tensor::{DType, Op, Tensor, TensorMeta};

const KINDS: [ReduceKind; 4] = [
    ReduceKind::ArgMax,
    ReduceKind::ArgMin,
    ReduceKind::MaxWithIndices,
    ReduceKind::MinWithIndices,
];

/// `values` of `shape` as `dtype`, packed or (`strided`) the transpose of a packed tensor of
/// the reversed shape, holding the same values.
fn tensor(values: &[f64], shape: &[usize], dtype: DType, strided: bool) -> Tensor {
    if strided && shape.len() >= 2 {
        let reversed: Vec<usize> = shape.iter().rev().copied().collect();
        let dims: Vec<usize> = (0..shape.len()).rev().collect();
        // Element (i0, .., in) of the result is element (in, .., i0) of the packed one.
        let packed = Tensor::from_vec(values.to_vec(), shape).unwrap();
        let source = packed
            .permute(&dims)
            .unwrap()
            .contiguous()
            .unwrap()
            .to_dtype(dtype)
            .unwrap();
        assert_eq!(source.shape(), reversed);
        let t = source.permute(&dims).unwrap();
        assert!(shape.iter().filter(|&&d| d > 1).count() < 2 || !t.is_contiguous());
        t
    } else {
        Tensor::from_vec(values.to_vec(), shape)
            .unwrap()
            .to_dtype(dtype)
            .unwrap()
    }
}

/// Every output of `kind` over `dims` of the graph's one input, `flatten`ed first when asked.
fn graph(kind: ReduceKind, dims: Vec<usize>, keepdim: bool, x: &Tensor, flatten: bool) -> Graph {
    let mut g = Graph::new();
    let mut input = g.placeholder("x0", TensorMeta::new(x.shape(), x.dtype()));
    if flatten {
        let flat = Op::View(ViewOp::Reshape(vec![x.numel()]));
        input = g.call_function(flat, &[&input]).unwrap();
    }
    let op = Op::Reduce(ReduceOp {
        kind,
        dims,
        keepdim,
    });
    let r = g.call_function(op, &[&input]).unwrap();
    if matches!(kind, ReduceKind::ArgMax | ReduceKind::ArgMin) {
        g.output(&[&r]).unwrap();
    } else {
        let values = g.getitem(&r, 0).unwrap();
        let indices = g.getitem(&r, 1).unwrap();
        g.output(&[&values, &indices]).unwrap();
    }
    g
}

/// Lowers the graph with no fallback, to a kernel with an arg reduction, and checks both
/// runners against eager exactly.
fn generated_exactly(g: &Graph, x: &Tensor) -> Program {
    let inputs = [x.clone()];
    let program = lowered(g, &inputs);
    assert!(program.fallbacks.is_empty(), "{program}");
    let arg = program.kernels().any(|k| {
        k.values
            .iter()
            .any(|v| matches!(v.expr, Expr::Reduce(ReduceFn::ArgMax | ReduceFn::ArgMin, _)))
    });
    assert!(arg, "no kernel has an arg reduction:\n{program}");
    check_backends(&program, &inputs, &eager(g, &inputs), 0.0);
    program
}

/// Checks every kind, dim and keepdim (and the flattened `argmax`/`argmin`) on `values`.
fn every_reduction(values: &[f64], shape: &[usize]) {
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        for strided in [false, true] {
            let x = tensor(values, shape, dtype, strided);
            for kind in KINDS {
                for dim in 0..shape.len() {
                    for keepdim in [false, true] {
                        generated_exactly(&graph(kind, vec![dim], keepdim, &x, false), &x);
                    }
                }
            }
            for kind in [ReduceKind::ArgMax, ReduceKind::ArgMin] {
                generated_exactly(&graph(kind, vec![0], false, &x, true), &x);
            }
        }
    }
}

/// Small integers: many ties along every dim.
fn tied(n: usize) -> Vec<f64> {
    (0..n).map(|i| ((i * 7 + i / 5) % 3) as f64).collect()
}

#[test]
fn ties_keep_the_first_position_along_every_dim() {
    for shape in [&[7][..], &[3, 5], &[2, 1, 9], &[4, 3, 6]] {
        every_reduction(&tied(shape.iter().product()), shape);
    }
}

#[test]
fn distinct_values_of_odd_and_size_one_lengths() {
    for shape in [&[1][..], &[1, 1], &[5, 1], &[1, 13], &[3, 33, 2], &[2, 67]] {
        let n: usize = shape.iter().product();
        let values: Vec<f64> = (0..n)
            .map(|i| (((i * 7919) % 997) as f64 / 997.0 - 0.45) * 4.0)
            .collect();
        every_reduction(&values, shape);
    }
}

#[test]
fn the_first_nan_wins_and_rows_of_infinities_give_their_first_position() {
    // Rows of [4, 6]: NaN late, NaN first, two NaN, -inf only, +inf only, mixed infinities.
    let nan = f64::NAN;
    let (inf, ninf) = (f64::INFINITY, f64::NEG_INFINITY);
    let values = [
        [1.0, 2.0, 3.0, nan, 5.0, 0.0],
        [nan, 9.0, -9.0, 1.0, nan, 2.0],
        [ninf, ninf, ninf, ninf, ninf, ninf],
        [inf, inf, inf, inf, inf, inf],
    ]
    .concat();
    every_reduction(&values, &[4, 6]);
    let mixed = [ninf, inf, 0.0, inf, ninf, 1.0, ninf, inf];
    every_reduction(&mixed, &[2, 4]);
}

#[test]
fn a_zero_d_input_has_position_zero() {
    for dtype in [DType::F32, DType::F64] {
        let x = Tensor::from_vec(vec![3.5], &[])
            .unwrap()
            .to_dtype(dtype)
            .unwrap();
        for kind in KINDS {
            generated_exactly(&graph(kind, vec![], false, &x, false), &x);
        }
    }
}

#[test]
fn an_empty_dimension_stays_an_eager_error() {
    let x = Tensor::from_vec(Vec::<f32>::new(), &[3, 0]).unwrap();
    let g = graph(ReduceKind::ArgMax, vec![1], false, &x, false);
    let program = lowered(&g, std::slice::from_ref(&x));
    assert_eq!(program.fallbacks.len(), 1, "{program}");
    assert!(common::try_eager(&g, &[x]).is_err());
}

#[test]
fn an_elementwise_prologue_is_fused_into_the_arg_reduction() {
    // `argmax(-x, 1)`, ...: one kernel reading the transposed `x`.
    let x = tensor(&tied(4 * 9), &[4, 9], DType::F32, true);
    for kind in KINDS {
        let mut g = Graph::new();
        let input = g.placeholder("x0", TensorMeta::new(x.shape(), x.dtype()));
        let neg = Op::Unary(tessera_tensor::op::UnaryOp::Neg);
        let negated = g.call_function(neg, &[&input]).unwrap();
        let op = Op::Reduce(ReduceOp {
            kind,
            dims: vec![1],
            keepdim: false,
        });
        let r = g.call_function(op, &[&negated]).unwrap();
        if matches!(kind, ReduceKind::ArgMax | ReduceKind::ArgMin) {
            g.output(&[&r]).unwrap();
        } else {
            let values = g.getitem(&r, 0).unwrap();
            let indices = g.getitem(&r, 1).unwrap();
            g.output(&[&values, &indices]).unwrap();
        }
        let program = generated_exactly(&g, &x);
        assert_eq!(program.kernels().count(), 1, "{program}");
    }
}
