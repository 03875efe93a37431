//! Structured pruning that shrinks tensors: channels whose weights are zero are the ones
//! removed, and removing them leaves the outputs exactly as they were, through batch norm,
//! residual adds, flatten and concatenation, for module calls and for op-level graphs (every
//! module inlined); ResNet-18's channel groups and costs at both levels.

use crate::common::{assert_same, f32s, random, snapshots};
use std::sync::Arc;
use tessera_fx::trace::{LeafPolicy, TracedGraph, trace};
use tessera_fx::{Graph, GraphModule};
use tessera_nn::layers::{
    AdaptiveAvgPool2d, BatchNorm2d, Conv2d, Conv2dOptions, Flatten, Linear, ReLU,
};
use tessera_nn::models::ResNet18;
use tessera_nn::{Call, Forward, Module, ModuleCore, ModuleExt, ModuleKind, Sequential, repr};
use tessera_passes::cost::graph_cost;
use tessera_passes::structured_prune::PruneReport;
use tessera_passes::{Pass, StructuredPrune};
use tessera_tensor::op::{BinaryOp, IndexOp, UnaryOp};
use tessera_tensor::{Op, Tensor, no_grad};

/// Zeroes output channels `channels` of a layer's weight and bias (dim 0 of both).
fn zero_channels(module: &dyn Module, channels: &[usize]) {
    for p in module.parameters() {
        zero_entries(&p, channels);
    }
}

/// Zeroes the slices `channels` of `t` along dim 0.
fn zero_entries(t: &Tensor, channels: &[usize]) {
    let _guard = no_grad();
    for &c in channels {
        t.select(0, c).unwrap().fill_(0.0).unwrap();
    }
}

/// A graph module over `root` built by `build`, which gets each child's repr by index.
fn hand_built(
    root: Sequential,
    build: impl FnOnce(&mut Graph, &dyn Fn(usize) -> (ModuleKind, String)),
) -> GraphModule {
    let mut graph = Graph::new();
    let modules = |i: usize| {
        let module = root.get_submodule(&i.to_string()).unwrap();
        (module.kind(), repr(module))
    };
    build(&mut graph, &modules);
    let root: Arc<dyn Module> = Arc::new(root);
    root.eval();
    GraphModule::new(root, TracedGraph::from(graph))
}

/// The layers of a residual block whose prunable channels are exactly the zero ones: conv_a's
/// channels 1 and 5 (batch norm maps zero to zero there) and channels 2 and 6 of both
/// residual branches (conv_b and shortcut).
fn residual_layers_with_zero_channels() -> (Conv2d, BatchNorm2d, Conv2d, Conv2d) {
    let padded = Conv2dOptions::default().padding(1);
    let conv_a = Conv2d::with_options(3, 8, 3, padded.clone()).unwrap();
    let bn = BatchNorm2d::new(8).unwrap();
    let conv_b = Conv2d::with_options(8, 8, 3, padded).unwrap();
    let shortcut = Conv2d::new(3, 8, 1).unwrap();
    {
        let _guard = no_grad();
        bn.running_var
            .as_ref()
            .unwrap()
            .copy_(&random(&[8], 1).abs().unwrap().add_scalar(0.5).unwrap())
            .unwrap();
        bn.running_mean
            .as_ref()
            .unwrap()
            .copy_(&random(&[8], 2))
            .unwrap();
        bn.bias.as_ref().unwrap().copy_(&random(&[8], 3)).unwrap();
    }
    zero_channels(&conv_a, &[1, 5]);
    zero_entries(bn.running_mean.as_ref().unwrap(), &[1, 5]);
    zero_entries(bn.bias.as_ref().unwrap(), &[1, 5]);
    zero_channels(&conv_b, &[2, 6]);
    zero_channels(&shortcut, &[2, 6]);
    (conv_a, bn, conv_b, shortcut)
}

/// Prunes a quarter of the channels of the residual net `gm`, whose pruned channels are all
/// zero; snapshots the report and the pruned graph under `snapshot`, and checks that the graph
/// verifies and computes exactly what it did.
fn prune_zero_channels_exactly(gm: &mut GraphModule, snapshot: &str) -> PruneReport {
    let x = random(&[2, 3, 8, 8], 9);
    let expected = gm.call_all(&x);
    let report = StructuredPrune::new(0.25).run_with_report(gm).unwrap();
    let text = format!("{report}\n\n{}", gm.graph);
    snapshots().bind(|| insta::assert_snapshot!(snapshot, text));
    gm.graph.verify().unwrap();
    assert_same(&gm.call_all(&x), &expected, snapshot);
    report
}

#[test]
fn zero_channels_are_pruned_through_batch_norm_residual_add_and_flatten_exactly() {
    let (conv_a, bn, conv_b, shortcut) = residual_layers_with_zero_channels();
    let root = Sequential::new()
        .add(conv_a)
        .add(bn)
        .add(ReLU::new())
        .add(conv_b)
        .add(shortcut)
        .add(AdaptiveAvgPool2d::new(2))
        .add(Flatten::default())
        .add(Linear::new(32, 4).unwrap());
    let mut gm = hand_built(root, |g, modules| {
        let x = g.placeholder("x", f32s(&[2, 3, 8, 8]));
        let full = f32s(&[2, 8, 8, 8]);
        let call = |g: &mut Graph, i: usize, input, meta| {
            let (kind, repr) = modules(i);
            g.call_module(&i.to_string(), kind, &repr, &[input], vec![meta])
                .unwrap()
        };
        let a = call(g, 0, &x, full.clone());
        let a = call(g, 1, &a, full.clone());
        let a = call(g, 2, &a, full.clone());
        let b = call(g, 3, &a, full.clone());
        let s = call(g, 4, &x, full.clone());
        let sum = g
            .call_function(Op::Binary(BinaryOp::Add), &[&b, &s])
            .unwrap();
        let r = g.call_function(Op::Unary(UnaryOp::Relu), &[&sum]).unwrap();
        let p = call(g, 5, &r, f32s(&[2, 8, 2, 2]));
        let f = call(g, 6, &p, f32s(&[2, 32]));
        let out = call(g, 7, &f, f32s(&[2, 4]));
        g.output(&[&out]).unwrap();
    });
    let report = prune_zero_channels_exactly(&mut gm, "structured_prune_residual");
    assert!(report.after.parameters < report.before.parameters);
    assert!(report.after.flops < report.before.flops);
    // The traced model keeps its shapes.
    assert_eq!(gm.get_parameter("0.weight").unwrap().shape(), [8, 3, 3, 3]);
    assert_eq!(
        gm.get_parameter("0_pruned.weight").unwrap().shape(),
        [6, 3, 3, 3]
    );
    assert_eq!(
        gm.get_parameter("7_pruned.weight").unwrap().shape(),
        [4, 24]
    );
}

#[test]
fn concatenated_channels_keep_their_offsets() {
    let a = Conv2d::new(3, 8, 1).unwrap();
    let b = Conv2d::new(3, 4, 1).unwrap();
    zero_channels(&a, &[0, 7]);
    zero_channels(&b, &[2]);
    let root = Sequential::new()
        .add(a)
        .add(b)
        .add(Conv2d::new(12, 5, 1).unwrap());
    let mut gm = hand_built(root, |g, modules| {
        let x = g.placeholder("x", f32s(&[1, 3, 4, 4]));
        let mut call = |i: usize, input, meta| {
            let (kind, repr) = modules(i);
            g.call_module(&i.to_string(), kind, &repr, &[input], vec![meta])
                .unwrap()
        };
        let a = call(0, &x, f32s(&[1, 8, 4, 4]));
        let b = call(1, &x, f32s(&[1, 4, 4, 4]));
        let cat = g
            .call_function(Op::Index(IndexOp::Cat { dim: 1 }), &[&a, &b])
            .unwrap();
        let (kind, repr) = modules(2);
        let out = g
            .call_module("2", kind, &repr, &[&cat], vec![f32s(&[1, 5, 4, 4])])
            .unwrap();
        g.output(&[&out]).unwrap();
    });
    let x = random(&[1, 3, 4, 4], 4);
    let expected = gm.call_all(&x);
    let report = StructuredPrune::new(0.25).run_with_report(&mut gm).unwrap();
    assert_same(&gm.call_all(&x), &expected, "pruning through cat");
    assert_eq!(
        gm.get_parameter("2_pruned.weight").unwrap().shape(),
        [5, 9, 1, 1]
    );
    assert_eq!(report.groups.len(), 2);
}

#[test]
fn resnet18_prunes_every_residual_group_consistently() {
    let model = Arc::new(ResNet18::new(10).unwrap());
    model.eval();
    let graph = trace(&*model, f32s(&[1, 3, 64, 64]), LeafPolicy::default()).unwrap();
    let mut gm = GraphModule::new(model.clone(), graph);
    let x = random(&[1, 3, 64, 64], 5);
    let before = graph_cost(&gm).unwrap();
    let report = StructuredPrune::new(0.3).run_with_report(&mut gm).unwrap();
    snapshots().bind(|| insta::assert_snapshot!("structured_prune_resnet18", report.to_string()));
    assert_eq!(report.before, before);
    gm.graph.verify().unwrap();
    let out = gm.call_all(&x);
    assert_eq!(out[0].shape(), [1, 10]);
    // Every conv of a residual stage's main path and shortcut now agrees on channels.
    assert!(report.after.parameters < before.parameters * 6 / 10);
}

/// conv_a, batch norm, ReLU, conv_b, plus a 1x1 shortcut of the input; the sum through ReLU,
/// pooling, flatten and a linear layer.
#[derive(Module)]
struct ResidualNet {
    core: ModuleCore,
    conv_a: Conv2d,
    bn: BatchNorm2d,
    conv_b: Conv2d,
    shortcut: Conv2d,
    pool: AdaptiveAvgPool2d,
    flatten: Flatten,
    fc: Linear,
}

impl Forward for ResidualNet {
    type Output = Tensor;

    fn forward(&self, x: Tensor) -> tessera_nn::Result<Tensor> {
        let a = self.bn.call(self.conv_a.call(x.clone())?)?.relu()?;
        let sum = self.conv_b.call(a)?.add(&self.shortcut.call(x)?)?;
        let pooled = self.pool.call(sum.relu()?)?;
        self.fc.call(self.flatten.call(pooled)?)
    }
}

/// [`ResidualNet`] with every module inlined: conv2d, batch_norm and linear ops.
fn op_level_residual_net() -> GraphModule {
    let (conv_a, bn, conv_b, shortcut) = residual_layers_with_zero_channels();
    let model = Arc::new(ResidualNet {
        core: ModuleCore::default(),
        conv_a,
        bn,
        conv_b,
        shortcut,
        pool: AdaptiveAvgPool2d::new(2),
        flatten: Flatten::default(),
        fc: Linear::new(32, 4).unwrap(),
    });
    model.eval();
    let graph = trace(&*model, f32s(&[2, 3, 8, 8]), LeafPolicy::none()).unwrap();
    GraphModule::new(model, graph)
}

#[test]
fn op_level_zero_channels_are_pruned_into_new_constants_exactly() {
    let mut gm = op_level_residual_net();
    assert!(!gm.graph.to_string().contains("call_module"));
    let report = prune_zero_channels_exactly(&mut gm, "structured_prune_op_level_residual");
    assert_eq!(report.groups.len(), 2, "{report}");
    assert!(report.after.parameters < report.before.parameters);
    assert!(report.after.flops < report.before.flops);
    // The traced model keeps its shapes; the pruned tensors are new constants.
    assert_eq!(
        gm.get_parameter("conv_a.weight").unwrap().shape(),
        [8, 3, 3, 3]
    );
    assert_eq!(gm.constants["conv_a_weight_pruned"].shape(), [6, 3, 3, 3]);
    assert_eq!(gm.constants["conv_b_weight_pruned"].shape(), [6, 6, 3, 3]);
    assert_eq!(gm.constants["bn_running_var_pruned"].shape(), [6]);
    assert_eq!(gm.constants["fc_weight_pruned"].shape(), [4, 24]);
}

#[test]
fn op_level_layers_sharing_a_weight_pin_their_group() {
    let mut gm = op_level_residual_net();
    // Another node reads the shortcut's weight: slicing it for the shortcut would change that
    // node, so the residual group (shortcut and conv_b) keeps its channels.
    let weight = gm.graph.find("shortcut_weight").unwrap();
    gm.graph
        .insert_after(&weight, |g| {
            g.call_function(Op::Unary(UnaryOp::Relu), &[&weight])
        })
        .unwrap();
    let report = StructuredPrune::new(0.25).run_with_report(&mut gm).unwrap();
    assert_eq!(report.groups.len(), 1, "{report}");
    assert!(!gm.constants.contains_key("shortcut_weight_pruned"));
    assert_eq!(gm.constants["conv_b_weight_pruned"].shape(), [8, 6, 3, 3]);
    gm.graph.verify().unwrap();
}

#[test]
fn resnet18_op_level_prunes_every_residual_group_consistently() {
    let model = Arc::new(ResNet18::new(10).unwrap());
    model.eval();
    let graph = trace(&*model, f32s(&[1, 3, 64, 64]), LeafPolicy::none()).unwrap();
    let mut gm = GraphModule::new(model.clone(), graph);
    let report = StructuredPrune::new(0.3).run_with_report(&mut gm).unwrap();
    snapshots()
        .bind(|| insta::assert_snapshot!("structured_prune_resnet18_op_level", report.to_string()));
    gm.graph.verify().unwrap();
    assert!(gm.owned_modules().is_empty());
    let out = gm.call_all(&random(&[1, 3, 64, 64], 5));
    assert_eq!(out[0].shape(), [1, 10]);
    assert!(out[0].to_vec_f64().unwrap().iter().all(|v| v.is_finite()));
    assert!(report.after.parameters < report.before.parameters * 6 / 10);
    // The same channels go as at module level: the same groups and FLOPs before and after.
    let graph = trace(&*model, f32s(&[1, 3, 64, 64]), LeafPolicy::default()).unwrap();
    let mut modules = GraphModule::new(model, graph);
    let module_report = StructuredPrune::new(0.3)
        .run_with_report(&mut modules)
        .unwrap();
    assert_eq!(report.before.flops, module_report.before.flops);
    assert_eq!(report.after.flops, module_report.after.flops);
    let kept = |r: &PruneReport| r.groups.iter().map(|g| g.kept).collect::<Vec<_>>();
    assert_eq!(kept(&report), kept(&module_report));
}

#[test]
fn an_amount_outside_zero_to_one_is_an_error() {
    let model = Arc::new(Sequential::new().add(Linear::new(4, 4).unwrap()));
    let graph = trace(&*model, f32s(&[2, 4]), LeafPolicy::default()).unwrap();
    let mut gm = GraphModule::new(model, graph);
    let err = StructuredPrune::new(1.5).run(&mut gm).unwrap_err();
    assert!(
        err.to_string().contains("amount must be in [0, 1)"),
        "{err}"
    );
}

trait CallAll {
    fn call_all(&self, x: &Tensor) -> Vec<Tensor>;
}

impl CallAll for GraphModule {
    fn call_all(&self, x: &Tensor) -> Vec<Tensor> {
        self.forward(vec![x.clone()]).unwrap()
    }
}
