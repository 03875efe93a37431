//! Max pooling with indices (`max_pool2d_with_indices`, its indices read by the graph's
//! output rather than only by a backward that recomputes them) as one generated kernel with
//! two outputs, the values and the flat in-plane i64 index of each window's first maximum:
//! the kernel-IR interpreter and the JIT agree with the eager op bit for bit, indices
//! included, for padded, dilated and ceil-mode windows, transposed inputs, ties, NaN, -inf
//! windows and size-1 planes, in f32 and f64.

use crate::common;

use common::{Builder, check_backends, eager, lowered};
use tessera_kernel::Expr;
use tessera_kernel::ScalarType;
use tessera_tensor::op::PoolOp;
use tessera_tensor::{DType, Op, Tensor};

/// `(values, indices) = max_pool2d_with_indices(x)`, both outputs of the graph.
fn with_indices(dtype: DType, shape: &[usize], pool: PoolOp, strided: bool) -> Builder {
    let mut b = Builder::new(dtype, strided);
    let x = b.input(shape, strided);
    let p = b.call(Op::Pool(pool), &[&x]);
    let values = b.graph.getitem(&p, 0).unwrap();
    let indices = b.graph.getitem(&p, 1).unwrap();
    b.graph.output(&[&values, &indices]).unwrap();
    b
}

/// Lowers `b` to one kernel with no fallback, storing an i64 output, and checks the
/// interpreter and the JIT against eager exactly.
fn generated_exactly(b: &Builder) {
    let program = lowered(&b.graph, &b.inputs);
    assert!(program.fallbacks.is_empty(), "{program}");
    assert_eq!(program.kernels().count(), 1, "{program}");
    let kernel = program.kernels().next().unwrap();
    assert!(
        kernel
            .buffers
            .iter()
            .any(|buffer| buffer.ty == ScalarType::I64),
        "the indices are an output of the kernel:\n{program}"
    );
    assert!(
        kernel
            .values
            .iter()
            .any(|v| matches!(v.expr, Expr::LoopIndex(_))),
        "{program}"
    );
    check_backends(&program, &b.inputs, &eager(&b.graph, &b.inputs), 0.0);
}

/// `(kernel, stride, padding, dilation, ceil mode)`.
type Window = ([usize; 2], [usize; 2], [usize; 2], [usize; 2], bool);

const WINDOWS: [Window; 7] = [
    ([2, 2], [2, 2], [0, 0], [1, 1], false),
    ([3, 3], [2, 2], [1, 1], [1, 1], false),
    ([3, 3], [1, 1], [1, 1], [1, 1], false),
    ([5, 3], [2, 3], [2, 1], [1, 1], true),
    ([3, 2], [1, 2], [0, 1], [1, 1], false),
    ([2, 2], [2, 2], [0, 0], [1, 1], true),
    ([3, 3], [2, 2], [2, 2], [2, 2], true),
];

fn refused(shape: &[usize], pool: &PoolOp) -> bool {
    let meta = tessera_tensor::TensorMeta::new(shape.to_vec(), DType::F32);
    Op::Pool(pool.clone()).meta(&[meta]).is_err()
}

#[test]
fn max_pool_with_indices_equals_eager_exactly() {
    let shapes: [&[usize]; 4] = [&[2, 3, 9, 11], &[1, 2, 7, 7], &[3, 5, 6], &[1, 1, 2, 3]];
    for dtype in [DType::F32, DType::F64] {
        for (kernel, stride, padding, dilation, ceil) in WINDOWS {
            let pool = PoolOp::max_pool2d(kernel, stride, padding, dilation, ceil);
            for shape in shapes {
                if refused(shape, &pool) {
                    continue;
                }
                for strided in [false, true] {
                    generated_exactly(&with_indices(dtype, shape, pool.clone(), strided));
                }
            }
        }
    }
}

#[test]
fn ties_keep_the_first_maximum_and_nan_wins() {
    // Integer-valued inputs in a small range tie often; NaN, +inf and -inf windows included.
    let n = 2 * 2 * 6 * 7;
    let mut values: Vec<f32> = (0..n).map(|i| ((i * 7) % 3) as f32).collect();
    values[5] = f32::NAN;
    values[9] = f32::NAN;
    values[20] = f32::INFINITY;
    for v in &mut values[42..56] {
        *v = f32::NEG_INFINITY;
    }
    let x = Tensor::from_vec(values, &[2, 2, 6, 7]).unwrap();
    for (kernel, stride, padding, dilation, ceil) in WINDOWS {
        let pool = PoolOp::max_pool2d(kernel, stride, padding, dilation, ceil);
        if refused(&[2, 2, 6, 7], &pool) {
            continue;
        }
        let mut b = with_indices(DType::F32, &[2, 2, 6, 7], pool, false);
        b.inputs[0] = x.clone();
        generated_exactly(&b);
    }
}

#[test]
fn a_window_of_more_taps_than_unrolled_runs_the_eager_kernel() {
    let pool = PoolOp::max_pool2d([9, 9], [3, 3], [4, 4], [1, 1], false);
    let b = with_indices(DType::F32, &[1, 2, 20, 20], pool, false);
    let program = lowered(&b.graph, &b.inputs);
    assert_eq!(program.fallbacks.len(), 1, "{program}");
    assert!(program.fallbacks[0].reason.contains("indices"), "{program}");
    check_backends(&program, &b.inputs, &eager(&b.graph, &b.inputs), 0.0);
}
