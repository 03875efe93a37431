//! Max pooling (values only) and average pooling without padding are one kernel each (taps
//! unrolled, or reduction loops for large windows) whose interpreted and compiled results equal
//! eager pooling, for strided inputs, strides, dilations and 3-D inputs; a ceil-mode average
//! window past the padding with `count_include_pad` divides by its padded size, as eager
//! (padded windows: `padded_pooling.rs`).

use crate::common;

use common::{Builder, lowered, one_kernel_agreeing};
use tessera_tensor::op::{BinaryOp, PoolOp, UnaryOp};
use tessera_tensor::{DType, Op};

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

/// The pooling kernel of `b`'s program equals eager pooling (the elementwise producer is a
/// kernel of its own).
fn pool_kernel_agrees(b: &Builder) {
    let program = lowered(&b.graph, &b.inputs);
    assert_eq!(program.kernels().count(), 2, "{program}");
    assert!(program.fallbacks.is_empty(), "{program}");
    common::check_backends(
        &program,
        &b.inputs,
        &common::eager(&b.graph, &b.inputs),
        0.0,
    );
}

#[test]
fn max_pool_of_a_strided_input_is_a_window_reduction() {
    for (kernel, stride, dilation) in [([2, 2], [2, 2], [1, 1]), ([3, 2], [1, 2], [2, 1])] {
        let pool = PoolOp::max_pool2d_values(kernel, stride, [0, 0], dilation, false);
        pool_kernel_agrees(&pooled(DType::F32, &[2, 3, 9, 11], pool, true));
    }
}

#[test]
fn average_pool_in_f32_and_f64_is_a_window_reduction() {
    for dtype in [DType::F32, DType::F64] {
        let pool = PoolOp::avg_pool2d([3, 3], [2, 2], [0, 0], false, true);
        pool_kernel_agrees(&pooled(dtype, &[2, 4, 13, 10], pool, false));
    }
}

#[test]
fn pooling_of_a_3d_input_and_an_input_of_window_size_is_lowered() {
    let pool = PoolOp::max_pool2d_values([2, 2], [2, 2], [0, 0], [1, 1], false);
    pool_kernel_agrees(&pooled(DType::F32, &[5, 8, 6], pool, false));
    let whole = PoolOp::avg_pool2d([4, 7], [1, 1], [0, 0], false, true);
    pool_kernel_agrees(&pooled(DType::F32, &[1, 2, 4, 7], whole, true));
}

#[test]
fn window_of_more_taps_than_unrolled_is_a_reduction_loop() {
    for pool in [
        PoolOp::avg_pool2d([9, 9], [3, 3], [0, 0], false, true),
        PoolOp::max_pool2d_values([9, 8], [2, 3], [0, 0], [1, 1], false),
    ] {
        let b = pooled(DType::F32, &[2, 3, 21, 20], pool, true);
        let program = lowered(&b.graph, &b.inputs);
        let pooling = program.kernels().last().unwrap();
        assert_eq!(pooling.reduce.len(), 2, "{program}");
        // The loop sums in another order than eager rows do.
        common::check_backends(
            &program,
            &b.inputs,
            &common::eager(&b.graph, &b.inputs),
            1e-5,
        );
    }
}

#[test]
fn pooling_alone_is_one_kernel() {
    let mut b = Builder::new(DType::F32, false);
    let x = b.input(&[1, 16, 32, 32], false);
    let p = b.call(
        Op::Pool(PoolOp::max_pool2d_values(
            [2, 2],
            [2, 2],
            [0, 0],
            [1, 1],
            false,
        )),
        &[&x],
    );
    b.graph.output(&[&p]).unwrap();
    one_kernel_agreeing(&b.graph, &b.inputs, 0.0);
}

#[test]
fn ceil_mode_window_past_the_padding_with_count_include_pad_divides_by_its_padded_size() {
    // Input 6, kernel 3, stride 2, padding 1, ceil mode: the last window starts at padded
    // position 6 and ends past the right padding, so its padded size is 2, not 3.
    let partial = PoolOp::avg_pool2d([3, 3], [2, 2], [1, 1], true, true);
    let b = pooled(DType::F32, &[1, 2, 6, 6], partial, false);
    let program = lowered(&b.graph, &b.inputs);
    assert!(program.fallbacks.is_empty(), "{program}");
    common::check_backends(
        &program,
        &b.inputs,
        &common::eager(&b.graph, &b.inputs),
        0.0,
    );
}
