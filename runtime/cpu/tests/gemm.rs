//! Differential tests of GEMM kernels: `linear` (with and without bias, on 2-D and 3-D
//! inputs, transposed weights) and 2-D `matmul` followed by a random elementwise epilogue, run
//! by the eager ops, the kernel-IR interpreter and the JIT (one external GEMM call per block
//! of rows, the epilogue fused after it), which agree within a tolerance; and the snapshot of
//! a GEMM epilogue kernel.

use crate::common;

use common::{
    Builder, Link, check_backends, kernels_text, lowered, one_kernel_agreeing, snapshots, try_eager,
};
use proptest::prelude::*;
use tessera_fx::Graph;
use tessera_kernel::lower;
use tessera_tensor::op::{BinaryOp, UnaryOp};
use tessera_tensor::{DType, Op, Tensor};

/// `linear(x, w, b)` (or `x @ w` with `matmul`) on `[lead..., m, k]` inputs, then `epilogue`.
fn gemm_chain(
    dtype: DType,
    lead: &[usize],
    (m, k, n): (usize, usize, usize),
    matmul: bool,
    bias: bool,
    epilogue: &[Link],
) -> (Graph, Vec<Tensor>) {
    let mut b = Builder::new(dtype, false);
    let mut xs = lead.to_vec();
    xs.extend([m, k]);
    let x = b.input(&xs, false);
    let mut y = if matmul {
        let w = b.input(&[k, n], true);
        b.call(Op::Matmul, &[&x, &w])
    } else {
        let w = b.input(&[n, k], false);
        if bias {
            let bias = b.input(&[n], false);
            b.call(Op::Linear { bias: true }, &[&x, &w, &bias])
        } else {
            b.call(Op::Linear { bias: false }, &[&x, &w])
        }
    };
    for l in epilogue {
        y = b.apply(y, l);
    }
    b.graph.output(&[&y]).unwrap();
    (b.graph, b.inputs)
}

fn epilogue_link() -> impl Strategy<Value = Link> {
    prop_oneof![
        proptest::sample::select(vec![
            UnaryOp::Relu,
            UnaryOp::Tanh,
            UnaryOp::Gelu { tanh: true }
        ])
        .prop_map(Link::Unary),
        (proptest::collection::vec(any::<bool>(), 4), 0usize..2)
            .prop_map(|(keep, lead)| Link::Binary(BinaryOp::Add, keep, lead)),
        Just(Link::Scalar(BinaryOp::Mul, 0.5, false)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn random_gemm_epilogues_agree_across_eager_interpreter_and_jit(
        f64_dtype in any::<bool>(),
        lead in proptest::collection::vec(1usize..4, 0..2),
        m in proptest::sample::select(vec![0usize, 1, 2, 5, 17]),
        k in proptest::sample::select(vec![0usize, 1, 3, 8, 33]),
        n in proptest::sample::select(vec![1usize, 2, 7, 16]),
        matmul in any::<bool>(),
        bias in any::<bool>(),
        epilogue in proptest::collection::vec(epilogue_link(), 1..4),
    ) {
        let dtype = if f64_dtype { DType::F64 } else { DType::F32 };
        let lead = if matmul { Vec::new() } else { lead };
        let (graph, inputs) = gemm_chain(dtype, &lead, (m, k, n), matmul, bias, &epilogue);
        let expected = try_eager(&graph, &inputs).unwrap();
        let program = lowered(&graph, &inputs);
        prop_assert!(program.fallbacks.is_empty(), "fell back:\n{program}");
        check_backends(&program, &inputs, &expected, if f64_dtype { 1e-9 } else { 1e-4 });
    }
}

#[test]
fn linear_bias_relu_is_one_kernel_calling_the_gemm() {
    let (graph, inputs) = gemm_chain(
        DType::F32,
        &[],
        (4, 8, 6),
        false,
        true,
        &[Link::Unary(UnaryOp::Relu)],
    );
    let program = one_kernel_agreeing(&graph, &inputs, 1e-5);
    assert!(program.fallbacks.is_empty(), "{program}");
    assert!(program.kernels().next().unwrap().gemm.is_some());
    snapshots().bind(|| insta::assert_snapshot!("compile_gemm_epilogue", kernels_text(&program)));
}

#[test]
fn linear_without_an_epilogue_runs_its_eager_kernel() {
    let (graph, _) = gemm_chain(DType::F32, &[], (4, 8, 6), false, true, &[]);
    let program = lower(&graph, &[]).unwrap();
    assert_eq!(program.kernels().count(), 0, "{program}");
    assert_eq!(program.fallbacks.len(), 1, "{program}");
}

#[test]
fn linear_epilogue_over_several_row_blocks_agrees() {
    // 2048 columns make blocks of 512 rows: 60 outer iterations of 10 rows run in 2 calls.
    let (graph, inputs) = gemm_chain(
        DType::F32,
        &[60],
        (10, 3, 2048),
        false,
        true,
        &[Link::Unary(UnaryOp::Tanh)],
    );
    one_kernel_agreeing(&graph, &inputs, 1e-5);
}
