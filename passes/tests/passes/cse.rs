//! Common subexpression elimination: duplicated pure ops merge (chains in one run), dropout
//! and differing attributes do not, and results do not change.

use crate::common::{assert_pass_rewrites, f32s, module_of, run_pass, training_dropout};
use tessera_fx::Graph;
use tessera_passes::{Changed, CommonSubexpressionElimination};
use tessera_tensor::op::{BinaryOp, ScalarOp, UnaryOp};
use tessera_tensor::{DType, Op, Tensor};

fn graph_with_duplicates() -> Graph {
    let mut g = Graph::new();
    let x = g.placeholder("x", f32s(&[2, 3]));
    let a = g.call_function(Op::Unary(UnaryOp::Relu), &[&x]).unwrap();
    let b = g.call_function(Op::Unary(UnaryOp::Relu), &[&x]).unwrap();
    let ea = g.call_function(Op::Unary(UnaryOp::Exp), &[&a]).unwrap();
    let eb = g.call_function(Op::Unary(UnaryOp::Exp), &[&b]).unwrap();
    let sum = g
        .call_function(Op::Binary(BinaryOp::Add), &[&ea, &eb])
        .unwrap();
    let neg = g.call_function(Op::Unary(UnaryOp::Neg), &[&x]).unwrap();
    g.output(&[&sum, &neg]).unwrap();
    g
}

#[test]
fn cse_merges_duplicate_chains_and_keeps_results() {
    let mut gm = module_of(graph_with_duplicates());
    let inputs = [Tensor::randn(&[2, 3], DType::F32).unwrap()];
    assert_pass_rewrites(
        Box::new(CommonSubexpressionElimination),
        &mut gm,
        &inputs,
        "cse_duplicate_chains",
    );
}

fn scale(value: f64) -> Op {
    Op::Scalar(ScalarOp {
        op: BinaryOp::Mul,
        value,
        reversed: false,
    })
}

#[test]
fn cse_keeps_ops_whose_attributes_differ() {
    let mut g = Graph::new();
    let x = g.placeholder("x", f32s(&[3]));
    let a = g.call_function(scale(2.0), &[&x]).unwrap();
    let b = g.call_function(scale(3.0), &[&x]).unwrap();
    g.output(&[&a, &b]).unwrap();
    let mut gm = module_of(g);
    let (changed, _) = run_pass(Box::new(CommonSubexpressionElimination), &mut gm);
    assert_eq!(changed, Changed::No);
}

#[test]
fn cse_never_merges_dropout() {
    let mut g = Graph::new();
    let x = g.placeholder("x", f32s(&[4]));
    let drop = training_dropout();
    let a = g.call_function(drop.clone(), &[&x]).unwrap();
    let b = g.call_function(drop, &[&x]).unwrap();
    let a0 = g.getitem(&a, 0).unwrap();
    let b0 = g.getitem(&b, 0).unwrap();
    g.output(&[&a0, &b0]).unwrap();
    let mut gm = module_of(g);
    let (changed, _) = run_pass(Box::new(CommonSubexpressionElimination), &mut gm);
    assert_eq!(changed, Changed::No);
}
