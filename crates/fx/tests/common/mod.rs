//! Hand-built graphs shared by the tests: a module-level CNN, an op-level residual block, and
//! a graph with several inputs and outputs.
#![allow(dead_code)]

use tessera_fx::trace::TracedGraph;
use tessera_fx::{Graph, Result};
use tessera_nn::models::SmallCnn;
use tessera_nn::{Call, Layer, ModuleExt, ModuleKind};
use tessera_tensor::op::{
    BinaryOp, ConvOp, ConvParams, NormOp, ReduceKind, ReduceOp, UnaryOp, ViewOp,
};
use tessera_tensor::{Op, Tensor};

#[allow(unused_imports)]
pub use tessera_testkit::{f32s, snapshots};

/// The small CNN with its initial weights, in eval mode.
pub fn small_cnn() -> SmallCnn {
    let cnn = SmallCnn::new().unwrap();
    cnn.eval();
    cnn
}

/// Asserts that `out` equals, bit for bit, what calling `module` on `x` gives eagerly.
pub fn assert_eager_gives<M: Layer>(module: &M, x: Tensor, out: &Tensor) {
    assert_eq!(
        out.to_vec::<f32>().unwrap(),
        module.call(x).unwrap().to_vec::<f32>().unwrap()
    );
}

/// Asserts that interpreting `traced` on `x` gives, bit for bit, what `module` gives eagerly.
pub fn assert_interprets_as_eager<M: Layer>(traced: &TracedGraph, module: &M, x: Tensor) {
    let out = traced
        .interpret(module, std::slice::from_ref(&x))
        .unwrap()
        .remove(0);
    assert_eager_gives(module, x, &out);
}

pub fn relu() -> Op {
    Op::Unary(UnaryOp::Relu)
}

/// conv -> bn -> relu -> maxpool -> flatten -> linear, with leaf modules as call_module.
pub fn cnn_chain() -> Result<Graph> {
    let mut g = Graph::new();
    let x = g.placeholder("x", f32s(&[1, 3, 32, 32]));
    let conv1 = g.call_module(
        "conv1",
        ModuleKind::Conv2d,
        "Conv2d(3, 16, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))",
        &[&x],
        vec![f32s(&[1, 16, 32, 32])],
    )?;
    let bn1 = g.call_module(
        "bn1",
        ModuleKind::BatchNorm2d,
        "BatchNorm2d(16, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)",
        &[&conv1],
        vec![f32s(&[1, 16, 32, 32])],
    )?;
    let relu = g.call_function(relu(), &[&bn1])?;
    let pool = g.call_module(
        "pool",
        ModuleKind::MaxPool2d,
        "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)",
        &[&relu],
        vec![f32s(&[1, 16, 16, 16])],
    )?;
    let flat = g.call_function(Op::View(ViewOp::Reshape(vec![1, 4096])), &[&pool])?;
    let fc = g.call_module(
        "fc",
        ModuleKind::Linear,
        "Linear(in_features=4096, out_features=10, bias=True)",
        &[&flat],
        vec![f32s(&[1, 10])],
    )?;
    g.output(&[&fc])?;
    Ok(g)
}

pub fn conv3x3() -> Op {
    Op::Conv(ConvOp::Forward {
        params: ConvParams::conv2d([1, 1], [1, 1], [1, 1], 1),
        bias: true,
    })
}

pub fn batch_norm_eval() -> Op {
    Op::Norm(NormOp::BatchNorm {
        training: false,
        eps: 1e-5,
        weight: true,
        bias: true,
    })
}

/// A ResNet basic block at op level: conv2d, batch_norm (three values: the first is kept),
/// relu, then `relu(out + x)`.
pub fn residual_block() -> Result<Graph> {
    let mut g = Graph::new();
    let x = g.placeholder("x", f32s(&[2, 8, 8, 8]));
    let w = g.get_attr("conv1.weight", f32s(&[8, 8, 3, 3]))?;
    let b = g.get_attr("conv1.bias", f32s(&[8]))?;
    let conv = g.call_function(conv3x3(), &[&x, &w, &b])?;
    let stats: Vec<_> = [
        "bn1.running_mean",
        "bn1.running_var",
        "bn1.weight",
        "bn1.bias",
    ]
    .iter()
    .map(|t| g.get_attr(t, f32s(&[8])))
    .collect::<Result<_>>()?;
    let bn = g.call_function(
        batch_norm_eval(),
        &[&conv, &stats[0], &stats[1], &stats[2], &stats[3]],
    )?;
    let normalized = g.getitem(&bn, 0)?;
    let relu1 = g.call_function(relu(), &[&normalized])?;
    let sum = g.call_function(Op::Binary(BinaryOp::Add), &[&relu1, &x])?;
    let relu2 = g.call_function(relu(), &[&sum])?;
    g.output(&[&relu2])?;
    Ok(g)
}

pub fn max_with_indices(dim: usize) -> Op {
    Op::Reduce(ReduceOp {
        kind: ReduceKind::MaxWithIndices,
        dims: vec![dim],
        keepdim: false,
    })
}

/// Two inputs, a max-with-indices node (two values) split by getitem, three outputs.
pub fn multi_io() -> Result<Graph> {
    let mut g = Graph::new();
    let a = g.placeholder("a", f32s(&[2, 3]));
    let b = g.placeholder("b", f32s(&[2, 3]));
    let sum = g.call_function(Op::Binary(BinaryOp::Add), &[&a, &b])?;
    let max = g.call_function(max_with_indices(1), &[&sum])?;
    let values = g.getitem(&max, 0)?;
    let indices = g.getitem(&max, 1)?;
    g.output(&[&values, &indices, &sum])?;
    Ok(g)
}

/// The workspace's conformance helpers (cases, tolerant comparison).
#[allow(unused_imports)]
pub use tessera_testkit::{Case, conformance_dir};
