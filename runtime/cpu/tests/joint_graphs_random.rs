//! Random op-level graphs differentiated as graphs: chains of elementwise ops with broadcast
//! operands, reductions, softmax, layout changes and matrix products, over random shapes with
//! size-1 dims and non-contiguous inputs, summed into a loss; the joint forward+backward graph
//! (`tessera_fx::autodiff`) run by the graph interpreter, the kernel-IR interpreter and the JIT
//! gives eager autograd's loss and gradients (f64 to 1e-9; f32 to 1e-4, or 16 times eager f32's
//! own error against f64 on an ill-conditioned chain).

use crate::common;

use common::{Builder, assert_within};
use proptest::prelude::*;
use tessera_cpu::JitProgram;
use tessera_fx::autodiff::joint_graph;
use tessera_fx::trace::TracedGraph;
use tessera_fx::{Graph, NodeId};
use tessera_kernel::{BoxError, Environment, Interpreter, lower, run_program};
use tessera_nn::layers::Identity;
use tessera_tensor::op::{BinaryOp, ReduceKind, ReduceOp, UnaryOp, ViewOp};
use tessera_tensor::{DType, Op, Tensor};

/// One link of a chain: what it does to the value so far.
#[derive(Debug, Clone)]
enum Link {
    Unary(UnaryOp),
    /// A binary op with a new input broadcast to the value's shape (`keep[d]` false: size 1;
    /// `lead` leading dims dropped).
    Binary(BinaryOp, Vec<bool>, usize),
    /// `x * x`: one value read twice.
    Square,
    /// A sum or mean over one dim (`dim` modulo the rank), kept or dropped.
    Reduce {
        dim: usize,
        mean: bool,
        keep: bool,
    },
    Softmax {
        log: bool,
    },
    /// The last two dims swapped (a non-contiguous view).
    Transpose,
    /// A product with a new `[n, k]` input (`n` the last dim).
    Matmul {
        k: usize,
    },
    /// The last two dims merged.
    Flatten,
}

fn link() -> impl Strategy<Value = Link> {
    let unary = prop::sample::select(vec![
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::Sin,
        UnaryOp::Neg,
        UnaryOp::Silu,
        UnaryOp::Relu,
        UnaryOp::Exp,
        UnaryOp::Gelu { tanh: false },
    ]);
    let binary = prop::sample::select(vec![
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Maximum,
    ]);
    prop_oneof![
        3 => unary.prop_map(Link::Unary),
        3 => (binary, prop::collection::vec(any::<bool>(), 4), 0usize..3)
            .prop_map(|(op, keep, lead)| Link::Binary(op, keep, lead)),
        1 => Just(Link::Square),
        2 => (0usize..3, any::<bool>(), any::<bool>())
            .prop_map(|(dim, mean, keep)| Link::Reduce { dim, mean, keep }),
        1 => any::<bool>().prop_map(|log| Link::Softmax { log }),
        1 => Just(Link::Transpose),
        2 => prop::sample::select(vec![1usize, 2, 3, 5]).prop_map(|k| Link::Matmul { k }),
        1 => Just(Link::Flatten),
    ]
}

/// Appends `link` to the chain ending at `x`; links that do not fit the value's rank leave it.
fn apply(b: &mut Builder, x: NodeId, link: &Link) -> NodeId {
    let s = b.shape(&x);
    let rank = s.len();
    match link {
        Link::Unary(u) => b.call(Op::Unary(*u), &[&x]),
        Link::Binary(op, keep, lead) => {
            let lead = (*lead).min(rank);
            let other: Vec<usize> = s[lead..]
                .iter()
                .zip(keep.iter().cycle())
                .map(|(&n, &k)| if k { n } else { 1 })
                .collect();
            let strided = b.strided;
            let y = b.input(&other, strided);
            b.call(Op::Binary(*op), &[&x, &y])
        }
        Link::Square => b.call(Op::Binary(BinaryOp::Mul), &[&x, &x]),
        Link::Reduce { .. } if rank == 0 => x,
        Link::Reduce { dim, mean, keep } => {
            let kind = if *mean {
                ReduceKind::Mean
            } else {
                ReduceKind::Sum
            };
            let op = ReduceOp {
                kind,
                dims: vec![dim % rank],
                keepdim: *keep || rank == 1,
            };
            b.call(Op::Reduce(op), &[&x])
        }
        Link::Softmax { .. } if rank == 0 => x,
        Link::Softmax { log } => b.call(
            Op::Softmax {
                dim: rank - 1,
                log: *log,
            },
            &[&x],
        ),
        Link::Transpose if rank < 2 => x,
        Link::Transpose => {
            let mut dims: Vec<usize> = (0..rank).collect();
            dims.swap(rank - 2, rank - 1);
            b.call(Op::View(ViewOp::Permute(dims)), &[&x])
        }
        Link::Matmul { .. } if rank == 0 => x,
        Link::Matmul { k } => {
            let strided = b.strided;
            let w = b.input(&[s[rank - 1], *k], strided);
            b.call(Op::Matmul, &[&x, &w])
        }
        Link::Flatten if rank < 2 => x,
        Link::Flatten => {
            let mut merged = s[..rank - 2].to_vec();
            merged.push(s[rank - 2] * s[rank - 1]);
            b.call(Op::View(ViewOp::Reshape(merged)), &[&x])
        }
    }
}

/// The forward graph of `chain` on an input of `shape`, ending in the sum of the chain's
/// value times itself (so the loss is not linear in it), and the inputs it is run on.
fn forward(chain: &[Link], shape: &[usize], dtype: DType, strided: bool) -> (Graph, Vec<Tensor>) {
    let mut b = Builder::new(dtype, strided);
    let mut x = b.input(shape, strided);
    for link in chain {
        x = apply(&mut b, x, link);
    }
    let squared = b.call(Op::Binary(BinaryOp::Mul), &[&x, &x]);
    let rank = b.shape(&squared).len();
    let loss = b.call(
        Op::Reduce(ReduceOp {
            kind: ReduceKind::Sum,
            dims: (0..rank).collect(),
            keepdim: false,
        }),
        &[&squared],
    );
    b.graph.output(&[&loss]).unwrap();
    (b.graph, b.inputs)
}

/// The joint graph's constants (the backward's seed), by `get_attr` target.
struct Constants<'a>(&'a TracedGraph);

impl Environment for Constants<'_> {
    fn attribute(&self, target: &str) -> Result<Tensor, BoxError> {
        self.0
            .attributes
            .get(target)
            .cloned()
            .ok_or_else(|| format!("no attribute {target}").into())
    }

    fn call_module(&self, target: &str, _args: Vec<Tensor>) -> Result<Vec<Tensor>, BoxError> {
        Err(format!("no module {target}").into())
    }
}

/// Eager autograd on the same graph: the loss and the gradient of every input.
fn eager_gradients(graph: &Graph, inputs: &[Tensor]) -> Vec<Tensor> {
    let leaves: Vec<Tensor> = inputs
        .iter()
        .map(|t| t.detach().requires_grad_(true).unwrap())
        .collect();
    let loss = common::eager(graph, &leaves).remove(0);
    loss.backward().unwrap();
    std::iter::once(loss.detach())
        .chain(
            leaves
                .iter()
                .map(|l| l.grad().unwrap_or_else(|| Tensor::zeros_like(l).unwrap())),
        )
        .collect()
}

fn check(chain: &[Link], shape: &[usize], dtype: DType, strided: bool) {
    let (graph, inputs) = forward(chain, shape, dtype, strided);
    let expected = eager_gradients(&graph, &inputs);
    let tolerances = tolerances(chain, shape, dtype, strided, &expected);
    let names: Vec<String> = (0..inputs.len()).map(|i| format!("x{i}")).collect();
    let wrt: Vec<&str> = names.iter().map(String::as_str).collect();
    let traced = TracedGraph::from(graph);
    let joint = joint_graph(&traced, &wrt).unwrap();
    let interpreted = joint.traced.interpret(&Identity::new(), &inputs).unwrap();
    let layouts: Vec<_> = inputs.iter().map(Tensor::layout).collect();
    let program = lower(joint.graph(), &layouts).unwrap();
    let env = Constants(&joint.traced);
    let kernel_ir = run_program(&program, &env, &Interpreter, &inputs).unwrap();
    let jit = JitProgram::compile(&program).unwrap_or_else(|e| panic!("{e}\n{program}"));
    let jitted = run_program(&program, &env, &jit, &inputs).unwrap();
    assert_eq!(interpreted.len(), expected.len(), "{}", joint.graph());
    let what =
        std::iter::once("loss".to_string()).chain(wrt.iter().map(|n| format!("d loss/d {n}")));
    for (i, name) in what.enumerate() {
        let (e, tol) = (&expected[i], tolerances[i]);
        assert_within(
            &format!("{name} (graph interpreter)"),
            e,
            &interpreted[i],
            tol,
            &program,
        );
        assert_within(
            &format!("{name} (kernel-IR interpreter)"),
            e,
            &kernel_ir[i],
            tol,
            &program,
        );
        assert_within(&format!("{name} (JIT)"), e, &jitted[i], tol, &program);
    }
}

/// The tolerance of each output: 1e-9 in f64; in f32 1e-4, or 16 times eager f32's own error
/// against eager f64 where that is larger. A chain can be ill-conditioned (`sin(exp(x))` for
/// `exp(x)` in the hundreds turns one ulp of `x` into a thousandth of the gradient), and then
/// any two f32 implementations differ by as much as f32 differs from the exact result.
fn tolerances(
    chain: &[Link],
    shape: &[usize],
    dtype: DType,
    strided: bool,
    expected: &[Tensor],
) -> Vec<f64> {
    if dtype == DType::F64 {
        return vec![1e-9; expected.len()];
    }
    let (graph, inputs) = forward(chain, shape, DType::F64, strided);
    let exact = eager_gradients(&graph, &inputs);
    expected
        .iter()
        .zip(&exact)
        .map(|(e, x)| {
            let (e, x) = (e.to_vec_f64().unwrap(), x.to_vec_f64().unwrap());
            let own_error = e
                .iter()
                .zip(&x)
                .filter(|(a, b)| a.is_finite() && b.is_finite())
                .map(|(a, b)| (a - b).abs() / b.abs().max(1.0))
                .fold(0.0, f64::max);
            (16.0 * own_error).max(1e-4)
        })
        .collect()
}

fn shape() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(prop::sample::select(vec![1usize, 1, 2, 3, 4, 6]), 1..4)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_graphs_differentiate_as_eager_in_f64(
        chain in prop::collection::vec(link(), 1..7),
        shape in shape(),
        strided in any::<bool>(),
    ) {
        check(&chain, &shape, DType::F64, strided);
    }

    #[test]
    fn random_graphs_differentiate_as_eager_in_f32(
        chain in prop::collection::vec(link(), 1..7),
        shape in shape(),
        strided in any::<bool>(),
    ) {
        check(&chain, &shape, DType::F32, strided);
    }
}

#[test]
fn a_broadcast_product_chain_on_transposed_inputs_differentiates_as_eager() {
    let chain = [
        Link::Binary(BinaryOp::Mul, vec![false, true, true], 0),
        Link::Matmul { k: 3 },
        Link::Unary(UnaryOp::Tanh),
        Link::Reduce {
            dim: 0,
            mean: true,
            keep: false,
        },
        Link::Softmax { log: true },
    ];
    check(&chain, &[2, 4, 5], DType::F64, true);
    check(&chain, &[2, 4, 5], DType::F32, true);
}
