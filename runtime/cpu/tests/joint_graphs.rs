//! Training graphs compiled: the joint forward+backward graphs (`tessera_fx::autodiff`) of an
//! MLP with cross-entropy, the small CNN in training mode (convolution, batch norm with batch
//! statistics, ReLU, max pooling, global average pooling, linear, cross-entropy) and a
//! LayerNorm/GELU/softmax block lower with no fallback but the external GEMM and convolution
//! calls (cross-entropy's nll and its gradient included: checked gathers), and the kernel-IR
//! interpreter and the JIT give the graph interpreter's loss and gradients.

use crate::common;

use common::joint_env::Attributes;

use tessera_cpu::JitProgram;
use tessera_fx::autodiff::{JointGraph, joint_graph};
use tessera_fx::trace::{LeafPolicy, TracedGraph, trace_with};
use tessera_kernel::{Interpreter, Program, lower, run_program};
use tessera_nn::layers::{GELU, LayerNorm, Linear, ReLU};
use tessera_nn::models::SmallCnn;
use tessera_nn::{Call, Module, ModuleExt, Sequential};
use tessera_tensor::functional as F;
use tessera_tensor::{DType, Generator, Tensor, TensorMeta};

/// The GEMM and convolution ops that run as external calls by design.
const EXTERNAL_BY_DESIGN: &[&str] = &[
    "linear",
    "matmul",
    "conv2d",
    "conv2d_backward_input",
    "conv2d_backward_weight",
];

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn_with(shape, DType::F32, &mut Generator::new(seed)).unwrap()
}

/// Class targets `0, 1, ..` cycling over `classes`.
fn targets(n: usize, classes: usize) -> Tensor {
    let t: Vec<i64> = (0..n).map(|i| ((i * 7 + 3) % classes) as i64).collect();
    Tensor::from_vec(t, &[n]).unwrap()
}

/// The joint graph of `loss(model(x), target)` with respect to every parameter and `x`.
fn joint_of(
    model: &dyn Module,
    inputs: &[(&str, TensorMeta)],
    loss: impl FnOnce(&[Tensor]) -> tessera_nn::Result<Vec<Tensor>>,
) -> JointGraph {
    let traced: TracedGraph = trace_with(model, inputs, LeafPolicy::none(), loss).unwrap();
    let names: Vec<String> = model
        .named_parameters()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    let mut wrt: Vec<&str> = names.iter().map(String::as_str).collect();
    wrt.push("x");
    joint_graph(&traced, &wrt).unwrap()
}

/// The ops that fell back, but for the external GEMM and convolution calls.
fn unexpected_fallbacks(program: &Program) -> Vec<String> {
    program
        .fallbacks
        .iter()
        .filter(|f| !EXTERNAL_BY_DESIGN.contains(&f.op.as_str()))
        .map(|f| format!("%{} = {}: {}", f.node, f.op, f.reason))
        .collect()
}

/// Lowers the joint graph, checks its fallbacks, and checks the kernel-IR interpreter's and
/// the JIT's outputs against the graph interpreter's within `tol` (relative to `max(|e|, 1)`).
fn check(model: &dyn Module, joint: &JointGraph, inputs: &[Tensor], tol: f64) {
    let expected = joint.traced.interpret(model, inputs).unwrap();
    let layouts: Vec<_> = inputs.iter().map(Tensor::layout).collect();
    let program = lower(joint.graph(), &layouts).unwrap();
    let unexpected = unexpected_fallbacks(&program);
    assert!(
        unexpected.is_empty(),
        "fallbacks:\n{}\n{program}",
        unexpected.join("\n")
    );
    let env = Attributes { root: model, joint };
    let interpreted = run_program(&program, &env, &Interpreter, inputs).unwrap();
    let jit = JitProgram::compile(&program).unwrap();
    let jitted = run_program(&program, &env, &jit, inputs).unwrap();
    let names = (0..joint.forward_outputs)
        .map(|_| "loss".to_string())
        .chain(
            joint
                .gradients_of
                .iter()
                .map(|g| format!("gradient of {g}")),
        );
    for (((name, e), i), j) in names.zip(&expected).zip(&interpreted).zip(&jitted) {
        common::assert_within(&format!("{name} (interpreter)"), e, i, tol, &program);
        common::assert_within(&format!("{name} (JIT)"), e, j, tol, &program);
    }
}

#[test]
fn mlp_cross_entropy_joint_graph_compiles_without_fallbacks() {
    let model = Sequential::new()
        .add(Linear::new(12, 16).unwrap())
        .add(ReLU::new())
        .add(Linear::new(16, 5).unwrap());
    let inputs = [randn(&[8, 12], 1), targets(8, 5)];
    let joint = joint_of(
        &model,
        &[("x", inputs[0].meta()), ("target", inputs[1].meta())],
        |t| {
            let logits = model.call(t[0].clone())?;
            Ok(vec![F::cross_entropy(&logits, &t[1], Default::default())?])
        },
    );
    check(&model, &joint, &inputs, 1e-5);
}

#[test]
fn small_cnn_training_joint_graph_compiles_without_fallbacks() {
    let model = SmallCnn::new().unwrap();
    model.train(true);
    let inputs = [randn(&[4, 3, 8, 8], 2), targets(4, 10)];
    let joint = joint_of(
        &model,
        &[("x", inputs[0].meta()), ("target", inputs[1].meta())],
        |t| {
            let logits = model.call(t[0].clone())?;
            Ok(vec![F::cross_entropy(&logits, &t[1], Default::default())?])
        },
    );
    check(&model, &joint, &inputs, 1e-4);
}

#[test]
fn layer_norm_gelu_softmax_joint_graph_compiles_without_fallbacks() {
    let model = Sequential::new()
        .add(LayerNorm::new(&[8]).unwrap())
        .add(Linear::new(8, 8).unwrap())
        .add(GELU::new());
    let inputs = [randn(&[2, 3, 8], 3)];
    let weights = randn(&[2, 3, 8], 4);
    let joint = joint_of(&model, &[("x", inputs[0].meta())], |t| {
        let probs = model.call(t[0].clone())?.softmax(-1)?;
        Ok(vec![probs.mul(&weights)?.sum_all()?])
    });
    check(&model, &joint, &inputs, 1e-5);
}
