//! Fixtures shared by the pass tests: snapshot settings, wrapping graphs as modules, running
//! a pass with its before/after text, and comparing interpreter results.
#![allow(dead_code)]

use std::sync::Arc;
use tessera_fx::trace::{LeafPolicy, trace};
use tessera_fx::{Graph, GraphModule};
use tessera_nn::models::SmallCnn;
use tessera_nn::{Forward, Layer, ModuleExt, load_pt_state_dict};
use tessera_passes::{Changed, Pass, PassManager};
use tessera_tensor::op::DropoutOp;
use tessera_tensor::{DType, Op, Tensor, TensorMeta};
use tessera_testkit::assert_close;
pub use tessera_testkit::{Case, conformance_dir};

#[allow(unused_imports)]
pub use tessera_testkit::{f32s, snapshots};

/// A hand-built graph as a module; its root has no state, so it may only read constants.
pub fn module_of(graph: Graph) -> GraphModule {
    GraphModule::from_graph(graph)
}

/// A graph of one `op` applied to the f32 input `x` of `shape`, its result the output.
pub fn one_op_graph(op: Op, shape: &[usize]) -> Graph {
    let mut g = Graph::new();
    let x = g.placeholder("x", f32s(shape));
    let y = g.call_function(op, &[&x]).unwrap();
    g.output(&[&y]).unwrap();
    g
}

/// Dropout in training mode: random, so no pass may erase or merge it.
pub fn training_dropout() -> Op {
    Op::Dropout(DropoutOp {
        p: 0.5,
        training: true,
    })
}

/// `model` traced for `input` with `policy`, as a module owning it.
pub fn traced<M: Layer + 'static>(
    model: Arc<M>,
    input: TensorMeta,
    policy: LeafPolicy,
) -> GraphModule {
    let graph = trace(&*model, input, policy).unwrap();
    GraphModule::new(model, graph)
}

/// The conformance CNN with its PyTorch weights and running statistics, in eval mode.
pub fn conformance_cnn() -> Arc<SmallCnn> {
    let model = Arc::new(SmallCnn::new().unwrap());
    let path = conformance_dir().join("d_cnn_eval").join("state_dict.pt");
    model
        .load_state_dict(&load_pt_state_dict(path).unwrap(), true, false)
        .unwrap();
    model.eval();
    model
}

/// The graph's outputs for `inputs`.
pub fn outputs(gm: &GraphModule, inputs: &[Tensor]) -> Vec<Tensor> {
    gm.forward(inputs.to_vec()).unwrap()
}

/// Runs `pass` alone (verified by the manager) and returns whether it changed the graph and
/// the printed graph before and after.
pub fn run_pass(pass: Box<dyn Pass>, gm: &mut GraphModule) -> (Changed, String) {
    let before = gm.graph.to_string();
    let mut pm = PassManager::new();
    pm.verify = true;
    pm.add(pass);
    let report = pm.run(gm).unwrap();
    let after = gm.graph.to_string();
    (
        report.timings[0].changed,
        format!("before:\n{before}\nafter:\n{after}"),
    )
}

/// Runs `pass` on `gm` and asserts that it changed the graph but not its outputs for
/// `inputs`; the printed graph before and after is the snapshot `snapshot`.
pub fn assert_pass_rewrites(
    pass: Box<dyn Pass>,
    gm: &mut GraphModule,
    inputs: &[Tensor],
    snapshot: &str,
) {
    let expected = outputs(gm, inputs);
    let (changed, text) = run_pass(pass, gm);
    assert_eq!(changed, Changed::Yes);
    snapshots().bind(|| insta::assert_snapshot!(snapshot, text));
    assert_same(&outputs(gm, inputs), &expected, snapshot);
}

/// Asserts that the interpreter gives the same outputs as `expected` (within f32 rounding).
pub fn assert_same(actual: &[Tensor], expected: &[Tensor], what: &str) {
    assert_eq!(actual.len(), expected.len(), "{what}: output count");
    for (a, e) in actual.iter().zip(expected) {
        assert_close(a, e, 1e-5, 1e-6, what);
    }
}

/// A random f32 tensor (standard normal, from `seed`).
pub fn random(shape: &[usize], seed: u64) -> Tensor {
    tessera_testkit::leaf(shape, seed)
        .detach()
        .to_dtype(DType::F32)
        .unwrap()
}
