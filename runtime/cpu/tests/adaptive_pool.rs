//! Adaptive average and max pooling (with its i64 indices) and adaptive average pooling's
//! backward, for bins that do not tile the input (uneven, overlapping, or more bins than
//! elements), lowered to one kernel each: the kernel-IR interpreter and the JIT give the eager
//! kernels' bits in f32 and f64, on 3-D and 4-D inputs, transposed views, and windows holding
//! ties, infinities and NaN. Bins too many to unroll run the eager kernel (reported), except
//! an average whose bins tile the input, which is a window reduction; and a graph training
//! through adaptive max pooling (its backward reading the saved indices) is all kernels.

use crate::common;

use common::{check_backends, eager, lowered};
use tessera_fx::Graph;
use tessera_kernel::Program;
use tessera_tensor::op::PoolOp;
use tessera_tensor::{DType, Op, Tensor, TensorMeta};

/// `(input shape, output size)`: 5->3, 7->4, 10->3, 3->5 (more bins than elements), 1->1,
/// equal sizes and sizes that tile, on 3-D and 4-D inputs.
const CASES: [(&[usize], [usize; 2]); 8] = [
    (&[2, 3, 5, 7], [3, 4]),
    (&[3, 10, 3], [3, 5]),
    (&[1, 2, 7, 5], [4, 3]),
    (&[2, 1, 6], [1, 4]),
    (&[1, 2, 6, 9], [4, 6]),
    (&[2, 2, 4, 4], [4, 4]),
    (&[1, 3, 8, 6], [2, 3]),
    (&[1, 1, 13, 11], [5, 7]),
];

/// Values with ties, and every 11th element special: +-inf or NaN (when `specials`).
fn values(n: usize, seed: usize, specials: bool) -> Vec<f64> {
    (seed..seed + n)
        .map(|i| match i % 11 {
            3 if specials => f64::INFINITY,
            7 if specials && i % 3 == 0 => f64::NAN,
            8 if specials => f64::NEG_INFINITY,
            _ => ((i * 37 % 13) as f64 - 6.0) * 0.3,
        })
        .collect()
}

/// `shape` of `dtype`, given transposed in its last two dims when `strided`.
fn tensor(shape: &[usize], dtype: DType, strided: bool, specials: bool) -> Tensor {
    let n: usize = shape.iter().product();
    let vs = values(n, shape.len(), specials);
    let nd = shape.len();
    if !strided {
        return Tensor::from_vec(vs, shape)
            .unwrap()
            .to_dtype(dtype)
            .unwrap();
    }
    let mut swapped = shape.to_vec();
    swapped.swap(nd - 2, nd - 1);
    let mut dims: Vec<usize> = (0..nd).collect();
    dims.swap(nd - 2, nd - 1);
    Tensor::from_vec(vs, &swapped)
        .unwrap()
        .to_dtype(dtype)
        .unwrap()
        .permute(&dims)
        .unwrap()
}

/// Lowers `graph` to `kernels` kernels with no fallback, and checks the interpreter's and the
/// JIT's bits against eager execution.
fn bit_identical(graph: &Graph, inputs: &[Tensor], kernels: usize) -> Program {
    let program = lowered(graph, inputs);
    assert!(program.fallbacks.is_empty(), "{program}");
    assert_eq!(program.kernels().count(), kernels, "{program}");
    common::assert_bit_identical(graph, inputs)
}

/// `op(x)` with every output of the op an output of the graph.
fn forward(op: PoolOp, shape: &[usize], dtype: DType) -> Graph {
    let mut graph = Graph::new();
    let x = graph.placeholder("x", TensorMeta::new(shape.to_vec(), dtype));
    let y = graph.call_function(Op::Pool(op.clone()), &[&x]).unwrap();
    if matches!(op, PoolOp::AdaptiveMaxPool2d { .. }) {
        let values = graph.getitem(&y, 0).unwrap();
        let indices = graph.getitem(&y, 1).unwrap();
        graph.output(&[&values, &indices]).unwrap();
    } else {
        graph.output(&[&y]).unwrap();
    }
    graph
}

/// `shape` with its plane replaced by `plane`.
fn with_plane(shape: &[usize], plane: [usize; 2]) -> Vec<usize> {
    let mut s = shape[..shape.len() - 2].to_vec();
    s.extend(plane);
    s
}

#[test]
fn adaptive_average_equals_eager_bit_for_bit() {
    for dtype in [DType::F32, DType::F64] {
        for (shape, output_size) in CASES {
            for strided in [false, true] {
                let op = PoolOp::AdaptiveAvgPool2d { output_size };
                let x = tensor(shape, dtype, strided, false);
                bit_identical(&forward(op, shape, dtype), &[x], 1);
            }
        }
    }
}

#[test]
fn adaptive_max_and_its_indices_equal_eager_with_ties_infinities_and_nan() {
    for dtype in [DType::F32, DType::F64] {
        for (shape, output_size) in CASES {
            for strided in [false, true] {
                for specials in [false, true] {
                    let op = PoolOp::AdaptiveMaxPool2d { output_size };
                    let x = tensor(shape, dtype, strided, specials);
                    bit_identical(&forward(op, shape, dtype), &[x], 1);
                }
            }
        }
    }
}

#[test]
fn a_window_of_nan_and_minus_infinity_keeps_the_eager_index() {
    // Bins of -inf only keep their first element; NaN wins over +inf, the last NaN over the
    // first.
    let mut vs = vec![f64::NEG_INFINITY; 5 * 7];
    vs[8] = f64::INFINITY;
    vs[9] = f64::NAN;
    vs[16] = f64::NAN;
    let x = Tensor::from_vec(vs, &[1, 5, 7]).unwrap();
    let op = PoolOp::AdaptiveMaxPool2d {
        output_size: [3, 4],
    };
    bit_identical(&forward(op, &[1, 5, 7], DType::F64), &[x], 1);
}

#[test]
fn adaptive_average_backward_equals_eager_bit_for_bit() {
    for dtype in [DType::F32, DType::F64] {
        for (shape, output_size) in CASES {
            let input_size = [shape[shape.len() - 2], shape[shape.len() - 1]];
            let g = with_plane(shape, output_size);
            for strided in [false, true] {
                let mut graph = Graph::new();
                let gn = graph.placeholder("grad", TensorMeta::new(g.clone(), dtype));
                let op = Op::Pool(PoolOp::AdaptiveAvgPool2dBackward { input_size });
                let dx = graph.call_function(op, &[&gn]).unwrap();
                graph.output(&[&dx]).unwrap();
                let grad = tensor(&g, dtype, strided, true);
                bit_identical(&graph, &[grad], 1);
            }
        }
    }
}

#[test]
fn bins_too_many_to_unroll_run_the_eager_kernel() {
    // 100 -> 99 is one block of 99 bins reading 198 rows; with 7 -> 3 columns (9 taps), more
    // than the unrolled limit.
    let forward_graph = forward(
        PoolOp::AdaptiveAvgPool2d {
            output_size: [99, 3],
        },
        &[1, 100, 7],
        DType::F32,
    );
    let x = tensor(&[1, 100, 7], DType::F32, false, false);
    let program = lowered(&forward_graph, std::slice::from_ref(&x));
    assert_eq!(program.fallbacks.len(), 1, "{program}");
    assert!(program.fallbacks[0].reason.contains("taps"), "{program}");
    let x = [x];
    check_backends(&program, &x, &eager(&forward_graph, &x), 0.0);

    let mut graph = Graph::new();
    let gn = graph.placeholder("grad", TensorMeta::new(vec![1, 99, 3], DType::F32));
    let op = Op::Pool(PoolOp::AdaptiveAvgPool2dBackward {
        input_size: [100, 7],
    });
    let dx = graph.call_function(op, &[&gn]).unwrap();
    graph.output(&[&dx]).unwrap();
    let grad = tensor(&[1, 99, 3], DType::F32, false, false);
    let program = lowered(&graph, std::slice::from_ref(&grad));
    assert_eq!(program.fallbacks.len(), 1, "{program}");
    let grad = [grad];
    check_backends(&program, &grad, &eager(&graph, &grad), 0.0);
}

#[test]
fn a_large_tiling_average_is_a_window_reduction() {
    // 96 -> 2 bins of 48 x 48 taps: past the unrolled limit, but `avg_pool2d(48)`.
    let shape = [1, 2, 96, 96];
    let graph = forward(
        PoolOp::AdaptiveAvgPool2d {
            output_size: [2, 2],
        },
        &shape,
        DType::F32,
    );
    let x = tensor(&shape, DType::F32, true, false);
    let program = lowered(&graph, std::slice::from_ref(&x));
    assert!(program.fallbacks.is_empty(), "{program}");
    assert_eq!(program.kernels().count(), 1, "{program}");
    let x = [x];
    check_backends(&program, &x, &eager(&graph, &x), 1e-5);
}

#[test]
fn training_through_adaptive_max_pooling_is_all_kernels() {
    // `y, i = adaptive_max_pool2d(x)`; `dx = max_pool2d_backward(g, i)`, as autograd builds it.
    for dtype in [DType::F32, DType::F64] {
        let (shape, output_size) = ([2, 3, 7, 5], [4, 3]);
        let mut graph = Graph::new();
        let xn = graph.placeholder("x", TensorMeta::new(shape.to_vec(), dtype));
        let gn = graph.placeholder("g", TensorMeta::new(with_plane(&shape, output_size), dtype));
        let pool = graph
            .call_function(Op::Pool(PoolOp::AdaptiveMaxPool2d { output_size }), &[&xn])
            .unwrap();
        let values = graph.getitem(&pool, 0).unwrap();
        let indices = graph.getitem(&pool, 1).unwrap();
        let backward = Op::Pool(PoolOp::MaxPool2dBackward {
            input_size: [7, 5],
            window: None,
        });
        let dx = graph.call_function(backward, &[&gn, &indices]).unwrap();
        graph.output(&[&values, &dx]).unwrap();
        let inputs = [
            tensor(&shape, dtype, true, true),
            tensor(&with_plane(&shape, output_size), dtype, false, false),
        ];
        bit_identical(&graph, &inputs, 2);
    }
}

#[test]
fn empty_batches_and_output_planes_are_kernels_over_no_points() {
    for (shape, output_size) in [(&[0, 2, 5, 7][..], [3, 4]), (&[2, 5, 7], [0, 3])] {
        for op in [
            PoolOp::AdaptiveAvgPool2d { output_size },
            PoolOp::AdaptiveMaxPool2d { output_size },
        ] {
            let x = tensor(shape, DType::F32, false, false);
            bit_identical(&forward(op, shape, DType::F32), &[x], 1);
        }
    }
    let mut graph = Graph::new();
    let gn = graph.placeholder("grad", TensorMeta::new(vec![0, 3, 2, 3], DType::F64));
    let op = Op::Pool(PoolOp::AdaptiveAvgPool2dBackward { input_size: [5, 7] });
    let dx = graph.call_function(op, &[&gn]).unwrap();
    graph.output(&[&dx]).unwrap();
    bit_identical(
        &graph,
        &[tensor(&[0, 3, 2, 3], DType::F64, false, false)],
        1,
    );
}
