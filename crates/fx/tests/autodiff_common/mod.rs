//! Helpers of the autodiff tests: loading a conformance case's weights, tracing a loss at op
//! level, the parameters a traced graph reads, and comparing the joint graph's gradients with
//! eager autograd's on the same module and inputs. (Included by path from the passes' and the
//! CPU backend's tests too.)
#![allow(dead_code)]

use tessera_fx::NodeKind;
use tessera_fx::autodiff::{JointGraph, joint_graph};
use tessera_fx::trace::{LeafPolicy, TracedGraph, trace_with};
use tessera_nn::{Call, Layer, Module, ModuleExt, load_pt_state_dict};
use tessera_tensor::functional as F;
use tessera_tensor::{DType, Tensor, TensorMeta};
use tessera_testkit::{Case, assert_close, conformance_dir};

/// Loads the case's PyTorch weights into `model` (when the case has them).
pub fn load_case_weights(case: &str, model: &dyn Module) {
    let path = conformance_dir().join(case).join("state_dict.pt");
    if path.exists() {
        model
            .load_state_dict(&load_pt_state_dict(path).unwrap(), true, false)
            .unwrap();
    }
}

/// The parameters the graph reads, by the get_attr target it reads them under.
pub fn parameters_read(traced: &TracedGraph, root: &dyn Module) -> Vec<String> {
    let mut names: Vec<String> = traced
        .graph
        .nodes()
        .filter_map(|id| match &traced.graph.node(&id).ok()?.kind {
            NodeKind::GetAttr { target } if root.get_parameter(target).is_ok() => {
                Some(target.clone())
            }
            _ => None,
        })
        .collect();
    names.dedup();
    names
}

/// `cross_entropy` of logits flattened to `[rows, classes]` against flattened targets.
pub fn flat_cross_entropy(logits: &Tensor, target: &Tensor) -> tessera_tensor::Result<Tensor> {
    let classes = *logits.shape().last().unwrap();
    let logits = logits.reshape(&[logits.numel() / classes, classes])?;
    let target = target.reshape(&[target.numel()])?;
    F::cross_entropy(&logits, &target, Default::default())
}

/// The loss of the conformance joint-graph tests: cross entropy of the flattened output
/// against the target when there is one, else the output's sum.
pub fn case_loss(out: &Tensor, target: Option<&Tensor>) -> tessera_tensor::Result<Tensor> {
    match target {
        Some(target) => flat_cross_entropy(out, target),
        None => out.sum_all(),
    }
}

/// A conformance case's model traced with [`case_loss`]: the graph, its inputs (`x`, then the
/// case's `target` when it has one) and the values to differentiate against (every parameter
/// the graph reads, and `x` when it is float).
pub struct TracedCase {
    pub traced: TracedGraph,
    pub inputs: Vec<Tensor>,
    pub input_names: Vec<&'static str>,
    pub wrt: Vec<String>,
}

/// Traces `model` on `input` (f64 inputs taken as f32) with [`case_loss`] against the case's
/// `target` when `with_target`.
pub fn trace_case<M: Layer>(
    case: &Case,
    model: &M,
    input: Tensor,
    with_target: bool,
) -> TracedCase {
    let input = if input.dtype() == DType::F64 {
        input.to_dtype(DType::F32).unwrap()
    } else {
        input
    };
    let mut names = vec![("x", input.meta())];
    let mut inputs = vec![input.clone()];
    if with_target {
        let target = case.io("target");
        names.push(("target", target.meta()));
        inputs.push(target);
    }
    let traced = traced_loss(model, &names, |t| {
        let out = model.call(t[0].clone())?;
        Ok(vec![case_loss(&out, t.get(1))?])
    });
    let mut wrt = parameters_read(&traced, model);
    if input.dtype().is_float() {
        wrt.push("x".into());
    }
    TracedCase {
        traced,
        inputs,
        input_names: names.iter().map(|(n, _)| *n).collect(),
        wrt,
    }
}

/// Traces `loss(inputs)` at op level (every module call inlined), inputs named as given.
pub fn traced_loss(
    module: &dyn Module,
    inputs: &[(&str, TensorMeta)],
    loss: impl FnOnce(&[Tensor]) -> tessera_nn::Result<Vec<Tensor>>,
) -> TracedGraph {
    trace_with(module, inputs, LeafPolicy::none(), loss).unwrap()
}

/// Runs the joint graph of `traced` with respect to `wrt` on `inputs` (and `tangents` for its
/// non-scalar outputs) and returns it and its outputs: forward outputs, then gradients.
pub fn run_joint(
    root: &dyn Module,
    traced: &TracedGraph,
    wrt: &[&str],
    inputs: &[Tensor],
) -> (JointGraph, Vec<Tensor>) {
    let joint = joint_graph(traced, wrt).unwrap();
    let detached: Vec<Tensor> = inputs.iter().map(Tensor::detach).collect();
    let outputs = joint.traced.interpret(root, &detached).unwrap();
    (joint, outputs)
}

/// Asserts that the joint graph of `traced` with respect to `wrt` gives the forward outputs
/// and the gradients eager autograd gives when `eager` runs the same computation on `inputs`
/// (`wrt` names parameters of `root` or the traced inputs, named `input_names`).
pub fn assert_joint_matches_eager(
    root: &dyn Module,
    traced: &TracedGraph,
    wrt: &[&str],
    input_names: &[&str],
    inputs: &[Tensor],
    eager: impl FnOnce(&[Tensor]) -> Tensor,
    tolerance: (f64, f64),
) {
    let (joint, outputs) = run_joint(root, traced, wrt, inputs);
    let leaves: Vec<Tensor> = inputs
        .iter()
        .zip(input_names)
        .map(|(x, name)| {
            let x = x.detach();
            if wrt.contains(name) {
                x.requires_grad_(true).unwrap()
            } else {
                x
            }
        })
        .collect();
    for (_, p) in root.named_parameters() {
        p.tensor().set_grad(None);
    }
    let loss = eager(&leaves);
    let (rtol, atol) = tolerance;
    assert_close(&outputs[0], &loss, rtol, atol, "forward output");
    loss.backward().unwrap();
    assert_eq!(outputs.len(), joint.forward_outputs + wrt.len());
    for (name, grad) in wrt.iter().zip(&outputs[joint.forward_outputs..]) {
        let expected = match input_names.iter().position(|n| n == name) {
            Some(i) => leaves[i].grad(),
            None => root.get_parameter(name).unwrap().tensor().grad(),
        }
        .unwrap_or_else(|| Tensor::zeros_like(grad).unwrap());
        assert_close(grad, &expected, rtol, atol, &format!("gradient of {name}"));
    }
}
