//! Padded pooling as generated kernels: max pooling (padding read as -inf, with dilation and
//! ceil mode) and average pooling (both `count_include_pad` settings, ceil mode's windows cut
//! short, by the input or past the padding, 1-D pools as 2-D pools of one row) through
//! guarded loads, run by the eager ops, the kernel-IR interpreter and the JIT, which agree bit
//! for bit in f32 and f64 (NaN and infinities included) for odd shapes, transposed inputs and
//! padding as large as pooling allows; divisors of many border windows counted per point;
//! large windows become reduction loops; and the snapshot of ResNet's padded stem max
//! pooling.

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
pub(crate) fn pool_alone(dtype: DType, shape: &[usize], pool: PoolOp, strided: bool) -> Builder {
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
pub(crate) fn generated_with_guards(b: &Builder, tol: f64) -> Program {
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

/// One size per pooled axis.
type Pair = [usize; 2];

/// Pooling params whose windows overlap the padding: `(kernel, stride, padding, dilation,
/// ceil mode)`, padding up to half the (dilated) window, the most pooling allows.
const WINDOWS: [(Pair, Pair, Pair, Pair, bool); 8] = [
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
                    generated(&pooled(dtype, shape, pool.clone(), true), 0.0);
                }
            }
        }
    }
}

/// Whether eager pooling refuses `pool` on `shape` (an output smaller than 1).
pub(crate) fn eager_refuses(shape: &[usize], pool: &PoolOp) -> bool {
    let meta = tessera_tensor::TensorMeta::new(shape.to_vec(), DType::F32);
    Op::Pool(pool.clone()).meta(&[meta]).is_err()
}

/// `(kernel, stride, padding, shape, tolerance)` of a ceil-mode average pool.
type PastThePadding = ([usize; 2], [usize; 2], [usize; 2], &'static [usize], f64);

#[test]
fn ceil_mode_windows_past_the_padding_counting_it_lower_and_equal_eager() {
    // `(kernel, stride, padding, shape, tolerance)`: a last window past the right padding
    // (its divisor its extent inside the padded input) along rows, columns or both; 1-D pools
    // (a 2-D pool of one row, batched or not); unrolled taps (bit for bit) and reduction
    // loops (their sums in another order).
    let cases: [PastThePadding; 5] = [
        ([3, 3], [2, 2], [1, 1], &[2, 3, 8, 8], 0.0),
        ([1, 3], [1, 2], [0, 1], &[2, 3, 1, 8], 0.0),
        ([1, 4], [1, 3], [0, 2], &[3, 1, 8], 0.0),
        ([5, 2], [3, 2], [2, 1], &[1, 2, 9, 7], 0.0),
        ([9, 9], [4, 4], [4, 4], &[1, 2, 21, 20], 1e-5),
    ];
    for (kernel, stride, padding, shape, tol) in cases {
        let pool = PoolOp::avg_pool2d(kernel, stride, padding, true, true);
        assert!(past_the_padding(shape, &pool), "{pool:?} on {shape:?}");
        for dtype in [DType::F32, DType::F64] {
            for strided in [false, true] {
                generated_with_guards(&pooled(dtype, shape, pool.clone(), strided), tol);
            }
        }
    }
}

/// Whether the last window of `pool` over `shape` passes the right padding along an axis.
fn past_the_padding(shape: &[usize], pool: &PoolOp) -> bool {
    let PoolOp::AvgPool2d { params: p, .. } = pool else {
        return false;
    };
    let meta = tessera_tensor::TensorMeta::new(shape.to_vec(), DType::F32);
    let out = Op::Pool(pool.clone()).meta(&[meta]).unwrap()[0]
        .shape
        .clone();
    let nd = shape.len();
    (0..2).any(|a| {
        let last = (out[nd - 2 + a] - 1) * p.stride[a];
        last + p.kernel[a] > shape[nd - 2 + a] + 2 * p.padding[a]
    })
}

#[test]
fn many_border_windows_count_their_divisors_per_point() {
    // 7 taps with padding 3 over 8 rows: six border windows of three other sizes, more than
    // the selects a divisor takes, so the kernel counts each window's taps (three selects: a
    // min, a max and at least 1, where a select per border window would take six); as one
    // row (37 long: the vector loop's 16 points per step run, then the tail), and as the
    // columns of a ceil-mode pool whose rows select their two border divisors; vector code in
    // f32.
    for (pool, shape) in [
        (
            PoolOp::avg_pool2d([7, 3], [1, 2], [3, 1], false, false),
            &[1, 2, 8, 9][..],
        ),
        (
            PoolOp::avg_pool2d([1, 7], [1, 1], [0, 3], false, false),
            &[2, 1, 37],
        ),
        (
            PoolOp::avg_pool2d([3, 7], [2, 1], [1, 3], true, false),
            &[1, 1, 7, 8],
        ),
    ] {
        for dtype in [DType::F32, DType::F64] {
            let program = generated_with_guards(&pooled(dtype, shape, pool.clone(), true), 0.0);
            let pooling = program.kernels().last().unwrap();
            let selects = pooling
                .values
                .iter()
                .filter(|v| matches!(v.expr, Expr::Select { .. }))
                .count();
            assert!(selects < 6, "{program}");
            let vector = if dtype == DType::F32 { 4 } else { 1 };
            assert_eq!(pooling.schedule.vector_width, vector, "{program}");
        }
    }
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

/// Rows whose last vector step (16 columns: 4 lanes unrolled 4 times) starts inside the input
/// and ends at the right border: the step's guards must find its last columns' taps in the
/// padding, which its first columns' do not reach.
#[test]
fn vector_steps_ending_at_the_right_border_read_its_padding() {
    for (width, stride) in [(32, 1), (64, 2), (48, 1)] {
        for pool in [
            PoolOp::max_pool2d_values([3, 3], [stride, stride], [1, 1], [1, 1], false),
            PoolOp::avg_pool2d([3, 3], [stride, stride], [1, 1], false, false),
        ] {
            let b = pool_alone(DType::F32, &[1, 2, 5, width], pool, false);
            let program = generated_with_guards(&b, 0.0);
            let kernel = program.kernels().next().unwrap();
            assert_eq!(kernel.schedule.vector_width, 4, "{program}");
        }
    }
}

#[test]
fn padded_average_pools_of_border_divisors_alone_are_one_vectorised_kernel() {
    // Padding not counted (a divisor per border window), and ceil mode's last window past the
    // padding counted: the divisors read the loop indices as f32 lanes.
    for pool in [
        PoolOp::avg_pool2d([3, 3], [1, 1], [1, 1], false, false),
        PoolOp::avg_pool2d([3, 3], [2, 2], [1, 1], true, true),
    ] {
        let b = pool_alone(DType::F32, &[1, 4, 16, 16], pool, false);
        let program = generated_with_guards(&b, 0.0);
        assert_eq!(program.kernels().count(), 1, "{program}");
        let kernel = program.kernels().next().unwrap();
        assert_eq!(kernel.schedule.vector_width, 4, "{program}");
    }
}

#[test]
fn resnet_stem_max_pool_kernel_snapshot() {
    let pool = PoolOp::max_pool2d_values([3, 3], [2, 2], [1, 1], [1, 1], false);
    let b = pool_alone(DType::F32, &[1, 1, 4, 4], pool, false);
    let program = generated_with_guards(&b, 0.0);
    snapshots().bind(|| insta::assert_snapshot!("compile_padded_max_pool", kernels_text(&program)));
}
