//! Differential tests of the compiler: random elementwise, broadcast and view chains run by
//! the eager ops (the graph interpreter's semantics), by the kernel-IR interpreter and by the
//! JIT, which must all agree; and snapshots of the kernel IR and CLIF of representative
//! kernels.

use proptest::prelude::*;
use std::collections::HashMap;
use tessera_cpu::JitProgram;
use tessera_fx::{Graph, NodeId, NodeKind};
use tessera_kernel::{Interpreter, NoEnvironment, Program, lower, run_program};
use tessera_tensor::op::{BinaryOp, CompareOp, ScalarOp, UnaryOp, ViewOp};
use tessera_tensor::{DType, Op, Tensor, TensorMeta};

/// Runs `graph` op by op eagerly, as the graph interpreter does.
fn eager(graph: &Graph, inputs: &[Tensor]) -> Vec<Tensor> {
    let mut values: HashMap<NodeId, Tensor> = HashMap::new();
    let mut next = inputs.iter();
    for id in graph.nodes() {
        let node = graph.node(&id).unwrap();
        let args: Vec<Tensor> = graph
            .operands(&id)
            .unwrap()
            .iter()
            .map(|o| values[o].clone())
            .collect();
        let value = match &node.kind {
            NodeKind::Placeholder { .. } => next.next().unwrap().clone(),
            NodeKind::CallFunction { op } => op.apply1(&args.iter().collect::<Vec<_>>()).unwrap(),
            NodeKind::Output => return args,
            other => panic!("unexpected node {other:?}"),
        };
        values.insert(id, value);
    }
    unreachable!("the graph has an output")
}

fn jit_run(program: &Program, inputs: &[Tensor]) -> Vec<Tensor> {
    let jit = JitProgram::compile(program).unwrap_or_else(|e| panic!("{e}\n{program}"));
    run_program(program, &NoEnvironment, &jit, inputs).unwrap()
}

fn assert_close(what: &str, expected: &Tensor, got: &Tensor, program: &Program) {
    assert_eq!(expected.shape(), got.shape(), "{what}: shape\n{program}");
    assert_eq!(expected.dtype(), got.dtype(), "{what}: dtype\n{program}");
    let (e, g) = (expected.to_vec_f64().unwrap(), got.to_vec_f64().unwrap());
    for (i, (a, b)) in e.iter().zip(&g).enumerate() {
        let same = (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= 1e-6 * a.abs().max(1.0);
        assert!(
            same,
            "{what}: element {i}: expected {a}, got {b}\n{program}"
        );
    }
}

/// One link of a random chain.
#[derive(Debug, Clone)]
enum Link {
    Unary(UnaryOp),
    /// A binary op with a new input broadcast to the chain's shape (`keep[d]` false: size 1;
    /// `lead` leading dims dropped).
    Binary(BinaryOp, Vec<bool>, usize),
    Scalar(BinaryOp, f64, bool),
    /// `where(x cmp other, x, other)` with a new full-shape input.
    CompareWhere(CompareOp),
    Clamp(Option<f64>, Option<f64>),
    /// Reverses the dims.
    Transpose,
    /// Drops the first element of the largest dim.
    Narrow,
    /// A new leading dim of size 2.
    ExpandLeading,
    Flatten,
}

fn unary_ops() -> Vec<UnaryOp> {
    UnaryOp::EVERY.to_vec()
}

fn binary_ops() -> Vec<BinaryOp> {
    BinaryOp::EVERY.to_vec()
}

fn link() -> impl Strategy<Value = Link> {
    let compares = CompareOp::EVERY.to_vec();
    prop_oneof![
        3 => proptest::sample::select(unary_ops()).prop_map(Link::Unary),
        3 => (proptest::sample::select(binary_ops()), proptest::collection::vec(any::<bool>(), 4), 0usize..3)
            .prop_map(|(op, keep, lead)| Link::Binary(op, keep, lead)),
        2 => (proptest::sample::select(binary_ops()), -2.0f64..2.0, any::<bool>())
            .prop_map(|(op, v, r)| Link::Scalar(op, (v * 4.0).round() / 4.0, r)),
        1 => proptest::sample::select(compares).prop_map(Link::CompareWhere),
        1 => (proptest::option::of(-1.0f64..0.0), proptest::option::of(0.0f64..1.0))
            .prop_map(|(lo, hi)| Link::Clamp(lo.or(if hi.is_none() { Some(-0.5) } else { None }), hi)),
        1 => Just(Link::Transpose),
        1 => Just(Link::Narrow),
        1 => Just(Link::ExpandLeading),
        1 => Just(Link::Flatten),
    ]
}

/// A graph input and the (possibly non-contiguous) tensor given for it.
struct Builder {
    graph: Graph,
    inputs: Vec<Tensor>,
    dtype: DType,
    seed: u64,
}

impl Builder {
    fn input(&mut self, shape: &[usize], strided: bool) -> NodeId {
        self.seed += 1;
        let numel: usize = shape.iter().product();
        let values: Vec<f64> = (0..numel)
            .map(|i| (((i as u64 * 7919 + self.seed * 104_729) % 997) as f64 / 997.0 - 0.45) * 4.0)
            .collect();
        let t = if strided && shape.len() >= 2 {
            // The transpose of a packed tensor of the reversed shape: same values, strided.
            let reversed: Vec<usize> = shape.iter().rev().copied().collect();
            let dims: Vec<usize> = (0..shape.len()).rev().collect();
            Tensor::from_vec(values, &reversed)
                .unwrap()
                .permute(&dims)
                .unwrap()
        } else {
            Tensor::from_vec(values, shape).unwrap()
        };
        let t = t.to_dtype(self.dtype).unwrap();
        let name = format!("x{}", self.inputs.len());
        self.inputs.push(t);
        self.graph
            .placeholder(&name, TensorMeta::new(shape.to_vec(), self.dtype))
    }

    fn call(&mut self, op: Op, args: &[&NodeId]) -> NodeId {
        self.graph.call_function(op, args).unwrap()
    }

    fn shape(&self, id: &NodeId) -> Vec<usize> {
        self.graph.node(id).unwrap().meta[0].shape.clone()
    }
}

fn chain(dtype: DType, shape: Vec<usize>, strided: bool, links: &[Link]) -> (Graph, Vec<Tensor>) {
    let mut b = Builder {
        graph: Graph::new(),
        inputs: Vec::new(),
        dtype,
        seed: 0,
    };
    let mut x = b.input(&shape, strided);
    for l in links {
        let s = b.shape(&x);
        x = match l {
            Link::Unary(u) => b.call(Op::Unary(*u), &[&x]),
            Link::Binary(op, keep, lead) => {
                let lead = (*lead).min(s.len());
                let other: Vec<usize> = s[lead..]
                    .iter()
                    .zip(keep.iter().cycle())
                    .map(|(&n, &k)| if k { n } else { 1 })
                    .collect();
                let y = b.input(&other, strided);
                b.call(Op::Binary(*op), &[&x, &y])
            }
            Link::Scalar(op, value, reversed) => b.call(
                Op::Scalar(ScalarOp {
                    op: *op,
                    value: *value,
                    reversed: *reversed,
                }),
                &[&x],
            ),
            Link::CompareWhere(c) => {
                let y = b.input(&s, strided);
                let cond = b.call(Op::Compare(*c), &[&x, &y]);
                b.call(Op::Where, &[&cond, &x, &y])
            }
            Link::Clamp(min, max) => b.call(
                Op::Clamp {
                    min: *min,
                    max: *max,
                },
                &[&x],
            ),
            Link::Transpose => {
                let dims: Vec<usize> = (0..s.len()).rev().collect();
                b.call(Op::View(ViewOp::Permute(dims)), &[&x])
            }
            Link::Narrow => match (0..s.len()).max_by_key(|&d| s[d]) {
                Some(dim) if s[dim] > 0 => b.call(
                    Op::View(ViewOp::Narrow {
                        dim,
                        start: 1,
                        len: s[dim] - 1,
                    }),
                    &[&x],
                ),
                _ => x,
            },
            Link::ExpandLeading => {
                let mut one = vec![1];
                one.extend(&s);
                let r = b.call(Op::View(ViewOp::Reshape(one)), &[&x]);
                let mut two = vec![2];
                two.extend(&s);
                b.call(Op::View(ViewOp::Expand(two)), &[&r])
            }
            Link::Flatten => b.call(Op::View(ViewOp::Reshape(vec![s.iter().product()])), &[&x]),
        };
    }
    b.graph.output(&[&x]).unwrap();
    (b.graph, b.inputs)
}

fn dims() -> impl Strategy<Value = Vec<usize>> {
    proptest::collection::vec(
        proptest::sample::select(vec![0usize, 1, 1, 2, 3, 5, 7, 9]),
        0..4,
    )
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

/// Insta settings that keep snapshots under `snapshots/` at the repository root.
fn snapshots() -> insta::Settings {
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path("../../../snapshots");
    settings.set_prepend_module_to_snapshot(false);
    settings
}

/// The kernel IR and CLIF of every kernel of `program`.
fn kernels_text(program: &Program) -> String {
    let jit = JitProgram::compile(program).unwrap();
    let mut text = program.to_string();
    for k in jit.kernels() {
        text.push_str(&format!("\n; CLIF of {}\n{}", k.name, k.clif));
    }
    text
}

#[test]
fn elementwise_chain_is_one_vectorised_kernel() {
    let (graph, inputs) = chain(
        DType::F32,
        vec![4, 8],
        false,
        &[
            Link::Scalar(BinaryOp::Mul, 2.0, false),
            Link::Unary(UnaryOp::Relu),
            Link::Unary(UnaryOp::Exp),
        ],
    );
    let layouts: Vec<_> = inputs.iter().map(|t| t.layout()).collect();
    let program = lower(&graph, &layouts).unwrap();
    assert_eq!(program.kernels().count(), 1);
    assert_eq!(program.kernels().next().unwrap().schedule.vector_width, 4);
    snapshots()
        .bind(|| insta::assert_snapshot!("compile_elementwise_chain", kernels_text(&program)));
}

#[test]
fn broadcast_add_reads_the_row_with_stride_zero() {
    let (graph, inputs) = chain(
        DType::F32,
        vec![3, 5],
        false,
        &[
            Link::Binary(BinaryOp::Add, vec![true, true], 1),
            Link::Unary(UnaryOp::Tanh),
        ],
    );
    let layouts: Vec<_> = inputs.iter().map(|t| t.layout()).collect();
    let program = lower(&graph, &layouts).unwrap();
    assert_eq!(program.kernels().count(), 1);
    snapshots().bind(|| insta::assert_snapshot!("compile_broadcast", kernels_text(&program)));
    let expected = eager(&graph, &inputs);
    assert_close(
        "jit",
        &expected[0],
        &jit_run(&program, &inputs)[0],
        &program,
    );
}

#[test]
fn transposed_input_is_read_in_place() {
    let (graph, inputs) = chain(DType::F64, vec![3, 4], true, &[Link::Unary(UnaryOp::Sin)]);
    assert!(!inputs[0].is_contiguous());
    let layouts: Vec<_> = inputs.iter().map(|t| t.layout()).collect();
    let program = lower(&graph, &layouts).unwrap();
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
