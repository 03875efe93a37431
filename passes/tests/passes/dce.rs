//! Dead code elimination: dead chains go, used values, outputs, placeholders and training
//! dropout stay, and results do not change.

use crate::common::{
    assert_pass_rewrites, f32s, module_of, one_op_graph, run_pass, training_dropout,
};
use tessera_fx::Graph;
use tessera_passes::{Changed, DeadCodeElimination};
use tessera_tensor::op::{BinaryOp, UnaryOp};
use tessera_tensor::{DType, Op, Tensor};

fn graph_with_dead_chain() -> Graph {
    let mut g = Graph::new();
    let x = g.placeholder("x", f32s(&[2, 3]));
    let _unused_input = g.placeholder("y", f32s(&[2, 3]));
    let relu = g.call_function(Op::Unary(UnaryOp::Relu), &[&x]).unwrap();
    let exp = g.call_function(Op::Unary(UnaryOp::Exp), &[&x]).unwrap();
    let _neg = g.call_function(Op::Unary(UnaryOp::Neg), &[&exp]).unwrap();
    let add = g
        .call_function(Op::Binary(BinaryOp::Add), &[&relu, &x])
        .unwrap();
    g.output(&[&add]).unwrap();
    g
}

#[test]
fn dce_erases_dead_chains_and_keeps_results() {
    let mut gm = module_of(graph_with_dead_chain());
    let inputs = [
        Tensor::randn(&[2, 3], DType::F32).unwrap(),
        Tensor::randn(&[2, 3], DType::F32).unwrap(),
    ];
    assert_pass_rewrites(
        Box::new(DeadCodeElimination),
        &mut gm,
        &inputs,
        "dce_dead_chain",
    );
}

#[test]
fn dce_of_a_clean_graph_changes_nothing() {
    let mut gm = module_of(one_op_graph(Op::Unary(UnaryOp::Relu), &[2]));
    let (changed, _) = run_pass(Box::new(DeadCodeElimination), &mut gm);
    assert_eq!(changed, Changed::No);
}

#[test]
fn dce_keeps_unused_training_dropout() {
    let mut g = Graph::new();
    let x = g.placeholder("x", f32s(&[4]));
    let drop = training_dropout();
    g.call_function(drop, &[&x]).unwrap();
    g.output(&[&x]).unwrap();
    let mut gm = module_of(g);
    let before = gm.graph.len();
    run_pass(Box::new(DeadCodeElimination), &mut gm);
    assert_eq!(gm.graph.len(), before);
}
