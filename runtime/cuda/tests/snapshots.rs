//! Snapshots of the PTX of representative kernels (an elementwise chain, a bf16 chain, a
//! broadcast add, a softmax, a layer norm, a linear layer's GEMM with its fused epilogue),
//! reviewed like any generated text; under `snapshots/`.

use crate::common;

use common::{kernels, layer_norm_graph, op_graph};
use tessera_cuda::{PtxTarget, render};
use tessera_fx::Graph;
use tessera_tensor::op::{BinaryOp, ScalarOp, UnaryOp};
use tessera_tensor::{DType, Op, TensorMeta};

fn snapshots() -> insta::Settings {
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path("../../../snapshots");
    settings.set_prepend_module_to_snapshot(false);
    settings
}

fn ptx_of(graph: &Graph) -> String {
    kernels(graph)
        .iter()
        .map(|k| render(k, &PtxTarget::SM80).unwrap().ptx)
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn elementwise_chain_ptx() {
    let mut g = Graph::new();
    let x = g.placeholder("x", TensorMeta::new([5, 7], DType::F32));
    let scaled = Op::Scalar(ScalarOp {
        op: BinaryOp::Mul,
        value: 2.0,
        reversed: false,
    });
    let a = g.call_function(scaled, &[&x]).unwrap();
    let b = g.call_function(Op::Unary(UnaryOp::Relu), &[&a]).unwrap();
    let c = g.call_function(Op::Unary(UnaryOp::Neg), &[&b]).unwrap();
    g.output(&[&c]).unwrap();
    snapshots().bind(|| insta::assert_snapshot!("ptx_elementwise_chain", ptx_of(&g)));
}

/// A bf16 chain: `.b16` loads, the widening by a shift, f32 arithmetic rounded back to bf16
/// after each op (as eager), and `.b16` stores.
#[test]
fn bf16_elementwise_ptx() {
    let mut g = Graph::new();
    let x = g.placeholder("x", TensorMeta::new([5, 7], DType::BF16));
    let y = g.placeholder("y", TensorMeta::new([7], DType::BF16));
    let a = g
        .call_function(Op::Binary(BinaryOp::Add), &[&x, &y])
        .unwrap();
    let b = g.call_function(Op::Unary(UnaryOp::Relu), &[&a]).unwrap();
    g.output(&[&b]).unwrap();
    let ptx = ptx_of(&g);
    assert!(ptx.contains("cvt.rn.bf16.f32"), "{ptx}");
    assert!(ptx.contains("ld.global.b16"), "{ptx}");
    snapshots().bind(|| insta::assert_snapshot!("ptx_bf16_elementwise", ptx));
}

#[test]
fn broadcast_add_ptx() {
    let g = op_graph(Op::Binary(BinaryOp::Add), DType::F32, &[&[3, 5], &[5]]);
    snapshots().bind(|| insta::assert_snapshot!("ptx_broadcast_add", ptx_of(&g)));
}

#[test]
fn softmax_ptx() {
    let g = op_graph(Op::Softmax { dim: 1, log: false }, DType::F32, &[&[2, 40]]);
    let ptx = ptx_of(&g);
    assert!(ptx.contains("shfl.sync.bfly.b32"), "{ptx}");
    snapshots().bind(|| insta::assert_snapshot!("ptx_softmax", ptx));
}

#[test]
fn layer_norm_ptx() {
    let ptx = ptx_of(&layer_norm_graph(DType::F64, 2, 16));
    assert!(ptx.contains("bar.sync 0"), "{ptx}");
    snapshots().bind(|| insta::assert_snapshot!("ptx_layer_norm", ptx));
}

#[test]
fn linear_relu_gemm_ptx() {
    let mut g = Graph::new();
    let x = g.placeholder("x", TensorMeta::new([5, 3], DType::F32));
    let w = g.placeholder("w", TensorMeta::new([4, 3], DType::F32));
    let b = g.placeholder("b", TensorMeta::new([4], DType::F32));
    let y = g
        .call_function(Op::Linear { bias: true }, &[&x, &w, &b])
        .unwrap();
    let r = g.call_function(Op::Unary(UnaryOp::Relu), &[&y]).unwrap();
    g.output(&[&r]).unwrap();
    let ptx = ptx_of(&g);
    assert!(ptx.contains("fma.rn.f32"), "{ptx}");
    snapshots().bind(|| insta::assert_snapshot!("ptx_linear_relu_gemm", ptx));
}
