//! Differential tests of the compiler: random elementwise, broadcast and view chains run by
//! the eager ops (the graph interpreter's semantics), by the kernel-IR interpreter and by the
//! JIT, which must all agree; and snapshots of the kernel IR and CLIF of representative
//! kernels.

use crate::common;

use common::{
    Builder, Link, assert_close, dims, eager, jit_run, kernels_text, link, lowered,
    one_kernel_agreeing, snapshots,
};
use proptest::prelude::*;
use tessera_fx::Graph;
use tessera_kernel::{Interpreter, NoEnvironment, Program, lower, run_program};
use tessera_tensor::op::{BinaryOp, UnaryOp};
use tessera_tensor::{DType, Tensor};

fn chain(dtype: DType, shape: Vec<usize>, strided: bool, links: &[Link]) -> (Graph, Vec<Tensor>) {
    let mut b = Builder::new(dtype, strided);
    let mut x = b.input(&shape, strided);
    for l in links {
        x = b.apply(x, l);
    }
    b.graph.output(&[&x]).unwrap();
    (b.graph, b.inputs)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn random_chains_agree_across_eager_interpreter_and_jit(
        f64_dtype in any::<bool>(),
        shape in dims(),
        strided in any::<bool>(),
        links in proptest::collection::vec(link(), 1..7),
    ) {
        let dtype = if f64_dtype { DType::F64 } else { DType::F32 };
        let (graph, inputs) = chain(dtype, shape, strided, &links);
        let expected = eager(&graph, &inputs);
        let layouts: Vec<_> = inputs.iter().map(|t| t.layout()).collect();
        let program = lower(&graph, &layouts).unwrap();
        prop_assert!(program.fallbacks.is_empty(), "fell back:\n{program}");
        let interpreted = run_program(&program, &NoEnvironment, &Interpreter, &inputs).unwrap();
        let jitted = jit_run(&program, &inputs);
        for ((e, i), j) in expected.iter().zip(&interpreted).zip(&jitted) {
            assert_close("interpreter", e, i, &program);
            assert_close("jit", e, j, &program);
        }
    }
}

/// `links` over a contiguous f32 input of `shape`, lowered to one kernel that agrees with
/// eager execution (interpreted and JIT-compiled).
fn f32_kernel(shape: &[usize], links: &[Link]) -> Program {
    let (graph, inputs) = chain(DType::F32, shape.to_vec(), false, links);
    one_kernel_agreeing(&graph, &inputs, 1e-6)
}

#[test]
fn elementwise_chain_is_one_vectorised_kernel() {
    let program = f32_kernel(
        &[4, 8],
        &[
            Link::Scalar(BinaryOp::Mul, 2.0, false),
            Link::Unary(UnaryOp::Relu),
            Link::Unary(UnaryOp::Exp),
        ],
    );
    assert_eq!(program.kernels().next().unwrap().schedule.vector_width, 4);
    snapshots()
        .bind(|| insta::assert_snapshot!("compile_elementwise_chain", kernels_text(&program)));
}

#[test]
fn broadcast_add_reads_the_row_with_stride_zero() {
    let links = [
        Link::Binary(BinaryOp::Add, vec![true, true], 1),
        Link::Unary(UnaryOp::Tanh),
    ];
    let program = f32_kernel(&[3, 5], &links);
    snapshots().bind(|| insta::assert_snapshot!("compile_broadcast", kernels_text(&program)));
}

#[test]
fn transposed_input_is_read_in_place() {
    let (graph, inputs) = chain(DType::F64, vec![3, 4], true, &[Link::Unary(UnaryOp::Sin)]);
    assert!(!inputs[0].is_contiguous());
    let program = lowered(&graph, &inputs);
    let kernel = program.kernels().next().unwrap();
    assert_eq!(kernel.domain, vec![3, 4]);
    assert_eq!(
        kernel.values[0].expr,
        tessera_kernel::Expr::Load {
            buffer: tessera_kernel::BufferId(0),
            index: tessera_kernel::IndexExpr {
                offset: 0,
                strides: vec![1, 3]
            },
        }
    );
    let expected = eager(&graph, &inputs);
    assert_close(
        "jit",
        &expected[0],
        &jit_run(&program, &inputs)[0],
        &program,
    );
}
