//! The int8 products (the linears and the static conv2d) lowered with product kernels (as for
//! a device): one reduction kernel whose interpreted and JIT-compiled results equal the eager
//! fbgemm-style kernel bit for bit, over inputs of several ranks (one feature, an empty batch,
//! a transposed view), conv2d geometries (stride, padding wider than the kernel's reach,
//! dilation, 1x1, channels-last inputs), weight zero points zero and nonzero per channel,
//! parameters of one element, bias and fused ReLU, ties at .5 steps and saturation at both
//! ends of u8. Lowered for the CPU they keep the eager GEMM; a reduction whose eager i32 sum
//! may wrap keeps it too.

use crate::common;

use common::{eager, jit_run, lowered};
use tessera_kernel::{Interpreter, LowerOptions, NoEnvironment, Program, run_program};
use tessera_tensor::op::{ConvParams, QuantOp};
use tessera_tensor::{DType, Op, Tensor};
use tessera_testkit::exact_bits;
use tessera_testkit::quant_cases::{quantized_inputs, valid_scales};
use tessera_testkit::quant_conv_cases::static_conv_cases;
use tessera_testkit::quant_linear_cases::{LinearCase, dynamic_linear_cases, static_linear_cases};

/// `graph` lowered for the layouts of `inputs` with product kernels, as for a device.
fn lowered_for_device(graph: &tessera_fx::Graph, inputs: &[Tensor]) -> Program {
    let layouts: Vec<_> = inputs.iter().map(|t| t.layout()).collect();
    let options = LowerOptions {
        product_kernels: true,
        ..LowerOptions::default()
    };
    tessera_kernel::lower_with(graph, &layouts, options).unwrap()
}

/// Every case [`agrees`]; there are at least `at_least` of them.
fn all_agree(cases: Vec<LinearCase>, at_least: usize) {
    assert!(cases.len() >= at_least, "{} cases", cases.len());
    for case in cases {
        agrees(&case.what, case.op, &case.inputs);
    }
}

/// `op` on `inputs` lowered with product kernels to one kernel with no fallback; interpreter,
/// JIT and eager give the same dtype, shape and bits.
fn agrees(what: &str, op: Op, inputs: &[Tensor]) {
    let op_is_dynamic = matches!(op, Op::Quant(QuantOp::LinearDynamic { .. }));
    let graph = common::op_graph(op, inputs);
    let program = lowered_for_device(&graph, inputs);
    assert!(program.fallbacks.is_empty(), "{what}\n{program}");
    // The dynamic linear: x's range, x quantized, the product.
    let kernels = if op_is_dynamic { 3 } else { 1 };
    assert_eq!(program.kernels().count(), kernels, "{what}\n{program}");
    let want = eager(&graph, inputs);
    let interpreted = run_program(&program, &NoEnvironment, &Interpreter, inputs).unwrap();
    let jitted = jit_run(&program, inputs);
    for (runner, got) in [("interpreter", &interpreted[0]), ("jit", &jitted[0])] {
        assert_eq!(got.dtype(), want[0].dtype(), "{what}: {runner}\n{program}");
        assert_eq!(got.shape(), want[0].shape(), "{what}: {runner}\n{program}");
        assert_eq!(
            exact_bits(got),
            exact_bits(&want[0]),
            "{what}: {runner}\n{program}"
        );
    }
}

/// A static int8 linear with ReLU and bias, x's and the output's parameters given.
fn static_linear(bias: bool) -> Op {
    Op::Quant(QuantOp::Linear {
        x_scale: 0.5,
        x_zero_point: 3,
        out_scale: 0.25,
        out_zero_point: 9,
        relu: true,
        bias,
    })
}

/// Symmetric per-channel weight parameters of `n` channels.
fn symmetric(n: usize) -> [Tensor; 2] {
    [
        valid_scales(n, 0),
        Tensor::from_vec(vec![0i64; n], &[n]).unwrap(),
    ]
}

#[test]
fn static_int8_linear_equals_eager_bit_for_bit() {
    all_agree(static_linear_cases(), 150);
}

#[test]
fn dynamic_int8_linear_equals_eager_bit_for_bit() {
    all_agree(dynamic_linear_cases(), 35);
}

#[test]
fn static_int8_linear_reads_transposed_inputs_and_weights_in_place() {
    let x = quantized_inputs(DType::U8, &[6, 3], 2)
        .transpose(0, 1)
        .unwrap();
    let w = quantized_inputs(DType::I8, &[6, 4], 5)
        .transpose(0, 1)
        .unwrap();
    let [scales, zero_points] = symmetric(4);
    agrees(
        "transposed x and w",
        static_linear(false),
        &[x, w, scales, zero_points],
    );
}

#[test]
fn int8_linears_lowered_for_the_cpu_keep_the_eager_gemm() {
    let x = quantized_inputs(DType::U8, &[3, 5], 0);
    let w = quantized_inputs(DType::I8, &[4, 5], 1);
    let [scales, zero_points] = symmetric(4);
    let inputs = [x, w, scales, zero_points];
    let graph = common::op_graph(static_linear(false), &inputs);
    let program = lowered(&graph, &inputs);
    assert_eq!(program.kernels().count(), 0, "{program}");
    assert_eq!(program.fallbacks.len(), 1, "{program}");
    assert!(
        program.fallbacks[0].reason.contains("eager GEMM"),
        "{program}"
    );
}

#[test]
fn a_reduction_whose_eager_i32_sum_may_wrap_keeps_the_eager_kernel() {
    // 65794 * 255 * 128 > i32::MAX.
    let k = 65_794;
    let x = quantized_inputs(DType::U8, &[1, k], 0);
    let w = quantized_inputs(DType::I8, &[2, k], 1);
    let [scales, zero_points] = symmetric(2);
    let inputs = [x, w, scales, zero_points];
    let graph = common::op_graph(static_linear(false), &inputs);
    let program = lowered_for_device(&graph, &inputs);
    assert_eq!(program.fallbacks.len(), 1, "{program}");
    assert!(program.fallbacks[0].reason.contains("wrap"), "{program}");
    assert_eq!(
        exact_bits(&jit_run(&program, &inputs)[0]),
        exact_bits(&eager(&graph, &inputs)[0])
    );
}

/// A static int8 conv2d (3x3, padding 1) with ReLU, without bias.
fn static_conv() -> Op {
    Op::Quant(QuantOp::Conv2d {
        params: ConvParams::conv2d([1, 1], [1, 1], [1, 1], 1),
        x_scale: 0.5,
        x_zero_point: 3,
        out_scale: 0.25,
        out_zero_point: 9,
        relu: true,
        bias: false,
    })
}

#[test]
fn static_int8_conv2d_equals_eager_bit_for_bit() {
    all_agree(static_conv_cases(), 270);
}

#[test]
fn an_int8_conv2d_whose_eager_i32_sum_may_wrap_keeps_the_eager_kernel() {
    // 7311 * 3 * 3 = 65799 products per output, and 65799 * 255 * 128 > i32::MAX.
    let x = quantized_inputs(DType::U8, &[1, 7311, 2, 2], 0);
    let w = quantized_inputs(DType::I8, &[1, 7311, 3, 3], 1);
    let [scales, zero_points] = symmetric(1);
    let inputs = [x, w, scales, zero_points];
    let graph = common::op_graph(static_conv(), &inputs);
    let program = lowered_for_device(&graph, &inputs);
    assert_eq!(program.fallbacks.len(), 1, "{program}");
    assert!(program.fallbacks[0].reason.contains("wrap"), "{program}");
    assert_eq!(
        exact_bits(&jit_run(&program, &inputs)[0]),
        exact_bits(&eager(&graph, &inputs)[0])
    );
    // 7310 * 3 * 3 = 65790 products fit: generated.
    let w = quantized_inputs(DType::I8, &[1, 7310, 3, 3], 1);
    let x = quantized_inputs(DType::U8, &[1, 7310, 2, 2], 0);
    let inputs = [x, w, inputs[2].clone(), inputs[3].clone()];
    let graph = common::op_graph(static_conv(), &inputs);
    let program = lowered_for_device(&graph, &inputs);
    assert!(program.fallbacks.is_empty(), "{program}");
}
