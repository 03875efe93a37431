//! Structured pruning that shrinks tensors: channels whose weights are zero are the ones
//! removed, and removing them leaves the outputs exactly as they were, through batch norm,
//! residual adds, flatten and concatenation; ResNet-18's channel groups and costs.

use crate::common::{assert_same, f32s, random, snapshots};
use std::sync::Arc;
use tessera_fx::trace::{LeafPolicy, TracedGraph, trace};
use tessera_fx::{Graph, GraphModule};
use tessera_nn::layers::{
    AdaptiveAvgPool2d, BatchNorm2d, Conv2d, Conv2dOptions, Flatten, Linear, ReLU,
};
use tessera_nn::models::ResNet18;
use tessera_nn::{Forward, Module, ModuleExt, Sequential, repr};
use tessera_passes::cost::graph_cost;
use tessera_passes::{Pass, StructuredPrune};
use tessera_tensor::op::{BinaryOp, IndexOp, UnaryOp};
use tessera_tensor::{Op, Tensor, no_grad};

/// Zeroes output channels `channels` of a layer's weight and bias (dim 0 of both).
fn zero_channels(module: &dyn Module, channels: &[usize]) {
    let _guard = no_grad();
    for p in module.parameters() {
        for &c in channels {
            p.select(0, c).unwrap().fill_(0.0).unwrap();
        }
    }
}

/// A graph module over `root` built by `build`, which gets each child's repr by index.
fn hand_built(
    root: Sequential,
    build: impl FnOnce(&mut Graph, &dyn Fn(usize) -> String),
) -> GraphModule {
    let mut graph = Graph::new();
    let reprs = |i: usize| repr(root.get_submodule(&i.to_string()).unwrap());
    build(&mut graph, &reprs);
    let root: Arc<dyn Module> = Arc::new(root);
    root.eval();
    GraphModule::new(
        root,
        TracedGraph {
            graph,
            attributes: Default::default(),
        },
    )
}

#[test]
fn zero_channels_are_pruned_through_batch_norm_residual_add_and_flatten_exactly() {
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
    // Channels 1 and 5 of conv_a are zero, and batch norm maps zero to zero there.
    zero_channels(&conv_a, &[1, 5]);
    {
        let _guard = no_grad();
        for c in [1, 5] {
            bn.running_mean
                .as_ref()
                .unwrap()
                .select(0, c)
                .unwrap()
                .fill_(0.0)
                .unwrap();
            bn.bias
                .as_ref()
                .unwrap()
                .select(0, c)
                .unwrap()
                .fill_(0.0)
                .unwrap();
        }
    }
    // The residual branches are zero in the same channels, 2 and 6.
    zero_channels(&conv_b, &[2, 6]);
    zero_channels(&shortcut, &[2, 6]);
    let root = Sequential::new()
        .add(conv_a)
        .add(bn)
        .add(ReLU::new())
        .add(conv_b)
        .add(shortcut)
        .add(AdaptiveAvgPool2d::new(2))
        .add(Flatten::default())
        .add(Linear::new(32, 4).unwrap());
    let mut gm = hand_built(root, |g, reprs| {
        let x = g.placeholder("x", f32s(&[2, 3, 8, 8]));
        let full = f32s(&[2, 8, 8, 8]);
        let call = |g: &mut Graph, i: usize, input, meta| {
            g.call_module(&i.to_string(), &reprs(i), &[input], vec![meta])
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
    let x = random(&[2, 3, 8, 8], 9);
    let expected = gm.call_all(&x);
    let report = StructuredPrune::new(0.25).run_with_report(&mut gm).unwrap();
    let text = format!("{report}\n\n{}", gm.graph);
    snapshots().bind(|| insta::assert_snapshot!("structured_prune_residual", text));
    gm.graph.verify().unwrap();
    assert_same(&gm.call_all(&x), &expected, "pruning zero channels");
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
    let mut gm = hand_built(root, |g, reprs| {
        let x = g.placeholder("x", f32s(&[1, 3, 4, 4]));
        let a = g
            .call_module("0", &reprs(0), &[&x], vec![f32s(&[1, 8, 4, 4])])
            .unwrap();
        let b = g
            .call_module("1", &reprs(1), &[&x], vec![f32s(&[1, 4, 4, 4])])
            .unwrap();
        let cat = g
            .call_function(Op::Index(IndexOp::Cat { dim: 1 }), &[&a, &b])
            .unwrap();
        let out = g
            .call_module("2", &reprs(2), &[&cat], vec![f32s(&[1, 5, 4, 4])])
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
