//! `LowerOptions::product_kernels`: a GEMM or convolution with no epilogue to fuse becomes a
//! kernel of its own (its call plus bias) instead of an external step, and that kernel gives
//! the eager op's values in the kernel-IR interpreter; by default (the CPU's lowering) it stays
//! an eager call reported as a fallback. What the kernel IR cannot express (a batched matmul)
//! still falls back, with why.

use tessera_fx::Graph;
use tessera_kernel::{
    Interpreter, LowerOptions, NoEnvironment, Program, Step, lower, lower_with, run_program,
};
use tessera_tensor::op::{ConvOp, ConvParams};
use tessera_tensor::{DType, Op, Tensor, TensorMeta};

const KERNELS: LowerOptions = LowerOptions {
    product_kernels: true,
    winograd: tessera_kernel::WinogradPolicy::Off,
    weights_as_stored: false,
    plain_conv_calls: false,
};

/// Values in [-1, 1], deterministic per `seed`.
fn tensor(shape: &[usize], seed: usize) -> Tensor {
    let v: Vec<f32> = (0..shape.iter().product::<usize>())
        .map(|i| ((i * 7919 + seed * 104_729 + 13) % 2003) as f32 / 1001.5 - 1.0)
        .collect();
    Tensor::from_vec(v, shape).unwrap()
}

/// `op` applied to placeholders of `shapes`, its result the graph's output.
fn one_op(op: &Op, shapes: &[&[usize]]) -> Graph {
    let mut g = Graph::new();
    let inputs: Vec<_> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| g.placeholder(&format!("x{i}"), TensorMeta::new(s.to_vec(), DType::F32)))
        .collect();
    let refs: Vec<_> = inputs.iter().collect();
    let y = g.call_function(op.clone(), &refs).unwrap();
    g.output(&[&y]).unwrap();
    g
}

fn product_kernels(program: &Program) -> usize {
    program
        .steps
        .iter()
        .filter(|s| matches!(s, Step::Kernel { kernel, .. } if kernel.gemm.is_some() || kernel.conv.is_some()))
        .count()
}

/// Lowers `op` both ways, checks the kernel runs like the eager op.
fn check(what: &str, op: Op, shapes: &[&[usize]]) {
    let graph = one_op(&op, shapes);
    let default = lower(&graph, &[]).unwrap();
    assert_eq!(
        default.fallbacks.len(),
        1,
        "{what}: eager by default\n{default}"
    );
    assert_eq!(product_kernels(&default), 0, "{what}\n{default}");
    let program = lower_with(&graph, &[], KERNELS).unwrap();
    assert!(program.fallbacks.is_empty(), "{what}: fell back\n{program}");
    assert_eq!(product_kernels(&program), 1, "{what}\n{program}");
    let inputs: Vec<Tensor> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| tensor(s, i))
        .collect();
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let want = op.apply1(&refs).unwrap().to_vec::<f32>().unwrap();
    let got = run_program(&program, &NoEnvironment, &Interpreter, &inputs).unwrap();
    let got = got[0].to_vec::<f32>().unwrap();
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-5 * w.abs().max(1.0),
            "{what}[{i}]: {g} vs {w}"
        );
    }
}

#[test]
fn lone_linear_with_bias_is_a_gemm_kernel_when_asked() {
    check(
        "linear",
        Op::Linear { bias: true },
        &[&[3, 7], &[5, 7], &[5]],
    );
}

#[test]
fn lone_matmul_is_a_gemm_kernel_when_asked() {
    check("matmul", Op::Matmul, &[&[4, 9], &[9, 6]]);
}

#[test]
fn lone_convolution_with_bias_is_a_convolution_kernel_when_asked() {
    check(
        "conv2d",
        Op::Conv(ConvOp::Forward {
            params: ConvParams::conv2d([2, 2], [1, 1], [1, 1], 1),
            bias: true,
        }),
        &[&[2, 3, 7, 6], &[4, 3, 3, 3], &[4]],
    );
}

#[test]
fn batched_matmul_still_falls_back_with_why_when_kernels_are_asked() {
    let graph = one_op(&Op::Matmul, &[&[2, 4, 9], &[2, 9, 6]]);
    let program = lower_with(&graph, &[], KERNELS).unwrap();
    assert_eq!(program.fallbacks.len(), 1, "{program}");
    let why = program.fallbacks[0].to_string();
    assert!(why.contains("2-D matmul"), "{why}");
}
