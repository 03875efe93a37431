//! `verify()` reports every problem of a graph at once, each with the node's name.

use crate::common;

use common::{f32s, relu, residual_block};
use std::collections::BTreeSet;
use tessera_fx::{Graph, Result, VerifyError};

fn problems(g: &Graph) -> Vec<String> {
    match g.verify() {
        Ok(()) => Vec::new(),
        Err(errors) => errors.0.iter().map(VerifyError::to_string).collect(),
    }
}

#[test]
fn hand_built_graphs_verify() -> Result<()> {
    common::cnn_chain()?.verify()?;
    residual_block()?.verify()?;
    common::multi_io()?.verify()?;
    Ok(())
}

#[test]
fn verify_collects_every_problem_with_node_names() -> Result<()> {
    let text = "\
graph(x: f32[2, 3]):
    %relu : f32[3, 2] = call_function[relu](%x)
    %add : f32[2, 3] = call_function[add](%x)
    %max : (f32[2], i64[2]) = call_function[max]{dims: [1], keepdim: false, kind: MaxWithIndices}(%x)
    %neg : f32[2] = call_function[neg](%max)
    %pick : f32[2] = getitem[2](%max)
    %late : f32[2, 3] = call_function[relu](%later)
    %later : f32[2, 3] = call_function[relu](%x)
    return %relu
    return %add
";
    let g = Graph::parse_unverified(text)?;
    assert_eq!(
        problems(&g),
        [
            "graph: the graph has 2 outputs",
            "graph: the output is not the last node",
            "%relu: meta f32[3, 2] disagrees with call_function[relu], which gives f32[2, 3]",
            "%add: call_function[add] on (f32[2, 3]): add: expected 2 inputs, got 1",
            "%neg: operand %max yields 2 values; select one with getitem",
            "%pick: getitem[2] of %max, which yields 2 values",
            "%late: uses %later, which is not defined before it",
        ]
    );
    Ok(())
}

#[test]
fn verify_reports_a_cycle() -> Result<()> {
    let text = "\
graph(x: f32[2]):
    %a : f32[2] = call_function[add](%x, %b)
    %b : f32[2] = call_function[relu](%a)
    return %b
";
    let g = Graph::parse_unverified(text)?;
    let found = problems(&g);
    assert!(
        found.contains(&"graph: the graph has a cycle".to_string()),
        "{found:?}"
    );
    assert!(found.contains(&"%a: uses %b, which is not defined before it".to_string()));
    Ok(())
}

#[test]
fn verify_reports_a_missing_output() -> Result<()> {
    let mut g = Graph::new();
    let x = g.placeholder("x", f32s(&[2]));
    g.call_function(relu(), &[&x])?;
    assert_eq!(problems(&g), ["graph: the graph has no output"]);
    Ok(())
}

#[test]
fn verify_with_attributes_reports_dangling_get_attr_targets() -> Result<()> {
    let g = residual_block()?;
    let known: BTreeSet<String> = [
        "conv1.weight",
        "conv1.bias",
        "bn1.running_mean",
        "bn1.running_var",
        "bn1.weight",
    ]
    .map(String::from)
    .into();
    let errors = g
        .verify_with_attributes(&known)
        .expect_err("bn1.bias is missing");
    assert_eq!(
        errors.0,
        [VerifyError {
            node: "%bn1_bias".into(),
            message: "get_attr[bn1.bias] names no known parameter or buffer".into(),
        }]
    );
    Ok(())
}
