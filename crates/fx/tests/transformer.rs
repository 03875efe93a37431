//! The transformer rebuilds a graph node by node: by default an identical copy, and with an
//! overridden method a rewritten one.

use tessera_fx::rewrite::trace_function;
use tessera_fx::transformer::{Transformer, transform};
use tessera_fx::{Graph, Node, NodeId, Result};
use tessera_tensor::op::UnaryOp;
use tessera_tensor::{DType, Op, TensorMeta};

fn sample() -> Graph {
    trace_function(&[TensorMeta::new([2, 3], DType::F32)], |t| {
        Ok(vec![t[0].relu()?.exp()?.relu()?])
    })
    .unwrap()
}

struct Copy;
impl Transformer for Copy {}

struct ReluToGelu;
impl Transformer for ReluToGelu {
    fn call_function(
        &mut self,
        new: &mut Graph,
        _node: &Node,
        op: &Op,
        args: &[NodeId],
    ) -> Result<NodeId> {
        let op = if *op == Op::Unary(UnaryOp::Relu) {
            Op::Unary(UnaryOp::Gelu { tanh: false })
        } else {
            op.clone()
        };
        let refs: Vec<&NodeId> = args.iter().collect();
        new.call_function(op, &refs)
    }
}

#[test]
fn the_default_transformer_copies_the_graph() {
    let graph = sample();
    assert_eq!(
        transform(&graph, &mut Copy).unwrap().to_string(),
        graph.to_string()
    );
}

#[test]
fn an_overridden_method_rewrites_what_it_sees() {
    let rewritten = transform(&sample(), &mut ReluToGelu).unwrap();
    rewritten.verify().unwrap();
    let text = rewritten.to_string();
    assert!(
        !text.contains("[relu]") && text.matches("call_function[gelu]").count() == 2,
        "{text}"
    );
}
