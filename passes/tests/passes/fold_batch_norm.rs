//! Batch norm folding: the conformance CNN's folded weights by formula (module and op level,
//! PyTorch's outputs kept), a conv shared by two calls and a conv output with two users, the
//! linear and transposed-conv pairs, f64, and the training-mode refusal.

use crate::common::{
    Case, assert_same, conformance_cnn, f32s, random, run_pass, snapshots, traced,
};
use std::sync::Arc;
use tessera_fx::trace::{LeafPolicy, TracedGraph};
use tessera_fx::{Graph, GraphModule, NodeId};
use tessera_nn::layers::{
    BatchNorm1d, BatchNorm2d, Conv2d, ConvTranspose2d, ConvTranspose2dOptions, Linear,
};
use tessera_nn::models::SmallCnn;
use tessera_nn::{Call, Forward, Module, ModuleExt, Sequential, repr};
use tessera_passes::{Changed, FoldBatchNorm, PassError};
use tessera_tensor::op::BinaryOp;
use tessera_tensor::{DType, Op, Tensor, TensorMeta, no_grad};

/// The conformance CNN case, its model, and the model traced for the case's input.
fn traced_conformance_cnn(policy: LeafPolicy) -> (Case, Arc<SmallCnn>, GraphModule) {
    let case = Case::load("d_cnn_eval");
    let model = conformance_cnn();
    let gm = traced(model.clone(), case.io("input").meta(), policy);
    (case, model, gm)
}

fn values(t: &Tensor) -> Vec<f64> {
    t.detach().to_vec_f64().unwrap()
}

/// `W * gamma / sqrt(var + eps)` and `(b - mean) * gamma / sqrt(var + eps) + beta` for the
/// conv `conv` and batch norm `bn` of the case, written out per output channel.
fn expected_fold(case: &Case, conv: &str, bn: &str) -> (Vec<f64>, Vec<f64>) {
    let w = values(&case.weight(&format!("{conv}.weight")));
    let b = values(&case.weight(&format!("{conv}.bias")));
    let read = |k: &str| values(&case.weight(&format!("{bn}.{k}")));
    let (gamma, beta, mean, var) = (
        read("weight"),
        read("bias"),
        read("running_mean"),
        read("running_var"),
    );
    let per_channel = w.len() / b.len();
    let scale: Vec<f64> = (0..b.len())
        .map(|c| gamma[c] / (var[c] + 1e-5).sqrt())
        .collect();
    let weight = w
        .iter()
        .enumerate()
        .map(|(i, x)| x * scale[i / per_channel])
        .collect();
    let bias = (0..b.len())
        .map(|c| (b[c] - mean[c]) * scale[c] + beta[c])
        .collect();
    (weight, bias)
}

fn assert_values(actual: &Tensor, expected: &[f64], what: &str) {
    let actual = values(actual);
    assert_eq!(actual.len(), expected.len(), "{what}");
    for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
        assert!(
            (a - e).abs() <= 1e-6 + 1e-5 * e.abs(),
            "{what}[{i}]: {a} vs {e}"
        );
    }
}

#[test]
fn conformance_cnn_module_level_folds_by_the_formula_and_keeps_pytorch_outputs() {
    let (case, model, mut gm) = traced_conformance_cnn(LeafPolicy::default());
    let (changed, text) = run_pass(Box::new(FoldBatchNorm), &mut gm);
    assert_eq!(changed, Changed::Yes);
    snapshots().bind(|| insta::assert_snapshot!("fold_batch_norm_cnn_module_level", text));

    for (conv, bn) in [("conv1", "bn1"), ("conv2", "bn2")] {
        let (weight, bias) = expected_fold(&case, conv, bn);
        let fused = &gm.owned_modules()[&format!("{conv}_{bn}")];
        assert!(!fused.is_training(), "folded modules are in eval mode");
        let fused = fused.as_any().downcast_ref::<Conv2d>().unwrap();
        assert_values(&fused.weight, &weight, &format!("{conv}_{bn}.weight"));
        assert_values(
            fused.bias.as_ref().unwrap(),
            &bias,
            &format!("{conv}_{bn}.bias"),
        );
    }
    // The traced model is not changed: its weights are still PyTorch's, and it still runs.
    assert_values(
        &model.conv1.weight,
        &values(&case.weight("conv1.weight")),
        "conv1",
    );
    case.check("output", &model.call(case.io("input")).unwrap());
    case.check("output", &gm.call(case.io("input")).unwrap());
}

#[test]
fn conformance_cnn_op_level_folds_into_new_constants() {
    let (case, _, mut gm) = traced_conformance_cnn(LeafPolicy::none());
    let (changed, text) = run_pass(Box::new(FoldBatchNorm), &mut gm);
    assert_eq!(changed, Changed::Yes);
    assert!(!text.split("after:").nth(1).unwrap().contains("batch_norm"));
    snapshots().bind(|| insta::assert_snapshot!("fold_batch_norm_cnn_op_level", text));
    let (weight, bias) = expected_fold(&case, "conv1", "bn1");
    assert_values(
        &gm.constants["conv1_weight_folded"],
        &weight,
        "conv1 weight",
    );
    assert_values(&gm.constants["conv1_bias_folded"], &bias, "conv1 bias");
    case.check("output", &gm.call(case.io("input")).unwrap());
}

#[test]
fn a_training_mode_graph_is_refused_with_the_reason() {
    let (case, model, mut gm) = traced_conformance_cnn(LeafPolicy::default());
    model.train(true);
    let err = tessera_passes::Pass::run(&FoldBatchNorm, &mut gm).unwrap_err();
    assert!(matches!(err, PassError::TrainingMode { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("call_module[bn1] (BatchNorm2d) is in training mode"),
        "{text}"
    );
    assert!(gm.owned_modules().is_empty());

    // An op-level graph traced in training mode records training batch norms.
    let mut gm = traced(model, case.io("input").meta(), LeafPolicy::none());
    let err = tessera_passes::Pass::run(&FoldBatchNorm, &mut gm).unwrap_err();
    assert!(err.to_string().contains("traced in training mode"), "{err}");
}

#[test]
fn f64_models_fold_in_f64() {
    let model = conformance_cnn();
    model.to_dtype(DType::F64).unwrap();
    let x = random(&[2, 3, 16, 16], 5).to_dtype(DType::F64).unwrap();
    for policy in [LeafPolicy::default(), LeafPolicy::none()] {
        let mut gm = traced(model.clone(), x.meta(), policy);
        let before = gm.call(x.clone()).unwrap();
        run_pass(Box::new(FoldBatchNorm), &mut gm);
        let after = gm.call(x.clone()).unwrap();
        assert_eq!(after.dtype(), DType::F64);
        tessera_testkit::assert_close(&after, &before, 1e-12, 1e-12, "f64 fold");
    }
}

/// Running statistics far from the defaults, so that folding them matters.
fn randomize_batch_norm(bn: &dyn Module, seed: u64) {
    let _guard = no_grad();
    for (name, b) in bn.named_buffers() {
        if name == "running_mean" {
            b.copy_(&random(&b.shape(), seed)).unwrap();
        } else if name == "running_var" {
            let v = random(&b.shape(), seed + 1).abs().unwrap();
            b.copy_(&v.add_scalar(0.5).unwrap()).unwrap();
        }
    }
    for p in bn.parameters() {
        p.copy_(&random(&p.shape(), seed + 2)).unwrap();
    }
    bn.eval();
}

/// A graph module over `root` (a Sequential) built by `build`.
fn hand_built(root: Sequential, build: impl FnOnce(&mut Graph, &Sequential)) -> GraphModule {
    let mut graph = Graph::new();
    build(&mut graph, &root);
    let root: Arc<dyn Module> = Arc::new(root);
    GraphModule::new(root, TracedGraph::from(graph))
}

/// Calls child `index` of `seq` on `input`, as tracing records it.
fn call_child(
    g: &mut Graph,
    seq: &Sequential,
    index: usize,
    input: &NodeId,
    meta: TensorMeta,
) -> NodeId {
    let module = seq.get_submodule(&index.to_string()).unwrap();
    g.call_module(
        &index.to_string(),
        module.kind(),
        &repr(module),
        &[input],
        vec![meta],
    )
    .unwrap()
}

#[test]
fn a_conv_called_twice_keeps_its_other_call_and_its_weights() {
    let bn = BatchNorm2d::new(4).unwrap();
    randomize_batch_norm(&bn, 11);
    let root = Sequential::new().add(Conv2d::new(3, 4, 3).unwrap()).add(bn);
    let mut gm = hand_built(root, |g, seq| {
        let (x, y) = (
            g.placeholder("x", f32s(&[1, 3, 6, 6])),
            g.placeholder("y", f32s(&[1, 3, 6, 6])),
        );
        let out = f32s(&[1, 4, 4, 4]);
        let a = call_child(g, seq, 0, &x, out.clone());
        let b = call_child(g, seq, 1, &a, out.clone());
        let c = call_child(g, seq, 0, &y, out);
        g.output(&[&b, &c]).unwrap();
    });
    let weight_before = values(&gm.get_parameter("0.weight").unwrap());
    let inputs = [random(&[1, 3, 6, 6], 1), random(&[1, 3, 6, 6], 2)];
    let expected = gm.forward(inputs.to_vec()).unwrap();
    let (_, text) = run_pass(Box::new(FoldBatchNorm), &mut gm);
    snapshots().bind(|| insta::assert_snapshot!("fold_batch_norm_shared_conv", text));
    assert_same(
        &gm.forward(inputs.to_vec()).unwrap(),
        &expected,
        "shared conv",
    );
    assert_eq!(
        values(&gm.get_parameter("0.weight").unwrap()),
        weight_before
    );
}

#[test]
fn a_conv_output_with_another_user_keeps_the_unfolded_value_for_it() {
    let bn = BatchNorm2d::new(4).unwrap();
    randomize_batch_norm(&bn, 21);
    let root = Sequential::new().add(Conv2d::new(3, 4, 1).unwrap()).add(bn);
    let mut gm = hand_built(root, |g, seq| {
        let x = g.placeholder("x", f32s(&[2, 3, 5, 5]));
        let out = f32s(&[2, 4, 5, 5]);
        let a = call_child(g, seq, 0, &x, out.clone());
        let b = call_child(g, seq, 1, &a, out);
        let sum = g
            .call_function(Op::Binary(BinaryOp::Add), &[&a, &b])
            .unwrap();
        g.output(&[&sum]).unwrap();
    });
    let inputs = [random(&[2, 3, 5, 5], 3)];
    let expected = gm.forward(inputs.to_vec()).unwrap();
    let (_, text) = run_pass(Box::new(FoldBatchNorm), &mut gm);
    snapshots().bind(|| insta::assert_snapshot!("fold_batch_norm_multi_user", text));
    assert_same(
        &gm.forward(inputs.to_vec()).unwrap(),
        &expected,
        "multi-user conv",
    );
}

#[test]
fn linear_then_batch_norm_1d_folds() {
    let bn = BatchNorm1d::new(6).unwrap();
    randomize_batch_norm(&bn, 31);
    let root = Sequential::new().add(Linear::new(5, 6).unwrap()).add(bn);
    let root = Arc::new(root);
    let mut gm = traced(root.clone(), f32s(&[7, 5]), LeafPolicy::default());
    let x = random(&[7, 5], 4);
    let expected = root.call(x.clone()).unwrap();
    let (changed, text) = run_pass(Box::new(FoldBatchNorm), &mut gm);
    assert_eq!(changed, Changed::Yes);
    snapshots().bind(|| insta::assert_snapshot!("fold_batch_norm_linear", text));
    assert_same(&[gm.call(x).unwrap()], &[expected], "linear + bn1d");
}

#[test]
fn grouped_transposed_conv_then_batch_norm_2d_folds() {
    let bn = BatchNorm2d::new(6).unwrap();
    randomize_batch_norm(&bn, 41);
    let options = ConvTranspose2dOptions::default().stride(2).groups(2);
    let conv = ConvTranspose2d::with_options(4, 6, 3, options).unwrap();
    let root = Arc::new(Sequential::new().add(conv).add(bn));
    let mut gm = traced(root.clone(), f32s(&[2, 4, 5, 5]), LeafPolicy::default());
    let x = random(&[2, 4, 5, 5], 6);
    let expected = root.call(x.clone()).unwrap();
    let (changed, _) = run_pass(Box::new(FoldBatchNorm), &mut gm);
    assert_eq!(changed, Changed::Yes);
    assert!(gm.owned_modules()[0].as_any().is::<ConvTranspose2d>());
    assert_same(&[gm.call(x).unwrap()], &[expected], "conv transpose + bn2d");
}

#[test]
fn batch_norm_without_running_statistics_is_left_alone() {
    let options = tessera_nn::layers::BatchNormOptions::default().track_running_stats(false);
    let bn = BatchNorm2d::with_options(4, options).unwrap();
    bn.eval();
    let root = Arc::new(Sequential::new().add(Conv2d::new(3, 4, 1).unwrap()).add(bn));
    let mut gm = traced(root, f32s(&[2, 3, 4, 4]), LeafPolicy::default());
    let (changed, _) = run_pass(Box::new(FoldBatchNorm), &mut gm);
    assert_eq!(changed, Changed::No);
}
