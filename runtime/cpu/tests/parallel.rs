//! Kernels with enough work have their outermost loop marked parallel and run in chunks on
//! the thread pool; split runs agree with eager execution and the kernel-IR interpreter for
//! elementwise nests (strided, and a single contiguous loop whose chunks must stop at whole
//! vector iterations), for reductions and for GEMM kernels (rows shared out, each share's
//! GEMM call on its own thread); small kernels stay on one thread.

mod common;

use common::{Builder, check_backends, eager, lowered};
use tessera_fx::NodeId;
use tessera_kernel::{LoopId, Program};
use tessera_tensor::op::{BinaryOp, UnaryOp};
use tessera_tensor::{DType, Op};

/// Runs `f` on a pool of three threads (more than this machine may have), so that the split
/// happens whatever the default pool's size.
fn on_three_threads(f: impl FnOnce() + Send) {
    rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .unwrap()
        .install(f);
}

/// `relu(x * y) + sigmoid(x)` of inputs of `shape`.
fn elementwise_chain(shape: &[usize], strided: bool) -> Builder {
    let mut b = Builder::new(DType::F32, strided);
    let x = b.input(shape, strided);
    let y = b.input(shape, false);
    let xy = b.call(Op::Binary(BinaryOp::Mul), &[&x, &y]);
    let relu = b.call(Op::Unary(UnaryOp::Relu), &[&xy]);
    let sig = b.call(Op::Unary(UnaryOp::Sigmoid), &[&x]);
    let out = b.call(Op::Binary(BinaryOp::Add), &[&relu, &sig]);
    b.graph.output(&[&out]).unwrap();
    b
}

fn parallel_loops(program: &Program) -> Vec<Option<LoopId>> {
    program.kernels().map(|k| k.schedule.parallel).collect()
}

fn split_runs_agree(b: &Builder, tol: f64) {
    let program = lowered(&b.graph, &b.inputs);
    assert_eq!(parallel_loops(&program), vec![Some(LoopId(0))], "{program}");
    let expected = eager(&b.graph, &b.inputs);
    on_three_threads(|| check_backends(&program, &b.inputs, &expected, tol));
}

#[test]
fn strided_elementwise_nest_splits_its_outer_loop_and_agrees() {
    split_runs_agree(&elementwise_chain(&[1001, 301], true), 1e-6);
}

#[test]
fn contiguous_elementwise_loop_splits_at_vector_iterations_and_agrees() {
    // One loop of an odd length: every chunk but the last is a whole number of unrolled
    // vector iterations, and the last ends in the scalar tail.
    split_runs_agree(&elementwise_chain(&[(1 << 17) + 13], false), 1e-6);
}

#[test]
fn softmax_over_many_rows_splits_its_rows_and_agrees() {
    let mut b = Builder::new(DType::F32, false);
    let x = b.input(&[4099, 67], false);
    let e = b.call(Op::Unary(UnaryOp::Tanh), &[&x]);
    let s: NodeId = b.call(Op::Softmax { dim: 1, log: false }, &[&e]);
    b.graph.output(&[&s]).unwrap();
    split_runs_agree(&b, 1e-5);
}

#[test]
fn small_kernel_stays_on_one_thread() {
    let b = elementwise_chain(&[64, 33], false);
    let program = lowered(&b.graph, &b.inputs);
    assert_eq!(parallel_loops(&program), vec![None], "{program}");
}

/// `relu(x @ w (+ bias))` on an `x` of `lead + [m, k]`: `linear` with a `[n, k]` weight, or
/// `matmul` with a transposed `[k, n]` weight (a strided operand).
fn gemm_relu(lead: &[usize], (m, k, n): (usize, usize, usize), matmul: bool) -> Builder {
    let mut b = Builder::new(DType::F32, false);
    let mut xs = lead.to_vec();
    xs.extend([m, k]);
    let x = b.input(&xs, false);
    let y = if matmul {
        let w = b.input(&[k, n], true);
        b.call(Op::Matmul, &[&x, &w])
    } else {
        let w = b.input(&[n, k], false);
        let bias = b.input(&[n], false);
        b.call(Op::Linear { bias: true }, &[&x, &w, &bias])
    };
    let out = b.call(Op::Unary(UnaryOp::Relu), &[&y]);
    b.graph.output(&[&out]).unwrap();
    b
}

#[test]
fn gemm_kernel_with_enough_work_shares_its_rows_out_and_agrees() {
    // 203 rows: the shares end at whole 16-row micro-kernel blocks but the last.
    split_runs_agree(&gemm_relu(&[], (203, 70, 90), false), 1e-4);
}

#[test]
fn gemm_kernel_over_a_strided_weight_shares_its_rows_out_and_agrees() {
    split_runs_agree(&gemm_relu(&[], (160, 96, 75), true), 1e-4);
}

#[test]
fn gemm_kernel_of_a_batched_input_shares_whole_iterations_and_agrees() {
    // The outermost loop's iteration is 37 rows of the product.
    split_runs_agree(&gemm_relu(&[5], (37, 64, 80), false), 1e-4);
}

#[test]
fn small_gemm_kernel_stays_whole() {
    let b = gemm_relu(&[], (16, 24, 20), false);
    let program = lowered(&b.graph, &b.inputs);
    assert_eq!(parallel_loops(&program), vec![None], "{program}");
}

#[test]
fn a_share_of_a_split_gemm_kernel_runs_its_gemm_on_one_thread() {
    // The GEMM of a share is the whole kernel's call on fewer rows, on one thread: with `k`
    // inside one of the GEMM's depth blocks each sum runs in the same order, so a split run
    // and a run on one thread agree exactly.
    let b = gemm_relu(&[], (256, 64, 128), false);
    let program = lowered(&b.graph, &b.inputs);
    assert_eq!(parallel_loops(&program), vec![Some(LoopId(0))], "{program}");
    let whole = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap()
        .install(|| common::jit_run(&program, &b.inputs));
    let mut split = Vec::new();
    on_three_threads(|| split = common::jit_run(&program, &b.inputs));
    assert_eq!(
        whole[0].to_vec::<f32>().unwrap(),
        split[0].to_vec::<f32>().unwrap()
    );
}

#[test]
fn lone_gemm_worth_sharing_out_is_a_kernel_and_agrees() {
    // `linear` with bias and no epilogue, and the weight gradient's `matmul` of a transposed
    // operand (`dy^T @ x`): kernels of their own whose rows are shared out, not eager calls.
    let mut b = Builder::new(DType::F32, false);
    let x = b.input(&[96, 70], false);
    let w = b.input(&[50, 70], false);
    let bias = b.input(&[50], false);
    let y = b.call(Op::Linear { bias: true }, &[&x, &w, &bias]);
    b.graph.output(&[&y]).unwrap();
    let program = lowered(&b.graph, &b.inputs);
    assert!(program.fallbacks.is_empty(), "{program}");
    split_runs_agree(&b, 1e-4);

    let mut b = Builder::new(DType::F32, false);
    let dy = b.input(&[64, 96], true);
    let x = b.input(&[96, 80], false);
    let dw = b.call(Op::Matmul, &[&dy, &x]);
    b.graph.output(&[&dw]).unwrap();
    let program = lowered(&b.graph, &b.inputs);
    assert!(program.fallbacks.is_empty(), "{program}");
    split_runs_agree(&b, 1e-4);
}

#[test]
fn lone_gemm_of_few_rows_runs_its_eager_kernel() {
    let mut b = Builder::new(DType::F32, false);
    let x = b.input(&[16, 512], false);
    let w = b.input(&[512, 512], false);
    let y = b.call(Op::Linear { bias: false }, &[&x, &w]);
    b.graph.output(&[&y]).unwrap();
    let program = lowered(&b.graph, &b.inputs);
    assert_eq!(program.kernels().count(), 0, "{program}");
    assert_eq!(program.fallbacks.len(), 1, "{program}");
}
