//! Every model of `tessera_nn::models` through the optimisation passes: traced (attention and
//! transformer layers traced through, down to ops), batch norm folded, structurally pruned and
//! dynamically quantized, the interpreter's output compared with the eager model's after each
//! step. Weights follow the torchvision fixtures' formula (filling a big model with random
//! numbers takes seconds in a debug build); the last quarter of every layer's output channels
//! is then made dead (zero weights, biases and batch-norm shift), so the pruner removes exactly
//! those and the pruned graph still computes the eager model's function.

use crate::common::{outputs, random, run_pass};
use std::sync::Arc;
use tessera_fx::GraphModule;
use tessera_fx::trace::{LeafPolicy, trace};
use tessera_nn::models::{Gpt, GptConfig, MobileNetV2, ResNet, Vgg, VisionTransformer, VitConfig};
use tessera_nn::{Layer, Module, ModuleExt, ModuleKind, init};
use tessera_passes::cost::graph_cost;
use tessera_passes::{Changed, FoldBatchNorm, QuantizeDynamic, StructuredPrune};
use tessera_tensor::{Tensor, TensorMeta, no_grad};
use tessera_testkit::formula_tensor;

/// The fraction of channels made dead, and pruned.
const DEAD: f64 = 0.25;

/// Fills `model` with the formula's weights, then zeroes the last [`DEAD`] of dim 0 of every
/// parameter and `running_mean` buffer of 4 rows or more, so each such output channel is
/// exactly zero after its layer.
fn kill_last_channels(model: &dyn Module) {
    let _guard = no_grad();
    for (p, (key, t)) in model.state_dict().unwrap().iter().enumerate() {
        t.copy_(&formula_tensor(key, &t.shape(), p)).unwrap();
    }
    let tensors = model
        .named_parameters()
        .into_iter()
        .map(|(n, p)| (n, p.tensor().clone()))
        .chain(model.named_buffers());
    for (name, t) in tensors {
        let rows = t.shape().first().copied().unwrap_or(0);
        if rows < 4 || name.ends_with("running_var") || !t.dtype().is_float() {
            continue;
        }
        let dead = (rows as f64 * DEAD).round() as usize;
        t.narrow(0, rows - dead, dead).unwrap().fill_(0.0).unwrap();
    }
}

/// `max |actual - expected| <= tolerance * max |expected|`.
fn assert_near(actual: &Tensor, expected: &Tensor, tolerance: f64, what: &str) {
    assert_eq!(actual.shape(), expected.shape(), "{what}: shape");
    let (a, e) = (actual.to_vec_f64().unwrap(), expected.to_vec_f64().unwrap());
    let scale = e.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let worst = a
        .iter()
        .zip(&e)
        .fold(0.0f64, |m, (x, y)| m.max((x - y).abs()));
    assert!(
        worst <= tolerance * scale,
        "{what}: max error {worst} over {tolerance} x max |expected| {scale}"
    );
}

/// Traces `model`, then folds batch norm, prunes [`DEAD`] of the channels and quantizes the
/// linear layers dynamically, checking the graph against eager after every step; returns the
/// parameters before and after pruning (the same for the transformers, where the pruner finds
/// no channel group to shrink).
fn optimise<M: Layer + 'static>(model: M, input: Tensor) -> (usize, usize) {
    kill_last_channels(&model);
    model.eval();
    let _guard = no_grad();
    let expected = model.forward(input.clone()).unwrap();
    let model = Arc::new(model);
    let meta = TensorMeta::new(input.shape(), input.dtype());
    let policy = LeafPolicy::default()
        .trace_kind(ModuleKind::MultiheadAttention)
        .trace_kind(ModuleKind::TransformerEncoderLayer);
    let graph = trace(&*model, meta, policy).unwrap();
    let mut gm = GraphModule::new(model, graph);
    let run = |gm: &GraphModule| outputs(gm, std::slice::from_ref(&input)).remove(0);
    assert_near(&run(&gm), &expected, 1e-6, "traced");
    run_pass(Box::new(FoldBatchNorm), &mut gm);
    assert_near(&run(&gm), &expected, 1e-4, "batch norm folded");
    let before = graph_cost(&gm).unwrap().parameters;
    run_pass(Box::new(StructuredPrune::new(DEAD)), &mut gm);
    let after = graph_cost(&gm).unwrap().parameters;
    assert_near(&run(&gm), &expected, 1e-4, "pruned");
    let (changed, _) = run_pass(Box::new(QuantizeDynamic::new(true)), &mut gm);
    assert_eq!(
        changed,
        Changed::Yes,
        "every model has a linear layer to quantize"
    );
    assert_near(&run(&gm), &expected, 5e-2, "quantized");
    (before, after)
}

/// Builds without initialising: [`kill_last_channels`] sets every weight.
fn built<M>(build: impl FnOnce() -> tessera_nn::Result<M>) -> M {
    init::skip_init(build).unwrap()
}

fn image(side: usize) -> Tensor {
    random(&[1, 3, side, side], 7)
}

#[test]
fn resnet34_optimises_to_the_same_function() {
    let (before, after) = optimise(built(|| ResNet::resnet34(10)), image(32));
    assert!(after < before * 7 / 10, "{before} -> {after}");
}

#[test]
fn resnet50_optimises_to_the_same_function() {
    let (before, after) = optimise(built(|| ResNet::resnet50(10)), image(32));
    assert!(after < before * 7 / 10, "{before} -> {after}");
}

#[test]
fn mobilenet_v2_optimises_to_the_same_function() {
    let (before, after) = optimise(built(|| MobileNetV2::new(10, 0.25)), image(32));
    assert!(after < before, "{before} -> {after}");
}

#[test]
fn vgg11_bn_optimises_to_the_same_function() {
    let (before, after) = optimise(built(|| Vgg::vgg11_bn(10)), image(32));
    assert!(after < before * 7 / 10, "{before} -> {after}");
}

#[test]
fn vision_transformer_optimises_to_the_same_function() {
    let model = built(|| VisionTransformer::new(VitConfig::tiny(10)));
    optimise(model, image(32));
}

#[test]
fn gpt_optimises_to_the_same_function() {
    let ids: Vec<i64> = (0..12).map(|i| (i * 7 + 3) % 50).collect();
    let ids = Tensor::from_vec(ids, &[1, 12]).unwrap();
    optimise(built(|| Gpt::new(GptConfig::tiny())), ids);
}
