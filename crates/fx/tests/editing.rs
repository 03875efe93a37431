//! The editing API: inserting before and after a node, replacing uses, erasing, copying
//! nodes and whole graphs, and fresh names.

use crate::common;

use common::{f32s, relu, residual_block};
use tessera_fx::{FxError, Graph, NodeId, Result, ValueMap};
use tessera_tensor::Op;
use tessera_tensor::op::{BinaryOp, UnaryOp};

/// `x -> relu -> output`.
fn relu_graph() -> Result<(Graph, tessera_fx::NodeId, tessera_fx::NodeId)> {
    let mut g = Graph::new();
    let x = g.placeholder("x", f32s(&[4]));
    let r = g.call_function(relu(), &[&x])?;
    g.output(&[&r])?;
    Ok((g, x, r))
}

fn names(g: &Graph) -> Vec<String> {
    g.nodes().map(|n| g.display(&n)[1..].to_string()).collect()
}

#[test]
fn node_ids_are_small_copy_handles_named_by_their_graph() -> Result<()> {
    let (g, x, r) = relu_graph()?;
    assert_eq!(format!("{} {}", g.display(&x), g.display(&r)), "%x %relu");
    assert_eq!(g.name(&r)?, "relu");
    assert_eq!(std::mem::size_of::<NodeId>(), 8);
    let copy = r; // Copy: `r` stays usable
    assert_eq!(copy, r);
    Ok(())
}

#[test]
fn an_id_of_an_erased_node_stays_invalid_when_its_slot_is_reused() -> Result<()> {
    let mut g = Graph::new();
    let x = g.placeholder("x", f32s(&[4]));
    let dead = g.call_function(relu(), &[&x])?;
    g.erase(&dead)?;
    // The new node takes the freed slot; the old id must not name it.
    let fresh = g.call_function(relu(), &[&x])?;
    assert!(g.node(&dead).is_err());
    assert!(g.node(&fresh).is_ok());
    // An id of another graph is not a node here, even at the same slot.
    let (other, _, other_relu) = relu_graph()?;
    assert!(g.node(&other_relu).is_err());
    // A clone keeps its ids.
    let cloned = other.clone();
    assert_eq!(cloned.name(&other_relu)?, "relu");
    Ok(())
}

#[test]
fn insert_before_places_new_nodes_in_creation_order_before_the_node() -> Result<()> {
    let (mut g, x, r) = relu_graph()?;
    g.insert_before(&r, |g| {
        let a = g.call_function(Op::Unary(UnaryOp::Neg), &[&x])?;
        g.call_function(Op::Unary(UnaryOp::Exp), &[&a])
    })?;
    assert_eq!(names(&g), ["x", "neg", "exp", "relu", "output"]);
    let tail = g.call_function(Op::Unary(UnaryOp::Abs), &[&x])?;
    assert_eq!(
        g.nodes().last(),
        Some(tail),
        "the cursor returns to the end"
    );
    Ok(())
}

#[test]
fn insert_after_places_new_nodes_in_creation_order_after_the_node() -> Result<()> {
    let (mut g, x, _) = relu_graph()?;
    g.insert_after(&x, |g| {
        let a = g.call_function(Op::Unary(UnaryOp::Neg), &[&x])?;
        g.call_function(Op::Unary(UnaryOp::Exp), &[&a])
    })?;
    assert_eq!(names(&g), ["x", "neg", "exp", "relu", "output"]);
    Ok(())
}

#[test]
fn precedes_and_users_follow_the_order_through_many_inserts_and_erases() -> Result<()> {
    let (mut g, x, r) = relu_graph()?;
    // Hundreds of nodes squeezed in at the same two places use up the gaps between the order's
    // keys again and again; the order, `precedes` and the order of users must stay right.
    let mut expected = vec![x];
    let mut before_relu = Vec::new();
    let mut after_x = Vec::new();
    for _ in 0..150 {
        before_relu.push(g.insert_before(&r, |g| g.call_function(relu(), &[&x]))?);
        let anchor = *after_x.last().unwrap_or(&x);
        after_x.push(g.insert_after(&anchor, |g| g.call_function(relu(), &[&x]))?);
    }
    expected.extend(after_x.iter().cloned());
    expected.extend(before_relu.iter().cloned());
    expected.push(r);
    for id in after_x.iter().step_by(7) {
        g.erase(id)?;
        expected.retain(|e| e != id);
    }
    let order: Vec<_> = g.nodes().collect();
    assert_eq!(&order[..order.len() - 1], &expected[..]);
    for pair in expected.windows(2) {
        assert!(g.precedes(&pair[0], &pair[1])?);
        assert!(!g.precedes(&pair[1], &pair[0])?);
    }
    assert!(!g.precedes(&x, &x)?);
    let users = g.users(&x)?;
    assert_eq!(users, expected[1..].to_vec(), "users come in node order");
    Ok(())
}

#[test]
fn placeholders_stay_before_every_other_node() -> Result<()> {
    let (mut g, x, _) = relu_graph()?;
    let y = g.placeholder("y", f32s(&[4]));
    g.insert_before(&x, |g| g.call_function(Op::Unary(UnaryOp::Neg), &[&y]))?;
    assert_eq!(names(&g), ["x", "y", "neg", "relu", "output"]);
    Ok(())
}

#[test]
fn replace_all_uses_with_rewires_every_user_but_the_new_node() -> Result<()> {
    let (mut g, x, r) = relu_graph()?;
    let neg = g.insert_before(&r, |g| g.call_function(Op::Unary(UnaryOp::Neg), &[&x]))?;
    assert_eq!(g.replace_all_uses_with(&x, &neg)?, 1);
    assert_eq!(g.operands(&r)?, std::slice::from_ref(&neg));
    assert_eq!(g.operands(&neg)?, std::slice::from_ref(&x));
    assert_eq!(g.users(&x)?, [neg]);
    g.verify()?;
    Ok(())
}

#[test]
fn replace_all_uses_with_keeps_operand_positions_of_parallel_uses() -> Result<()> {
    let mut g = Graph::new();
    let x = g.placeholder("x", f32s(&[3]));
    let y = g.placeholder("y", f32s(&[3]));
    let sq = g.call_function(Op::Binary(BinaryOp::Mul), &[&x, &x])?;
    g.output(&[&sq])?;
    g.replace_all_uses_with(&x, &y)?;
    assert_eq!(g.operands(&sq)?, [y, y]);
    Ok(())
}

#[test]
fn erase_refuses_a_node_with_users_and_names_them() -> Result<()> {
    let (mut g, x, _) = relu_graph()?;
    let err = g.erase(&x).expect_err("x is used");
    assert!(matches!(err, FxError::EraseWithUsers { .. }));
    assert_eq!(err.to_string(), "cannot erase %x: it is used by %relu");
    Ok(())
}

#[test]
fn erase_removes_an_unused_node_and_its_id_goes_stale() -> Result<()> {
    let (mut g, x, r) = relu_graph()?;
    let dead = g.call_function(Op::Unary(UnaryOp::Neg), &[&x])?;
    g.erase(&dead)?;
    assert_eq!(names(&g), ["x", "relu", "output"]);
    assert_eq!(g.users(&x)?, [r]);
    assert!(matches!(g.node(&dead), Err(FxError::UnknownNode { .. })));
    Ok(())
}

#[test]
fn fresh_names_append_counters_and_sanitize_paths() -> Result<()> {
    let mut g = Graph::new();
    let x = g.placeholder("x", f32s(&[4]));
    let r1 = g.call_function(relu(), &[&x])?;
    let r2 = g.call_function(relu(), &[&r1])?;
    let r3 = g.call_function(relu(), &[&r2])?;
    let w = g.get_attr("layer1.0.weight", f32s(&[4]))?;
    let x2 = g.placeholder("x", f32s(&[4]));
    assert_eq!(
        [r1, r2, r3, w, x2].map(|n| g.display(&n)),
        ["%relu", "%relu_1", "%relu_2", "%layer1_0_weight", "%x_1"]
    );
    Ok(())
}

#[test]
fn copy_subgraph_duplicates_nodes_with_fresh_names_and_metadata() -> Result<()> {
    let (mut g, x, r) = relu_graph()?;
    g.metadata_mut(&r)?.insert("source".into(), "act".into());
    let mut map = ValueMap::new();
    let copies = g.insert_before(&g.output_node().expect("output"), |g| {
        g.copy_subgraph(std::slice::from_ref(&r), &mut map)
    });
    assert!(matches!(copies, Err(FxError::UnmappedOperand { .. })));
    map.insert(x, r);
    let copies = g.insert_after(&r, |g| g.copy_subgraph(std::slice::from_ref(&r), &mut map))?;
    assert_eq!(copies.len(), 1);
    let copy = &copies[0];
    assert_eq!(g.display(copy), "%relu_1");
    assert_eq!(g.operands(copy)?, std::slice::from_ref(&r));
    assert_eq!(g.node(copy)?.metadata["source"], "act");
    assert_eq!(map[&r], *copy);
    Ok(())
}

#[test]
fn append_graph_inlines_another_graph_and_returns_its_outputs() -> Result<()> {
    let block = residual_block()?;
    let mut g = Graph::new();
    let input = g.placeholder("input", f32s(&[2, 8, 8, 8]));
    let mut map = ValueMap::new();
    map.insert(block.placeholders()[0], input);
    let outs = g.append_graph(&block, &mut map)?;
    let second = g.append_graph(&block, &mut {
        let mut m = ValueMap::new();
        m.insert(block.placeholders()[0], outs[0]);
        m
    })?;
    g.output(&[&second[0]])?;
    g.verify()?;
    assert_eq!(g.display(&second[0]), "%relu_3");
    assert_eq!(g.len(), 1 + 2 * (block.len() - 2) + 1);
    Ok(())
}

#[test]
fn call_function_errors_name_the_node_and_shapes() -> Result<()> {
    let mut g = Graph::new();
    let a = g.placeholder("a", f32s(&[2, 3]));
    let b = g.placeholder("b", f32s(&[4, 5]));
    let err = g
        .call_function(Op::Binary(BinaryOp::Add), &[&a, &b])
        .expect_err("shapes do not broadcast");
    let text = err.to_string();
    assert!(
        text.starts_with("%add = call_function[add] on (f32[2, 3], f32[4, 5]): "),
        "{text}"
    );
    Ok(())
}

#[test]
fn ids_of_another_graph_are_refused() -> Result<()> {
    let (g, _, _) = relu_graph()?;
    let mut other = Graph::new();
    let y = other.placeholder("y", f32s(&[4]));
    assert!(matches!(g.users(&y), Err(FxError::UnknownNode { .. })));
    Ok(())
}

#[test]
fn set_operand_replaces_one_operand_position() -> Result<()> {
    let mut g = Graph::new();
    let x = g.placeholder("x", f32s(&[3]));
    let y = g.placeholder("y", f32s(&[3]));
    let sub = g.call_function(Op::Binary(BinaryOp::Sub), &[&x, &x])?;
    g.set_operand(&sub, 1, &y)?;
    assert_eq!(g.operands(&sub)?, [x, y]);
    Ok(())
}

#[test]
fn getitem_past_the_values_names_the_node_and_count() -> Result<()> {
    let mut g = Graph::new();
    let x = g.placeholder("x", f32s(&[3]));
    let err = g.getitem(&x, 1).expect_err("x yields one value");
    assert_eq!(
        err.to_string(),
        "%getitem: getitem[1] of %x, which yields 1 values"
    );
    Ok(())
}
