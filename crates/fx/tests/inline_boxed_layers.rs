//! Inlining through boxed and shared modules: a graph traced from an `Arc<Box<dyn Layer>>`
//! holding a `Sequential` names its leaves by their paths under the `Sequential` (they were
//! named `Sequential.0`, which no lookup from the root finds, so compiling failed to inline
//! them), and inlines every leaf, as compiling does.

use std::sync::Arc;
use tessera_fx::trace::{LeafPolicy, TracedGraph, inline, trace};
use tessera_fx::{GraphModule, NodeKind};
use tessera_nn::{Call, Layer, Linear, Module, ReLU, Sequential};
use tessera_tensor::{DType, Tensor, TensorMeta};

#[test]
fn a_sequential_behind_arc_box_dyn_layer_inlines_every_leaf() {
    let seq = Sequential::new()
        .add(Linear::new(4, 3).unwrap())
        .add(ReLU::default())
        .add(Linear::new(3, 2).unwrap());
    let model: Arc<Box<dyn Layer>> = Arc::new(Box::new(seq));
    let traced = trace(
        &*model,
        TensorMeta::new([5, 4], DType::F32),
        LeafPolicy::default(),
    )
    .unwrap();
    // The leaves are named by their paths under the Sequential the box holds, as without it.
    let targets: Vec<String> = traced
        .graph
        .nodes()
        .filter_map(|id| match &traced.graph.node(&id).ok()?.kind {
            NodeKind::CallModule { target, .. } => Some(target.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(targets, ["0", "1", "2"], "{}", traced.graph);
    let gm = GraphModule::new(model.clone(), traced);
    let mut traced = TracedGraph {
        graph: gm.graph.clone(),
        attributes: Default::default(),
    };
    let count = inline(&mut traced, gm.as_module(), |_| true).unwrap();
    assert_eq!(count, 3, "{}", traced.graph);
    assert!(
        traced.graph.nodes().all(|id| !matches!(
            traced.graph.node(&id).unwrap().kind,
            NodeKind::CallModule { .. }
        )),
        "{}",
        traced.graph
    );
    // The graph module calls the same module: its result is the model's.
    let x = Tensor::randn(&[5, 4], DType::F32).unwrap();
    let want = model.call(x.clone()).unwrap();
    let got = gm.call(x).unwrap();
    assert_eq!(got.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
}
