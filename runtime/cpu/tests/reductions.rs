//! Differential tests of reduction kernels: random elementwise prologues, a reduction (sum,
//! mean, amax/amin, var/std, logsumexp, softmax, log-softmax, layer and RMS norm, global
//! average pooling) and an elementwise epilogue, over random shapes with size 0 and 1 dims
//! and odd lengths, run by the eager ops, the kernel-IR interpreter and the JIT, which agree
//! within a tolerance (kernels accumulate in the element type where eager code sums in f64);
//! and the snapshot of a reduction with its prologue and epilogue.

use crate::common;

use common::{
    Builder, Link, check_backends, kernels_text, lowered, one_kernel_agreeing, snapshots, try_eager,
};
use proptest::prelude::*;
use tessera_fx::{Graph, NodeId};
use tessera_kernel::{Interpreter, NoEnvironment, lower, run_program};
use tessera_tensor::op::{BinaryOp, NormOp, PoolOp, ReduceKind, ReduceOp, UnaryOp};
use tessera_tensor::{DType, Op, Tensor};

/// The reduction in the middle of a chain.
#[derive(Debug, Clone)]
enum Reduction {
    /// A reduction of the dims whose flag is set (the last dim when none is).
    Reduce(ReduceKind, Vec<bool>, bool),
    /// Softmax or log-softmax along dim `d % ndim`.
    Softmax(usize, bool),
    /// Layer norm (or RMS norm) of the last `1 + k % ndim` dims, with weight and bias flags.
    Norm(usize, bool, bool, bool),
    /// Adaptive average pooling to 1x1 (a mean over the last dim below 3 dims or for an
    /// empty plane, which pooling refuses).
    GlobalAvgPool,
}

/// Elementwise links whose values stay bounded, so that sums of them cancel little and an
/// f32 accumulation stays within the tolerance of eager f64 sums.
fn bounded_link() -> impl Strategy<Value = Link> {
    let unary = vec![
        UnaryOp::Relu,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::Sin,
        UnaryOp::Abs,
        UnaryOp::Neg,
        UnaryOp::Gelu { tanh: false },
        UnaryOp::Silu,
    ];
    let binary = vec![
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Maximum,
        BinaryOp::Minimum,
    ];
    prop_oneof![
        3 => proptest::sample::select(unary).prop_map(Link::Unary),
        2 => (proptest::sample::select(binary.clone()), proptest::collection::vec(any::<bool>(), 4), 0usize..3)
            .prop_map(|(op, keep, lead)| Link::Binary(op, keep, lead)),
        2 => (proptest::sample::select(binary), -2.0f64..2.0, any::<bool>())
            .prop_map(|(op, v, r)| Link::Scalar(op, (v * 4.0).round() / 4.0, r)),
        1 => Just(Link::Clamp(Some(-0.5), Some(0.75))),
    ]
}

fn reduction() -> impl Strategy<Value = Reduction> {
    let kinds = vec![
        ReduceKind::Sum,
        ReduceKind::Mean,
        ReduceKind::Amax,
        ReduceKind::Amin,
        ReduceKind::Var { correction: 1 },
        ReduceKind::Var { correction: 0 },
        ReduceKind::Std { correction: 1 },
        ReduceKind::LogSumExp,
    ];
    prop_oneof![
        4 => (proptest::sample::select(kinds), proptest::collection::vec(any::<bool>(), 4), any::<bool>())
            .prop_map(|(k, dims, keep)| Reduction::Reduce(k, dims, keep)),
        2 => (0usize..4, any::<bool>()).prop_map(|(d, log)| Reduction::Softmax(d, log)),
        2 => (0usize..4, any::<bool>(), any::<bool>(), any::<bool>())
            .prop_map(|(k, w, b, rms)| Reduction::Norm(k, w, b, rms)),
        1 => Just(Reduction::GlobalAvgPool),
    ]
}

/// Applies `r` to `x`; returns the reduction's value.
fn reduce(b: &mut Builder, x: NodeId, r: &Reduction) -> NodeId {
    let s = b.shape(&x);
    let nd = s.len();
    match r {
        Reduction::Reduce(kind, flags, keepdim) => {
            let mut dims: Vec<usize> = (0..nd).filter(|&d| flags[d]).collect();
            if dims.is_empty() {
                dims.push(nd - 1);
            }
            b.call(
                Op::Reduce(ReduceOp {
                    kind: *kind,
                    dims,
                    keepdim: *keepdim,
                }),
                &[&x],
            )
        }
        Reduction::Softmax(d, log) => b.call(
            Op::Softmax {
                dim: d % nd,
                log: *log,
            },
            &[&x],
        ),
        Reduction::Norm(k, weight, bias, rms) => {
            let k = 1 + k % nd;
            let param_shape = s[nd - k..].to_vec();
            let mut args = vec![x];
            if *weight {
                args.push(b.input(&param_shape, false));
            }
            let op = if *rms {
                NormOp::RmsNorm {
                    normalized_ndim: k,
                    eps: 1e-5,
                    weight: *weight,
                }
            } else {
                if *bias {
                    args.push(b.input(&param_shape, false));
                }
                NormOp::LayerNorm {
                    normalized_ndim: k,
                    eps: 1e-5,
                    weight: *weight,
                    bias: *bias,
                }
            };
            let refs: Vec<&NodeId> = args.iter().collect();
            let norm = b.graph.call_function(Op::Norm(op), &refs).unwrap();
            b.graph.getitem(&norm, 0).unwrap()
        }
        Reduction::GlobalAvgPool if nd >= 3 && s[nd - 2] * s[nd - 1] > 0 => b.call(
            Op::Pool(PoolOp::AdaptiveAvgPool2d {
                output_size: [1, 1],
            }),
            &[&x],
        ),
        Reduction::GlobalAvgPool => reduce(
            b,
            x,
            &Reduction::Reduce(ReduceKind::Mean, vec![false; 4], true),
        ),
    }
}

/// `prologue`, the reduction, then `epilogue`; with `residual`, the epilogue starts by
/// subtracting the reduction's result from its input where the shapes broadcast.
fn reduction_chain(
    dtype: DType,
    shape: Vec<usize>,
    strided: bool,
    prologue: &[Link],
    r: &Reduction,
    residual: bool,
    epilogue: &[Link],
) -> (Graph, Vec<Tensor>) {
    let mut b = Builder::new(dtype, strided);
    let mut x = b.input(&shape, strided);
    for l in prologue {
        x = b.apply(x, l);
    }
    let mut y = reduce(&mut b, x, r);
    let (xs, ys) = (b.shape(&x), b.shape(&y));
    if residual && xs.len() == ys.len() && ys.iter().zip(&xs).all(|(a, b)| a == b || *a == 1) {
        y = b.call(Op::Binary(BinaryOp::Sub), &[&x, &y]);
    }
    for l in epilogue {
        y = b.apply(y, l);
    }
    b.graph.output(&[&y]).unwrap();
    (b.graph, b.inputs)
}

fn shapes() -> impl Strategy<Value = Vec<usize>> {
    proptest::collection::vec(
        proptest::sample::select(vec![0usize, 1, 1, 2, 3, 4, 5, 7, 9]),
        1..4,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn random_reduction_chains_agree_across_eager_interpreter_and_jit(
        f64_dtype in any::<bool>(),
        shape in shapes(),
        strided in any::<bool>(),
        prologue in proptest::collection::vec(bounded_link(), 0..3),
        r in reduction(),
        residual in any::<bool>(),
        epilogue in proptest::collection::vec(bounded_link(), 0..3),
    ) {
        let dtype = if f64_dtype { DType::F64 } else { DType::F32 };
        // A norm of an empty input has no statistics for its rows: it runs eagerly.
        let empty = shape.contains(&0);
        let (graph, inputs) = reduction_chain(dtype, shape, strided, &prologue, &r, residual, &epilogue);
        // The max of an empty dimension is an error, eagerly and compiled alike.
        let Ok(expected) = try_eager(&graph, &inputs) else {
            return Ok(());
        };
        let program = lowered(&graph, &inputs);
        prop_assert!(program.fallbacks.is_empty() || empty, "fell back:\n{program}");
        check_backends(&program, &inputs, &expected, if f64_dtype { 1e-9 } else { 1e-3 });
    }
}

#[test]
fn softmax_with_prologue_and_epilogue_is_one_vectorised_kernel() {
    let (graph, inputs) = reduction_chain(
        DType::F32,
        vec![3, 37],
        false,
        &[Link::Scalar(BinaryOp::Mul, 0.5, false)],
        &Reduction::Softmax(1, false),
        false,
        &[Link::Scalar(BinaryOp::Add, 1.0, false)],
    );
    let program = one_kernel_agreeing(&graph, &inputs, 1e-6);
    assert!(program.fallbacks.is_empty(), "{program}");
    let kernel = program.kernels().next().unwrap();
    assert_eq!(kernel.schedule.vector_width, 4, "{program}");
    assert_eq!(tessera_kernel::Stages::of(kernel).sweeps, 3, "{program}");
}

#[test]
fn layer_norm_then_relu_is_one_kernel_with_its_statistics_broadcast() {
    let (graph, inputs) = reduction_chain(
        DType::F32,
        vec![2, 5, 8],
        false,
        &[],
        &Reduction::Norm(0, true, true, false),
        false,
        &[Link::Unary(UnaryOp::Relu)],
    );
    let program = one_kernel_agreeing(&graph, &inputs, 1e-5);
    snapshots()
        .bind(|| insta::assert_snapshot!("compile_reduction_epilogue", kernels_text(&program)));
}

#[test]
fn column_reductions_run_across_their_outputs_with_vector_loads_and_agree() {
    // (shape, reduced dims, kind): a bias gradient, one reduced over two loops, one with an
    // outer output loop, a max; widths past a multiple of sixteen leave outputs for the
    // generic body.
    let cases = [
        (vec![37, 35], vec![true, false], ReduceKind::Sum),
        (vec![3, 5, 40], vec![true, true, false], ReduceKind::Sum),
        (vec![4, 6, 33], vec![false, true, false], ReduceKind::Mean),
        (vec![9, 16], vec![true, false], ReduceKind::Amax),
    ];
    for (shape, dims, kind) in cases {
        let what = format!("{kind:?} over {dims:?} of {shape:?}");
        let (graph, inputs) = reduction_chain(
            DType::F32,
            shape,
            false,
            &[Link::Scalar(BinaryOp::Mul, 0.5, false)],
            &Reduction::Reduce(kind, dims, false),
            false,
            &[],
        );
        let program = one_kernel_agreeing(&graph, &inputs, 1e-5);
        let jit = tessera_cpu::JitProgram::compile(&program).unwrap();
        let clif = &jit.kernels()[0].clif;
        // The generic path gathers each lane with a scalar load (the leftover outputs do).
        assert!(
            clif.contains("load.f32x4"),
            "{what}: no vector loads\n{clif}"
        );
    }
}

#[test]
fn sum_over_a_leading_dim_runs_as_scalar_code_and_agrees() {
    let (graph, inputs) = reduction_chain(
        DType::F32,
        vec![7, 6],
        true,
        &[Link::Scalar(BinaryOp::Sub, 0.25, false)],
        &Reduction::Reduce(ReduceKind::Sum, vec![true, false], false),
        false,
        &[],
    );
    one_kernel_agreeing(&graph, &inputs, 1e-5);
}

#[test]
fn amax_of_an_empty_dimension_falls_back_to_the_eager_error() {
    let (graph, inputs) = reduction_chain(
        DType::F32,
        vec![3, 0],
        false,
        &[],
        &Reduction::Reduce(ReduceKind::Amax, vec![false, true], false),
        false,
        &[],
    );
    let program = lower(&graph, &[]).unwrap();
    assert_eq!(program.fallbacks.len(), 1, "{program}");
    assert!(run_program(&program, &NoEnvironment, &Interpreter, &inputs).is_err());
}

#[test]
fn norm_of_an_empty_input_runs_eagerly_and_writes_no_statistics() {
    let (graph, inputs) = reduction_chain(
        DType::F32,
        vec![0],
        false,
        &[],
        &Reduction::Norm(0, false, false, true),
        false,
        &[],
    );
    let program = lower(&graph, &[]).unwrap();
    check_backends(&program, &inputs, &try_eager(&graph, &inputs).unwrap(), 0.0);
}
