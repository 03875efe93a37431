//! Fusion grouping: chains and diamonds fuse into one kernel, a path leaving a group and
//! coming back splits it, a GEMM takes its bias and activation as an epilogue, a reduction
//! ends the group that feeds it; the pass records groups in metadata and changes no result.

use crate::common::{assert_same, f32s, module_of, outputs, run_pass, snapshots};
use proptest::prelude::*;
use std::collections::HashSet;
use std::sync::Arc;
use tessera_fx::trace::{LeafPolicy, inline, trace};
use tessera_fx::{Graph, GraphModule, NodeId};
use tessera_nn::ModuleExt;
use tessera_nn::models::SmallCnn;
use tessera_passes::fusion_groups::FUSION_GROUP_KEY;
use tessera_passes::registry::by_name;
use tessera_passes::{Changed, fusion_groups};
use tessera_tensor::op::{
    BinaryOp, ConvOp, ConvParams, ReduceKind, ReduceOp, ScalarOp, UnaryOp, ViewOp,
};
use tessera_tensor::{DType, Op, Tensor};

fn call(g: &mut Graph, op: Op, operands: &[&NodeId]) -> NodeId {
    g.call_function(op, operands).unwrap()
}

fn relu() -> Op {
    Op::Unary(UnaryOp::Relu)
}

fn add() -> Op {
    Op::Binary(BinaryOp::Add)
}

fn grouping_snapshot(name: &str, g: &Graph) {
    let grouping = fusion_groups(g).unwrap();
    snapshots().bind(|| insta::assert_snapshot!(name, grouping.to_string()));
}

#[test]
fn fusion_groups_fuse_a_chain_into_one_kernel() {
    let mut g = Graph::new();
    let x = g.placeholder("x", f32s(&[4, 4]));
    let a = call(&mut g, relu(), &[&x]);
    let scale = Op::Scalar(ScalarOp {
        op: BinaryOp::Mul,
        value: 2.0,
        reversed: false,
    });
    let b = call(&mut g, scale, &[&a]);
    let c = call(&mut g, Op::Unary(UnaryOp::Exp), &[&b]);
    g.output(&[&c]).unwrap();
    grouping_snapshot("fusion_groups_chain", &g);
}

#[test]
fn fusion_groups_fuse_a_diamond_with_one_output() {
    let mut g = Graph::new();
    let x = g.placeholder("x", f32s(&[4, 4]));
    let a = call(&mut g, relu(), &[&x]);
    let b = call(&mut g, Op::Unary(UnaryOp::Neg), &[&a]);
    let c = call(&mut g, Op::Unary(UnaryOp::Exp), &[&a]);
    let d = call(&mut g, add(), &[&b, &c]);
    g.output(&[&d]).unwrap();
    let grouping = fusion_groups(&g).unwrap();
    assert_eq!(grouping.groups.len(), 1);
    grouping_snapshot("fusion_groups_diamond", &g);
}

#[test]
fn fusion_groups_split_where_a_path_leaves_the_group_and_comes_back() {
    // relu feeds neg (elementwise) and a permute (not elementwise) that rejoins at the add:
    // relu, neg and add in one kernel would need the permute in the middle of it.
    let mut g = Graph::new();
    let x = g.placeholder("x", f32s(&[3, 3]));
    let a = call(&mut g, relu(), &[&x]);
    let t = call(&mut g, Op::View(ViewOp::Permute(vec![1, 0])), &[&a]);
    let b = call(&mut g, Op::Unary(UnaryOp::Neg), &[&a]);
    let d = call(&mut g, add(), &[&b, &t]);
    g.output(&[&d]).unwrap();
    let grouping = fusion_groups(&g).unwrap();
    assert_ne!(grouping.group_of(&a), grouping.group_of(&d));
    grouping_snapshot("fusion_groups_convexity", &g);
}

#[test]
fn fusion_groups_keep_a_value_used_outside_out_of_the_group() {
    let mut g = Graph::new();
    let x = g.placeholder("x", f32s(&[4]));
    let a = call(&mut g, relu(), &[&x]);
    let b = call(&mut g, Op::Unary(UnaryOp::Neg), &[&a]);
    g.output(&[&a, &b]).unwrap();
    let grouping = fusion_groups(&g).unwrap();
    assert_ne!(grouping.group_of(&a), grouping.group_of(&b));
}

/// linear without bias, then `+ bias` and relu: a GEMM with its epilogue.
fn linear_bias_relu() -> GraphModule {
    let mut g = Graph::new();
    let x = g.placeholder("x", f32s(&[4, 8]));
    let w = g.get_attr("w", f32s(&[16, 8])).unwrap();
    let bias = g.get_attr("b", f32s(&[16])).unwrap();
    let lin = call(&mut g, Op::Linear { bias: false }, &[&x, &w]);
    let biased = call(&mut g, add(), &[&lin, &bias]);
    let out = call(&mut g, relu(), &[&biased]);
    g.output(&[&out]).unwrap();
    let mut gm = module_of(g);
    gm.constants
        .insert("w".into(), Tensor::randn(&[16, 8], DType::F32).unwrap());
    gm.constants
        .insert("b".into(), Tensor::randn(&[16], DType::F32).unwrap());
    gm
}

#[test]
fn fusion_groups_give_a_gemm_its_bias_and_activation_as_epilogue() {
    let gm = linear_bias_relu();
    let grouping = fusion_groups(&gm.graph).unwrap();
    assert_eq!(grouping.groups[0].kind(), "gemm+epilogue");
    grouping_snapshot("fusion_groups_linear_epilogue", &gm.graph);
}

/// A 3x3 convolution keeping `[1, 4, 6, 6]` as it is (no bias).
fn same_shape_conv() -> Op {
    Op::Conv(ConvOp::Forward {
        params: ConvParams::conv2d([1, 1], [1, 1], [1, 1], 1),
        bias: false,
    })
}

#[test]
fn fusion_groups_leave_a_convolutions_input_to_the_convolution_before() {
    // conv -> relu -> conv -> relu, every value [1, 4, 6, 6]: the first ReLU is the first
    // convolution's epilogue, not a member of the second convolution's group (whose kernel
    // starts with its call and cannot compute its own operand first).
    let mut g = Graph::new();
    let x = g.placeholder("x", f32s(&[1, 4, 6, 6]));
    let w1 = g.get_attr("w1", f32s(&[4, 4, 3, 3])).unwrap();
    let w2 = g.get_attr("w2", f32s(&[4, 4, 3, 3])).unwrap();
    let c1 = call(&mut g, same_shape_conv(), &[&x, &w1]);
    let r1 = call(&mut g, relu(), &[&c1]);
    let c2 = call(&mut g, same_shape_conv(), &[&r1, &w2]);
    let r2 = call(&mut g, relu(), &[&c2]);
    g.output(&[&r2]).unwrap();
    let grouping = fusion_groups(&g).unwrap();
    let (first, second) = (grouping.group_of(&c1), grouping.group_of(&c2));
    assert!(first.is_some() && second.is_some(), "{grouping}");
    assert_eq!(grouping.group_of(&r1), first, "{grouping}");
    assert_eq!(grouping.group_of(&r2), second, "{grouping}");
    assert_ne!(first, second, "{grouping}");
    assert!(
        grouping.groups.iter().all(|g| g.kind() == "conv+epilogue"),
        "{grouping}"
    );
}

#[test]
fn fusion_groups_end_in_the_reduction_they_feed() {
    let mut g = Graph::new();
    let x = g.placeholder("x", f32s(&[4, 8]));
    let sq = call(&mut g, Op::Binary(BinaryOp::Mul), &[&x, &x]);
    let e = call(&mut g, Op::Unary(UnaryOp::Exp), &[&sq]);
    let sum = Op::Reduce(ReduceOp {
        kind: ReduceKind::Sum,
        dims: vec![1],
        keepdim: false,
    });
    let s = call(&mut g, sum, &[&e]);
    let r = call(&mut g, relu(), &[&s]);
    g.output(&[&r]).unwrap();
    let grouping = fusion_groups(&g).unwrap();
    assert_eq!(grouping.groups[0].kind(), "elementwise+reduction");
    grouping_snapshot("fusion_groups_reduction", &g);
}

#[test]
fn fusion_groups_of_a_traced_small_cnn() {
    let cnn = SmallCnn::new().unwrap();
    cnn.eval();
    let mut traced = trace(&cnn, f32s(&[2, 3, 16, 16]), LeafPolicy::default()).unwrap();
    inline(&mut traced, &cnn, |_| true).unwrap();
    grouping_snapshot("fusion_groups_small_cnn", &traced.graph);
    let mut gm = GraphModule::new(Arc::new(cnn), traced);
    let x = Tensor::randn(&[2, 3, 16, 16], DType::F32).unwrap();
    let expected = outputs(&gm, std::slice::from_ref(&x));
    run_pass(by_name("fusion_groups").unwrap(), &mut gm);
    assert_same(&outputs(&gm, &[x]), &expected, "small cnn");
}

#[test]
fn fuse_groups_records_groups_in_metadata_and_keeps_results() {
    let mut gm = linear_bias_relu();
    let x = Tensor::randn(&[4, 8], DType::F32).unwrap();
    let expected = outputs(&gm, std::slice::from_ref(&x));
    let (changed, text) = run_pass(by_name("fusion_groups").unwrap(), &mut gm);
    assert_eq!(changed, Changed::Yes);
    let (before, after) = text.split_once("after:").unwrap();
    assert_eq!(before.trim_start_matches("before:").trim(), after.trim());
    for name in ["linear", "add", "relu"] {
        let id = gm.graph.find(name).unwrap();
        let metadata = &gm.graph.node(&id).unwrap().metadata;
        assert_eq!(
            metadata.get(FUSION_GROUP_KEY).map(String::as_str),
            Some("g0")
        );
    }
    let (changed, _) = run_pass(by_name("fusion_groups").unwrap(), &mut gm);
    assert_eq!(changed, Changed::No, "a second run records the same groups");
    assert_same(&outputs(&gm, &[x]), &expected, "linear epilogue");
}

/// Every node reachable from `from` along uses.
fn reachable(g: &Graph, from: &NodeId) -> HashSet<NodeId> {
    let mut seen = HashSet::new();
    let mut stack = vec![*from];
    while let Some(n) = stack.pop() {
        for u in g.users(&n).unwrap() {
            if seen.insert(u) {
                stack.push(u);
            }
        }
    }
    seen
}

/// A random DAG on a [4, 4] input: each step applies relu, neg, add of two earlier values, a
/// transpose (not elementwise) or a row sum (a reduction, broadcast back by the next add).
fn random_dag(steps: &[(u8, usize, usize)]) -> Graph {
    let mut g = Graph::new();
    let x = g.placeholder("x", f32s(&[4, 4]));
    let mut values = vec![x];
    for &(kind, i, j) in steps {
        let a = values[i % values.len()];
        let b = values[j % values.len()];
        let op = match kind % 5 {
            0 => relu(),
            1 => Op::Unary(UnaryOp::Neg),
            2 => {
                let sum = call(&mut g, add(), &[&a, &b]);
                values.push(sum);
                continue;
            }
            3 => Op::View(ViewOp::Permute(vec![1, 0])),
            _ => Op::Reduce(ReduceOp {
                kind: ReduceKind::Sum,
                dims: vec![1],
                keepdim: true,
            }),
        };
        let v = call(&mut g, op, &[&a]);
        let v = if kind % 5 == 4 {
            // Broadcast the [4, 1] sum back to [4, 4] so later steps keep one shape.
            call(&mut g, add(), &[&v, &values[0].clone()])
        } else {
            v
        };
        values.push(v);
    }
    let outs: Vec<&NodeId> = values.iter().rev().take(2).collect();
    g.output(&outs).unwrap();
    g
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn fusion_groups_have_one_output_and_are_convex(
        steps in prop::collection::vec((0u8..5, 0usize..16, 0usize..16), 1..16),
    ) {
        let g = random_dag(&steps);
        let grouping = fusion_groups(&g).unwrap();
        for group in &grouping.groups {
            let members: HashSet<&NodeId> = group.nodes.iter().collect();
            let escaping: Vec<&NodeId> = group
                .nodes
                .iter()
                .filter(|n| g.users(n).unwrap().iter().any(|u| !members.contains(u)))
                .collect();
            prop_assert!(escaping.len() <= 1, "{} has outputs {:?}", group.id, escaping);
            for n in &group.nodes {
                for outside in reachable(&g, n).iter().filter(|u| !members.contains(u)) {
                    let back = reachable(&g, outside);
                    prop_assert!(
                        !group.nodes.iter().any(|m| back.contains(m)),
                        "{} is not convex: {} leaves it and comes back\n{}",
                        group.id,
                        g.display(outside),
                        grouping
                    );
                }
            }
        }
    }
}
