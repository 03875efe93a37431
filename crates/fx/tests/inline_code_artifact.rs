//! Inlining module calls into ops, the `forward` source a graph renders as, and the saved
//! artifact that runs without the model's Rust type.

use crate::common;

use common::{assert_eager_gives, assert_interprets_as_eager, small_cnn, snapshots};
use tessera_fx::NodeKind;
use tessera_fx::artifact::{load, run_standalone, save};
use tessera_fx::trace::{LeafPolicy, TracedGraph, inline, trace};
use tessera_nn::models::SmallCnn;
use tessera_tensor::{DType, Tensor, TensorMeta};

/// `cnn` traced for a batch of `batch` 16x16 RGB images.
fn traced_cnn(cnn: &SmallCnn, batch: usize, policy: LeafPolicy) -> TracedGraph {
    trace(cnn, TensorMeta::new([batch, 3, 16, 16], DType::F32), policy).unwrap()
}

#[test]
fn inlining_every_module_call_gives_an_op_graph_that_computes_the_same() {
    let cnn = small_cnn();
    let mut traced = traced_cnn(&cnn, 2, LeafPolicy::default());
    assert_eq!(inline(&mut traced, &cnn, |_| true).unwrap(), 10);
    traced.graph.verify().unwrap();
    assert!(traced.graph.nodes().all(|id| !matches!(
        traced.graph.node(&id).unwrap().kind,
        NodeKind::CallModule { .. }
    )));
    snapshots().bind(|| insta::assert_snapshot!("fx_inlined_small_cnn", traced.graph.to_string()));
    let x = Tensor::randn(&[2, 3, 16, 16], DType::F32).unwrap();
    assert_interprets_as_eager(&traced, &cnn, x);
}

#[test]
fn inlining_only_chosen_modules() {
    let cnn = small_cnn();
    let mut traced = traced_cnn(&cnn, 1, LeafPolicy::default());
    assert_eq!(
        inline(&mut traced, &cnn, |t| t.starts_with("bn")).unwrap(),
        2
    );
    let text = traced.graph.to_string();
    assert!(
        text.contains("call_module[conv1:")
            && text.contains("call_function[batch_norm]")
            && !text.contains("call_module[bn1"),
        "{text}"
    );
}

#[test]
fn code_renders_a_forward_function() {
    let cnn = small_cnn();
    let traced = traced_cnn(&cnn, 1, LeafPolicy::default());
    snapshots().bind(|| insta::assert_snapshot!("fx_small_cnn_code", traced.graph.code().unwrap()));
}

#[test]
fn a_saved_op_graph_runs_without_the_model() {
    let cnn = small_cnn();
    let traced = traced_cnn(&cnn, 2, LeafPolicy::none());
    let dir = tempfile::tempdir().unwrap();
    save(&traced, dir.path()).unwrap();
    let loaded = load(dir.path()).unwrap();
    assert_eq!(loaded.graph.to_string(), traced.graph.to_string());
    let x = Tensor::randn(&[2, 3, 16, 16], DType::F32).unwrap();
    let out = run_standalone(&loaded, std::slice::from_ref(&x))
        .unwrap()
        .remove(0);
    assert_eager_gives(&cnn, x, &out);
    // A module-level graph needs its modules: running it alone names the node that fails.
    let module_level = traced_cnn(&cnn, 2, LeafPolicy::default());
    let err = run_standalone(
        &module_level,
        &[Tensor::zeros(&[2, 3, 16, 16], DType::F32).unwrap()],
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("while executing %conv1 = call_module[conv1](%x)"),
        "{err}"
    );
    assert!(load(dir.path().join("missing")).is_err());
}
