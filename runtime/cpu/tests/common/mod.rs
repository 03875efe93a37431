//! Helpers shared by the CPU backend's differential tests: the eager reference run of a
//! graph, running a program through the JIT, tolerant comparison, and a builder of graphs
//! whose inputs may be non-contiguous.

#![allow(dead_code)]

pub mod joint_env;

use proptest::prelude::*;
use std::collections::HashMap;
use tessera_cpu::JitProgram;
use tessera_fx::{Graph, NodeId, NodeKind};
use tessera_kernel::{Interpreter, KernelError, NoEnvironment, Program, run_program};
use tessera_tensor::op::{BinaryOp, CompareOp, ScalarOp, UnaryOp, ViewOp};
use tessera_tensor::{DType, Op, Tensor, TensorMeta};

/// Runs `graph` op by op eagerly, as the graph interpreter does; the first eager error ends it.
pub fn try_eager(graph: &Graph, inputs: &[Tensor]) -> tessera_tensor::Result<Vec<Tensor>> {
    let mut values: HashMap<NodeId, Vec<Tensor>> = HashMap::new();
    let mut next = inputs.iter();
    for id in graph.nodes() {
        let node = graph.node(&id).unwrap();
        let args: Vec<Tensor> = graph
            .operands(&id)
            .unwrap()
            .iter()
            .map(|o| values[o][0].clone())
            .collect();
        let value = match &node.kind {
            NodeKind::Placeholder { .. } => vec![next.next().unwrap().clone()],
            NodeKind::CallFunction { op } => op.apply(&args.iter().collect::<Vec<_>>())?,
            NodeKind::GetItem { index } => {
                let o = graph.operands(&id).unwrap()[0];
                vec![values[&o][*index].clone()]
            }
            NodeKind::Output => return Ok(args),
            other => panic!("unexpected node {other:?}"),
        };
        values.insert(id, value);
    }
    unreachable!("the graph has an output")
}

/// [`try_eager`], which must succeed.
pub fn eager(graph: &Graph, inputs: &[Tensor]) -> Vec<Tensor> {
    try_eager(graph, inputs).unwrap()
}

/// A graph applying `op` to one placeholder per input (named `x0`, `x1`, ..).
pub fn op_graph(op: Op, inputs: &[Tensor]) -> Graph {
    op_graph_outputs(op, inputs, None)
}

/// [`op_graph`] whose outputs are the op's first `outputs` results (each its own output), or
/// its one result when `None`.
pub fn op_graph_outputs(op: Op, inputs: &[Tensor], outputs: Option<usize>) -> Graph {
    let mut g = Graph::new();
    let xs: Vec<_> = inputs
        .iter()
        .enumerate()
        .map(|(i, x)| g.placeholder(&format!("x{i}"), TensorMeta::new(x.shape(), x.dtype())))
        .collect();
    let refs: Vec<_> = xs.iter().collect();
    let y = g.call_function(op, &refs).unwrap();
    match outputs {
        None => g.output(&[&y]).unwrap(),
        Some(n) => {
            let items: Vec<_> = (0..n).map(|i| g.getitem(&y, i).unwrap()).collect();
            g.output(&items.iter().collect::<Vec<_>>()).unwrap()
        }
    };
    g
}

pub fn jit_run(program: &Program, inputs: &[Tensor]) -> Vec<Tensor> {
    let jit = JitProgram::compile(program).unwrap_or_else(|e| panic!("{e}\n{program}"));
    run_program(program, &NoEnvironment, &jit, inputs).unwrap()
}

/// `graph` lowered for the layouts of `inputs`.
pub fn lowered(graph: &Graph, inputs: &[Tensor]) -> Program {
    let layouts: Vec<_> = inputs.iter().map(|t| t.layout()).collect();
    tessera_kernel::lower(graph, &layouts).unwrap()
}

/// Runs `program` with the kernel-IR interpreter and with the JIT, and checks both against
/// `expected` within `tol`.
pub fn check_backends(program: &Program, inputs: &[Tensor], expected: &[Tensor], tol: f64) {
    let interpreted = run_program(
        program,
        &NoEnvironment,
        &tessera_kernel::Interpreter,
        inputs,
    )
    .unwrap();
    let jitted = jit_run(program, inputs);
    for ((e, i), j) in expected.iter().zip(&interpreted).zip(&jitted) {
        assert_within("interpreter", e, i, tol, program);
        assert_within("jit", e, j, tol, program);
    }
}

/// `graph` lowered to exactly one kernel, whose interpreted and compiled results agree with
/// eager execution within `tol`; the program, for further checks.
pub fn one_kernel_agreeing(graph: &Graph, inputs: &[Tensor], tol: f64) -> Program {
    let program = lowered(graph, inputs);
    assert_eq!(program.kernels().count(), 1, "{program}");
    check_backends(&program, inputs, &eager(graph, inputs), tol);
    program
}

/// `max_pool2d_with_indices(x)` of an `x`-shaped input and its backward from a `g`-shaped
/// gradient, returning the pooled values and the input gradient.
pub fn max_pool_graph(
    x: &[usize],
    g: &[usize],
    p: tessera_tensor::op::Pool2dParams,
    dtype: DType,
) -> Graph {
    use tessera_tensor::op::PoolOp;
    let mut graph = Graph::new();
    let xn = graph.placeholder("x", TensorMeta::new(x.to_vec(), dtype));
    let gn = graph.placeholder("grad", TensorMeta::new(g.to_vec(), dtype));
    let pool = graph
        .call_function(Op::Pool(PoolOp::MaxPool2d(p)), &[&xn])
        .unwrap();
    let values = graph.getitem(&pool, 0).unwrap();
    let indices = graph.getitem(&pool, 1).unwrap();
    let nd = x.len();
    let input_size = [x[nd - 2], x[nd - 1]];
    let dx = graph
        .call_function(
            Op::Pool(PoolOp::MaxPool2dBackward {
                input_size,
                window: None,
            }),
            &[&gn, &indices],
        )
        .unwrap();
    graph.output(&[&values, &dx]).unwrap();
    graph
}

/// `op` on `inputs` lowered with no fallback, its interpreted and compiled results equal to
/// eager execution within `tol`; the program.
pub fn lowered_agreeing(op: Op, inputs: &[Tensor], tol: f64) -> Program {
    let g = op_graph(op, inputs);
    let program = lowered(&g, inputs);
    assert!(program.fallbacks.is_empty(), "{program}");
    check_backends(&program, inputs, &eager(&g, inputs), tol);
    program
}

/// Both runners fail `op` on `inputs` with `IndexOutOfRange` for `index` in a dim of `size`,
/// and so does eager execution.
pub fn faults(op: Op, inputs: &[Tensor], index: i64, size: usize) {
    let g = op_graph(op, inputs);
    assert!(
        try_eager(&g, inputs).is_err(),
        "eager accepts index {index}"
    );
    let program = lowered(&g, inputs);
    assert!(program.fallbacks.is_empty(), "{program}");
    let jit = JitProgram::compile(&program).unwrap();
    let runs = [
        (
            "interpreter",
            run_program(&program, &NoEnvironment, &Interpreter, inputs),
        ),
        ("jit", run_program(&program, &NoEnvironment, &jit, inputs)),
    ];
    for (what, run) in runs {
        match run {
            Err(e @ KernelError::IndexOutOfRange { .. }) => {
                let KernelError::IndexOutOfRange {
                    index: i, size: s, ..
                } = &e
                else {
                    unreachable!()
                };
                assert_eq!((*i, *s), (index, size), "{what}: {e}");
                assert!(e.to_string().contains(&format!("index {index}")), "{e}");
            }
            other => panic!("{what}: expected IndexOutOfRange, got {other:?}\n{program}"),
        }
    }
}

/// Exact agreement up to a relative `1e-6` (elementwise kernels round as eager ones do).
pub fn assert_close(what: &str, expected: &Tensor, got: &Tensor, program: &Program) {
    assert_within(what, expected, got, 1e-6, program);
}

/// Agreement within `tol` relative to `max(|expected|, 1)`, NaN matching NaN.
pub fn assert_within(what: &str, expected: &Tensor, got: &Tensor, tol: f64, program: &Program) {
    assert_eq!(expected.shape(), got.shape(), "{what}: shape\n{program}");
    assert_eq!(expected.dtype(), got.dtype(), "{what}: dtype\n{program}");
    let (e, g) = (expected.to_vec_f64().unwrap(), got.to_vec_f64().unwrap());
    for (i, (a, b)) in e.iter().zip(&g).enumerate() {
        let same = (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= tol * a.abs().max(1.0);
        assert!(
            same,
            "{what}: element {i}: expected {a}, got {b}\n{program}"
        );
    }
}

/// A graph input and the (possibly non-contiguous) tensor given for it.
pub struct Builder {
    pub graph: Graph,
    pub inputs: Vec<Tensor>,
    pub dtype: DType,
    pub seed: u64,
    /// Whether new inputs of 2 or more dims are given transposed (non-contiguous).
    pub strided: bool,
}

impl Builder {
    /// An empty graph whose inputs are of `dtype`.
    pub fn new(dtype: DType, strided: bool) -> Builder {
        Builder {
            graph: Graph::new(),
            inputs: Vec::new(),
            dtype,
            seed: 0,
            strided,
        }
    }

    pub fn input(&mut self, shape: &[usize], strided: bool) -> NodeId {
        self.seed += 1;
        let numel: usize = shape.iter().product();
        let values: Vec<f64> = (0..numel)
            .map(|i| (((i as u64 * 7919 + self.seed * 104_729) % 997) as f64 / 997.0 - 0.45) * 4.0)
            .collect();
        // Converted before the transpose: a conversion packs its result, which would make a
        // "strided" f32 input packed after all.
        let t = if strided && shape.len() >= 2 {
            // The transpose of a packed tensor of the reversed shape: same values, strided.
            let reversed: Vec<usize> = shape.iter().rev().copied().collect();
            let dims: Vec<usize> = (0..shape.len()).rev().collect();
            Tensor::from_vec(values, &reversed)
                .unwrap()
                .to_dtype(self.dtype)
                .unwrap()
                .permute(&dims)
                .unwrap()
        } else {
            Tensor::from_vec(values, shape)
                .unwrap()
                .to_dtype(self.dtype)
                .unwrap()
        };
        let transposes =
            strided && !shape.contains(&0) && shape.iter().filter(|&&d| d > 1).count() >= 2;
        assert!(
            !transposes || !t.is_contiguous(),
            "a strided input came out packed: {:?}",
            t.layout()
        );
        let name = format!("x{}", self.inputs.len());
        self.inputs.push(t);
        self.graph
            .placeholder(&name, TensorMeta::new(shape.to_vec(), self.dtype))
    }

    pub fn call(&mut self, op: Op, args: &[&NodeId]) -> NodeId {
        self.graph.call_function(op, args).unwrap()
    }

    pub fn shape(&self, id: &NodeId) -> Vec<usize> {
        self.graph.node(id).unwrap().meta[0].shape.clone()
    }
}

/// One link of a random chain.
#[derive(Debug, Clone)]
pub enum Link {
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

pub fn unary_ops() -> Vec<UnaryOp> {
    UnaryOp::EVERY.to_vec()
}

pub fn binary_ops() -> Vec<BinaryOp> {
    BinaryOp::EVERY.to_vec()
}

pub fn link() -> impl Strategy<Value = Link> {
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

impl Builder {
    /// Applies one link to `x`.
    pub fn apply(&mut self, x: NodeId, l: &Link) -> NodeId {
        let s = self.shape(&x);
        match l {
            Link::Unary(u) => self.call(Op::Unary(*u), &[&x]),
            Link::Binary(op, keep, lead) => {
                let lead = (*lead).min(s.len());
                let other: Vec<usize> = s[lead..]
                    .iter()
                    .zip(keep.iter().cycle())
                    .map(|(&n, &k)| if k { n } else { 1 })
                    .collect();
                let y = self.input(&other, self.strided);
                self.call(Op::Binary(*op), &[&x, &y])
            }
            Link::Scalar(op, value, reversed) => self.call(
                Op::Scalar(ScalarOp {
                    op: *op,
                    value: *value,
                    reversed: *reversed,
                }),
                &[&x],
            ),
            Link::CompareWhere(c) => {
                let y = self.input(&s, self.strided);
                let cond = self.call(Op::Compare(*c), &[&x, &y]);
                self.call(Op::Where, &[&cond, &x, &y])
            }
            Link::Clamp(min, max) => self.call(
                Op::Clamp {
                    min: *min,
                    max: *max,
                },
                &[&x],
            ),
            Link::Transpose => {
                let dims: Vec<usize> = (0..s.len()).rev().collect();
                self.call(Op::View(ViewOp::Permute(dims)), &[&x])
            }
            Link::Narrow => match (0..s.len()).max_by_key(|&d| s[d]) {
                Some(dim) if s[dim] > 0 => self.call(
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
                let r = self.call(Op::View(ViewOp::Reshape(one)), &[&x]);
                let mut two = vec![2];
                two.extend(&s);
                self.call(Op::View(ViewOp::Expand(two)), &[&r])
            }
            Link::Flatten => self.call(Op::View(ViewOp::Reshape(vec![s.iter().product()])), &[&x]),
        }
    }
}

pub fn dims() -> impl Strategy<Value = Vec<usize>> {
    proptest::collection::vec(
        proptest::sample::select(vec![0usize, 1, 1, 2, 3, 5, 7, 9]),
        0..4,
    )
}

/// Insta settings that keep snapshots under `snapshots/` at the repository root.
pub fn snapshots() -> insta::Settings {
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path("../../../snapshots");
    settings.set_prepend_module_to_snapshot(false);
    settings
}

/// The kernel IR and CLIF of every kernel of `program`.
pub fn kernels_text(program: &Program) -> String {
    let jit = JitProgram::compile(program).unwrap();
    let mut text = program.to_string();
    for k in jit.kernels() {
        text.push_str(&format!("\n; CLIF of {}\n{}", k.name, k.clif));
    }
    text
}

/// Runs `graph` through the kernel-IR interpreter and the JIT and checks every output's bits
/// (every NaN as one) against eager execution; the program, for further checks.
pub fn assert_bit_identical(graph: &Graph, inputs: &[Tensor]) -> Program {
    let bits = tessera_testkit::exact_bits;
    let program = lowered(graph, inputs);
    let expected = eager(graph, inputs);
    let interpreted = run_program(
        &program,
        &NoEnvironment,
        &tessera_kernel::Interpreter,
        inputs,
    )
    .unwrap();
    let jitted = jit_run(&program, inputs);
    for (i, e) in expected.iter().enumerate() {
        assert_eq!(
            bits(e),
            bits(&interpreted[i]),
            "interpreter, output {i}\n{program}"
        );
        assert_eq!(bits(e), bits(&jitted[i]), "JIT, output {i}\n{program}");
    }
    program
}
