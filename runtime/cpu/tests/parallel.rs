//! Kernels with enough work have their outermost loop marked parallel and run in chunks on
//! the thread pool; split runs agree with eager execution and the kernel-IR interpreter for
//! elementwise nests (strided, and a single contiguous loop whose chunks must stop at whole
//! vector iterations) and for reductions; small kernels stay on one thread.

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
