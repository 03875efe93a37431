//! Padded pooling as generated kernels: max pooling (padding read as -inf, with dilation and
//! ceil mode) and average pooling (both `count_include_pad` settings, ceil mode's windows cut
//! short) through guarded loads, run by the eager ops, the kernel-IR interpreter and the JIT,
//! which agree bit for bit in f32 and f64 (NaN and infinities included) for odd shapes,
//! transposed inputs and padding as large as pooling allows; large windows become reduction
//! loops; and the snapshot of ResNet's padded stem max pooling.

use crate::common;

use common::{Builder, check_backends, eager, kernels_text, lowered, snapshots};
use tessera_kernel::{Expr, Program};
use tessera_tensor::op::{BinaryOp, PoolOp, UnaryOp};
use tessera_tensor::{DType, Op, Tensor};

/// `pool(relu(x) + y)` for an `x` (transposed when `strided`) and `y` of `shape`.
fn pooled(dtype: DType, shape: &[usize], pool: PoolOp, strided: bool) -> Builder {
    let mut b = Builder::new(dtype, strided);
    let x = b.input(shape, strided);
    let y = b.input(shape, false);
    let r = b.call(Op::Unary(UnaryOp::Relu), &[&x]);
    let s = b.call(Op::Binary(BinaryOp::Add), &[&r, &y]);
    let p = b.call(Op::Pool(pool), &[&s]);
    b.graph.output(&[&p]).unwrap();
    b
}

/// `pool(x)` alone.
fn pool_alone(dtype: DType, shape: &[usize], pool: PoolOp, strided: bool) -> Builder {
    let mut b = Builder::new(dtype, strided);
    let x = b.input(shape, strided);
    let p = b.call(Op::Pool(pool), &[&x]);
    b.graph.output(&[&p]).unwrap();
    b
}

/// The program of `b`, with no fallback, agreeing with eager within `tol` on every backend.
fn generated(b: &Builder, tol: f64) -> Program {
    let program = lowered(&b.graph, &b.inputs);
    assert!(program.fallbacks.is_empty(), "{program}");
    check_backends(&program, &b.inputs, &eager(&b.graph, &b.inputs), tol);
    program
}

/// [`generated`], with guarded loads in its pooling kernel.
fn generated_with_guards(b: &Builder, tol: f64) -> Program {
    let program = generated(b, tol);
    let pooling = program.kernels().last().unwrap();
    assert!(
        pooling
            .values
            .iter()
            .any(|v| matches!(v.expr, Expr::LoadIf { .. })),
        "{program}"
    );
    program
}

/// Pooling params whose windows overlap the padding: `(kernel, stride, padding, dilation,
/// ceil mode)`, padding up to half the (dilated) window, the most pooling allows.
const WINDOWS: [([usize; 2], [usize; 2], [usize; 2], [usize; 2], bool); 8] = [
    ([3, 3], [2, 2], [1, 1], [1, 1], false),
    ([3, 3], [1, 1], [1, 1], [1, 1], false),
    ([2, 2], [2, 2], [1, 1], [1, 1], false),
    ([5, 3], [2, 3], [2, 1], [1, 1], true),
    ([4, 4], [3, 3], [2, 2], [1, 1], true),
    ([3, 2], [1, 2], [0, 1], [1, 1], false),
    ([2, 2], [2, 2], [0, 0], [1, 1], true),
    ([3, 3], [2, 2], [2, 2], [2, 2], true),
];

#[test]
fn padded_max_pool_equals_eager_bit_for_bit() {
    let shapes: [&[usize]; 4] = [&[2, 3, 9, 11], &[1, 2, 7, 7], &[3, 5, 6], &[1, 1, 2, 3]];
    for dtype in [DType::F32, DType::F64] {
        for (kernel, stride, padding, dilation, ceil) in WINDOWS {
            let pool = PoolOp::max_pool2d_values(kernel, stride, padding, dilation, ceil);
            for shape in shapes {
                if eager_refuses(shape, &pool) {
                    continue;
                }
                for strided in [false, true] {
                    let program = generated(&pooled(dtype, shape, pool.clone(), strided), 0.0);
                    let guarded = padding != [0, 0] || program.to_string().contains("load_if");
                    assert!(guarded, "padding is read through guards:\n{program}");
                }
            }
        }
    }
}

#[test]
fn padded_average_pool_equals_eager_bit_for_bit_both_ways_of_counting() {
    let shapes: [&[usize]; 4] = [&[2, 3, 9, 11], &[1, 2, 7, 7], &[3, 5, 6], &[1, 1, 2, 3]];
    for dtype in [DType::F32, DType::F64] {
        for (kernel, stride, padding, dilation, ceil) in WINDOWS {
            if dilation != [1, 1] {
                continue;
            }
            for count_include_pad in [true, false] {
                let pool = PoolOp::avg_pool2d(kernel, stride, padding, ceil, count_include_pad);
                for shape in shapes {
                    if eager_refuses(shape, &pool) {
                        continue;
                    }
                    let b = pooled(dtype, shape, pool.clone(), true);
                    let program = lowered(&b.graph, &b.inputs);
                    if program.fallbacks.is_empty() {
                        generated(&b, 0.0);
                    } else {
                        // Only a ceil-mode window past the padding, counted with it, falls back.
                        assert!(ceil && count_include_pad, "{program}");
                        check_backends(&program, &b.inputs, &eager(&b.graph, &b.inputs), 0.0);
                    }
                }
            }
        }
    }
}

/// Whether eager pooling refuses `pool` on `shape` (an output smaller than 1).
fn eager_refuses(shape: &[usize], pool: &PoolOp) -> bool {
    let meta = tessera_tensor::TensorMeta::new(shape.to_vec(), DType::F32);
    Op::Pool(pool.clone()).meta(&[meta]).is_err()
}

#[test]
fn padding_reads_minus_infinity_and_nan_still_wins() {
    // Windows entirely of -inf inside the input stay -inf; a NaN wins its windows.
    let mut values = vec![f32::NEG_INFINITY; 2 * 5 * 5];
    values[7] = f32::NAN;
    values[30] = f32::INFINITY;
    values[31] = -0.0;
    let x = Tensor::from_vec(values, &[2, 1, 5, 5]).unwrap();
    for pool in [
        PoolOp::max_pool2d_values([3, 3], [2, 2], [1, 1], [1, 1], true),
        PoolOp::avg_pool2d([3, 3], [2, 2], [1, 1], false, false),
    ] {
        let mut b = pool_alone(DType::F32, &[2, 1, 5, 5], pool, false);
        b.inputs[0] = x.clone();
        generated_with_guards(&b, 0.0);
    }
}

#[test]
fn padded_windows_of_more_taps_than_unrolled_are_guarded_reduction_loops() {
    for pool in [
        PoolOp::max_pool2d_values([9, 9], [3, 3], [4, 4], [1, 1], false),
        PoolOp::avg_pool2d([9, 8], [2, 3], [4, 3], true, false),
        PoolOp::avg_pool2d([9, 9], [4, 4], [4, 4], false, true),
    ] {
        for dtype in [DType::F32, DType::F64] {
            let b = pooled(dtype, &[2, 3, 21, 20], pool.clone(), true);
            let program = generated_with_guards(&b, 1e-5);
            assert_eq!(
                program.kernels().last().unwrap().reduce.len(),
                2,
                "{program}"
            );
        }
    }
}

#[test]
fn padded_max_pool_alone_is_one_vectorised_kernel() {
    let pool = PoolOp::max_pool2d_values([3, 3], [2, 2], [1, 1], [1, 1], false);
    let b = pool_alone(DType::F32, &[1, 4, 16, 16], pool, false);
    let program = generated_with_guards(&b, 0.0);
    assert_eq!(program.kernels().count(), 1, "{program}");
    assert_eq!(
        program.kernels().next().unwrap().schedule.vector_width,
        4,
        "{program}"
    );
}

#[test]
fn resnet_stem_max_pool_kernel_snapshot() {
    let pool = PoolOp::max_pool2d_values([3, 3], [2, 2], [1, 1], [1, 1], false);
    let b = pool_alone(DType::F32, &[1, 1, 4, 4], pool, false);
    let program = generated_with_guards(&b, 0.0);
    snapshots().bind(|| insta::assert_snapshot!("compile_padded_max_pool", kernels_text(&program)));
}
