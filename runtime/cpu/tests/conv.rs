//! A 2-D convolution followed by an elementwise epilogue is one kernel: the eager im2col +
//! GEMM fills a scratch block of images, then the bias and the epilogue (ReLU, a residual
//! add) run over that block; interpreted and compiled results agree with eager execution for
//! strides, padding, dilation, groups, f32 and f64. Without an epilogue, or with an input
//! the call cannot take, the convolution runs its eager kernel, reported with the reason.
//! Convolutions in a chain each keep their own epilogue, and a kernel over several images
//! (convolved and finished in chunks of images per thread) agrees for any batch.

use crate::common;

use common::{Builder, check_backends, eager, lowered};
use proptest::prelude::*;
use tessera_tensor::op::{BinaryOp, ConvOp, ConvParams, UnaryOp, ViewOp};
use tessera_tensor::{DType, Op};

/// `relu(conv2d(x, w, b) [+ residual])` for input `[n, c, h, w]` and `out` channels.
fn conv_chain(
    dtype: DType,
    (n, c, h, w): (usize, usize, usize, usize),
    out: usize,
    params: ConvParams,
    residual: bool,
) -> Builder {
    let mut b = Builder::new(dtype, false);
    let x = b.input(&[n, c, h, w], false);
    let k = b.input(&[out, c / params.groups, 3, 3], false);
    let bias = b.input(&[out], false);
    let conv = b.call(
        Op::Conv(ConvOp::Forward { params, bias: true }),
        &[&x, &k, &bias],
    );
    let mut y = conv;
    if residual {
        let shape = b.shape(&conv);
        let r = b.input(&shape, false);
        y = b.call(Op::Binary(BinaryOp::Add), &[&y, &r]);
    }
    let y = b.call(Op::Unary(UnaryOp::Relu), &[&y]);
    b.graph.output(&[&y]).unwrap();
    b
}

fn one_fused_kernel_agrees(b: &Builder, tol: f64) {
    let program = lowered(&b.graph, &b.inputs);
    assert_eq!(program.kernels().count(), 1, "{program}");
    assert!(program.fallbacks.is_empty(), "{program}");
    assert!(program.kernels().all(|k| k.conv.is_some()), "{program}");
    check_backends(&program, &b.inputs, &eager(&b.graph, &b.inputs), tol);
}

#[test]
fn convolution_bias_relu_and_residual_are_one_kernel_for_few_and_many_images() {
    let same = ConvParams::conv2d([1, 1], [1, 1], [1, 1], 1);
    // 64 images of 16 x 32 x 32 outputs run as blocks of images, each with its epilogue.
    for (input, out, residual) in [((3, 4, 9, 7), 8, false), ((64, 3, 32, 32), 16, true)] {
        one_fused_kernel_agrees(&conv_chain(DType::F32, input, out, same, residual), 1e-5);
    }
}

#[test]
fn residual_add_after_a_strided_dilated_grouped_convolution_is_fused() {
    let params = ConvParams::conv2d([2, 1], [2, 1], [2, 1], 2);
    for dtype in [DType::F32, DType::F64] {
        let tol = if dtype == DType::F32 { 1e-5 } else { 1e-12 };
        one_fused_kernel_agrees(&conv_chain(dtype, (5, 4, 11, 8), 6, params, true), tol);
    }
}

#[test]
fn convolution_without_an_epilogue_runs_its_eager_kernel() {
    let mut b = Builder::new(DType::F32, false);
    let x = b.input(&[2, 3, 6, 6], false);
    let k = b.input(&[4, 3, 3, 3], false);
    let params = ConvParams::conv2d([1, 1], [0, 0], [1, 1], 1);
    let conv = b.call(
        Op::Conv(ConvOp::Forward {
            params,
            bias: false,
        }),
        &[&x, &k],
    );
    b.graph.output(&[&conv]).unwrap();
    let program = lowered(&b.graph, &b.inputs);
    assert_eq!(program.kernels().count(), 0, "{program}");
    assert!(
        program.fallbacks[0]
            .reason
            .contains("no elementwise epilogue"),
        "{program}"
    );
}

#[test]
fn convolution_of_a_strided_input_falls_back_with_its_epilogue_run_apart() {
    let params = ConvParams::conv2d([1, 1], [1, 1], [1, 1], 1);
    let mut b = Builder::new(DType::F32, false);
    // A channels-last tensor seen as NCHW through a permute: not packed.
    let nhwc = b.input(&[2, 5, 5, 3], false);
    let x = b.call(Op::View(ViewOp::Permute(vec![0, 3, 1, 2])), &[&nhwc]);
    let k = b.input(&[4, 3, 3, 3], false);
    let bias = b.input(&[4], false);
    let conv = b.call(
        Op::Conv(ConvOp::Forward { params, bias: true }),
        &[&x, &k, &bias],
    );
    let y = b.call(Op::Unary(UnaryOp::Relu), &[&conv]);
    b.graph.output(&[&y]).unwrap();
    let program = lowered(&b.graph, &b.inputs);
    assert!(
        program
            .fallbacks
            .iter()
            .any(|f| f.op == "conv2d" && f.reason.contains("packed")),
        "{program}"
    );
    check_backends(&program, &b.inputs, &eager(&b.graph, &b.inputs), 1e-5);
}

#[test]
fn convolutions_in_a_chain_each_keep_their_relu_as_epilogue() {
    // conv -> relu -> conv -> relu with every value [4, 5, 7, 6]: the first ReLU is the first
    // convolution's epilogue, so both convolutions are fused kernels and nothing falls back.
    let same = ConvParams::conv2d([1, 1], [1, 1], [1, 1], 1);
    let mut b = Builder::new(DType::F32, false);
    let x = b.input(&[4, 5, 7, 6], false);
    let mut y = x;
    for _ in 0..2 {
        let k = b.input(&[5, 5, 3, 3], false);
        let bias = b.input(&[5], false);
        let conv = b.call(
            Op::Conv(ConvOp::Forward {
                params: same,
                bias: true,
            }),
            &[&y, &k, &bias],
        );
        y = b.call(Op::Unary(UnaryOp::Relu), &[&conv]);
    }
    b.graph.output(&[&y]).unwrap();
    let program = lowered(&b.graph, &b.inputs);
    assert!(program.fallbacks.is_empty(), "{program}");
    assert_eq!(program.kernels().count(), 2, "{program}");
    assert!(program.kernels().all(|k| k.conv.is_some()), "{program}");
    check_backends(&program, &b.inputs, &eager(&b.graph, &b.inputs), 1e-5);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Any batch (1 image to several chunks per thread), odd sizes, strides and padding: the
    /// fused kernel agrees with eager execution.
    #[test]
    fn fused_convolution_agrees_for_any_batch_and_geometry(
        n in 1usize..=11,
        c in 1usize..=5,
        out in 1usize..=13,
        (h, w) in (3usize..=13, 3usize..=13),
        stride in (1usize..=2, 1usize..=2),
        padding in (0usize..=2, 0usize..=2),
        residual in any::<bool>(),
    ) {
        let params = ConvParams::conv2d([stride.0, stride.1], [padding.0, padding.1], [1, 1], 1);
        one_fused_kernel_agrees(&conv_chain(DType::F32, (n, c, h, w), out, params, residual), 1e-5);
    }
}
