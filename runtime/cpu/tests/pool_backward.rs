//! The pooling backward ops whose windows tile the input, lowered to the kernel IR: average
//! (plain and adaptive) and max pooling's gradients through the kernel-IR interpreter and the
//! JIT give the eager kernels' bits, in f32 and f64, on strided inputs and on windows holding
//! ties, infinities and NaN (the argmax the backward recomputes is the eager forward's). Max
//! pooling whose windows overlap reads the saved indices (`max_pool_backward.rs`); adaptive bins
//! that do not tile the input are in `adaptive_pool.rs`.

use crate::common;

use common::{assert_bit_identical, max_pool_graph};
use tessera_fx::Graph;
use tessera_tensor::op::{Pool2dParams, PoolOp};
use tessera_tensor::{DType, Op, Tensor, TensorMeta};

fn params(kernel: usize, stride: usize) -> Pool2dParams {
    Pool2dParams {
        kernel: [kernel; 2],
        stride: [stride; 2],
        padding: [0; 2],
        dilation: [1; 2],
        ceil_mode: false,
    }
}

/// Values with repeats (ties within windows), and every 11th element special: +-inf, NaN.
fn values(n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| match i % 11 {
            3 => f64::INFINITY,
            7 if i % 3 == 0 => f64::NAN,
            8 => f64::NEG_INFINITY,
            _ => ((i * 37 % 13) as f64 - 6.0) * 0.25,
        })
        .collect()
}

/// `shape` of `dtype` holding `values`, given transposed in its last two dims when `strided`.
fn tensor(shape: &[usize], dtype: DType, strided: bool, seed: usize) -> Tensor {
    let n: usize = shape.iter().product();
    let vs: Vec<f64> = values(n + seed)[seed..].to_vec();
    let nd = shape.len();
    let t = if strided {
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
    } else {
        Tensor::from_vec(vs, shape)
            .unwrap()
            .to_dtype(dtype)
            .unwrap()
    };
    if shape[nd - 2] > 1 && shape[nd - 1] > 1 {
        assert_eq!(t.is_contiguous(), !strided);
    }
    t
}

#[test]
fn max_pool_backward_recomputes_the_eager_argmax_bit_for_bit() {
    // Half forwards keep the eager `max_pool2d_with_indices` (the kernel with indices takes
    // f32 and f64): the backward then reads its saved indices, still a kernel, summing in f32.
    for dtype in [DType::F16, DType::BF16] {
        let (x, g) = (vec![2, 3, 6, 8], vec![2, 3, 3, 4]);
        let graph = max_pool_graph(&x, &g, params(2, 2), dtype);
        let inputs = [tensor(&x, dtype, true, 0), tensor(&g, dtype, false, 5)];
        let program = assert_bit_identical(&graph, &inputs);
        assert!(
            program
                .fallbacks
                .iter()
                .all(|f| f.op != "max_pool2d_backward"),
            "{program}"
        );
    }
    for dtype in [DType::F32, DType::F64] {
        for strided in [false, true] {
            for (x, g, k) in [
                (vec![2, 3, 6, 8], vec![2, 3, 3, 4], 2),
                (vec![3, 6, 9], vec![3, 2, 3], 3),
            ] {
                let graph = max_pool_graph(&x, &g, params(k, k), dtype);
                let inputs = [tensor(&x, dtype, strided, 0), tensor(&g, dtype, false, 5)];
                let program = assert_bit_identical(&graph, &inputs);
                assert!(program.fallbacks.is_empty(), "{program}");
                assert_eq!(program.kernels().count(), 2, "{program}");
            }
        }
    }
}

/// `op(grad)` for an average pooling backward op.
fn one_op(op: PoolOp, g: &[usize], dtype: DType) -> Graph {
    let mut graph = Graph::new();
    let gn = graph.placeholder("grad", TensorMeta::new(g.to_vec(), dtype));
    let dx = graph.call_function(Op::Pool(op), &[&gn]).unwrap();
    graph.output(&[&dx]).unwrap();
    graph
}

#[test]
fn average_pool_backwards_spread_the_eager_shares_bit_for_bit() {
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        for strided in [false, true] {
            let cases = [
                (
                    PoolOp::AvgPool2dBackward {
                        params: params(2, 2),
                        count_include_pad: false,
                        input_size: [6, 8],
                    },
                    vec![2, 3, 3, 4],
                ),
                (
                    PoolOp::AdaptiveAvgPool2dBackward { input_size: [6, 9] },
                    vec![2, 3, 2, 3],
                ),
                (
                    PoolOp::AdaptiveAvgPool2dBackward { input_size: [5, 7] },
                    vec![4, 3, 1, 1],
                ),
            ];
            for (op, g) in cases {
                let graph = one_op(op.clone(), &g, dtype);
                let program = assert_bit_identical(&graph, &[tensor(&g, dtype, strided, 2)]);
                assert!(program.fallbacks.is_empty(), "{op:?}\n{program}");
                assert_eq!(program.kernels().count(), 1, "{program}");
            }
        }
    }
}

/// `avg_pool2d` windows `(kernel, stride, padding, count_include_pad, ceil_mode)` on `[H, W]`.
type AvgWindows = ([usize; 2], [usize; 2], [usize; 2], bool, bool, [usize; 2]);

#[test]
fn overlapping_average_pool_backward_sums_the_eager_shares_bit_for_bit() {
    // One divisor (no padding, counted padding), then windows whose divisors differ: padding
    // that does not count (the border windows divide by fewer taps), ceil-mode windows cut
    // short with and without counted padding, a divisor of 3 (inexact shares).
    let cases: [AvgWindows; 9] = [
        ([3, 3], [2, 2], [0, 0], false, false, [7, 9]),
        ([3, 2], [1, 1], [1, 0], true, false, [5, 6]),
        ([2, 2], [3, 3], [0, 0], false, false, [8, 7]),
        ([5, 3], [2, 3], [2, 1], true, false, [9, 8]),
        ([3, 3], [2, 2], [1, 1], false, false, [6, 7]),
        ([3, 3], [1, 1], [1, 1], false, false, [5, 4]),
        ([3, 2], [2, 2], [1, 0], false, true, [6, 7]),
        ([3, 3], [2, 2], [1, 1], true, true, [6, 8]),
        ([2, 3], [2, 2], [0, 1], false, true, [7, 5]),
    ];
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        for strided in [false, true] {
            for (kernel, stride, padding, count_include_pad, ceil_mode, input_size) in cases {
                let params = Pool2dParams {
                    kernel,
                    stride,
                    padding,
                    dilation: [1, 1],
                    ceil_mode,
                };
                let forward = Op::Pool(PoolOp::AvgPool2d {
                    params,
                    count_include_pad,
                });
                let x = TensorMeta::new(vec![2, 3, input_size[0], input_size[1]], dtype);
                let g = forward.meta(&[x]).unwrap()[0].shape.clone();
                let op = PoolOp::AvgPool2dBackward {
                    params,
                    count_include_pad,
                    input_size,
                };
                let graph = one_op(op.clone(), &g, dtype);
                let program = assert_bit_identical(&graph, &[tensor(&g, dtype, strided, 3)]);
                assert!(program.fallbacks.is_empty(), "{op:?}\n{program}");
            }
        }
    }
}
