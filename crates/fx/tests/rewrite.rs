//! Pattern rewriting: patterns and replacements are traced Rust functions or modules; matches
//! do not overlap, respect literals and outside users, can be filtered, and work on ops and
//! on module calls.

use tessera_fx::artifact::run_standalone;
use tessera_fx::rewrite::{
    find_matches, replace_pattern, replace_pattern_with_filter, trace_function,
};
use tessera_fx::trace::{LeafPolicy, TracedGraph, trace_with};
use tessera_nn::layers::{BatchNorm2d, Conv2d, Conv2dOptions};
use tessera_nn::models::SmallCnn;
use tessera_nn::{Call, Module, ModuleCore, ModuleExt};
use tessera_tensor::{DType, Tensor, TensorMeta};

fn f32s(shape: &[usize]) -> TensorMeta {
    TensorMeta::new(shape, DType::F32)
}

/// `relu(a + b) * 2 + relu(c + b)`: two occurrences of `relu(x + y)`.
fn sample() -> TracedGraph {
    let graph = trace_function(&[f32s(&[4]), f32s(&[4]), f32s(&[4])], |t| {
        let left = t[0].add(&t[1])?.relu()?.mul_scalar(2.0)?;
        let right = t[2].add(&t[1])?.relu()?;
        Ok(vec![left.add(&right)?])
    })
    .unwrap();
    TracedGraph::from(graph)
}

fn add_relu() -> tessera_fx::Graph {
    trace_function(&[f32s(&[1]), f32s(&[1])], |t| {
        Ok(vec![t[0].add(&t[1])?.relu()?])
    })
    .unwrap()
}

fn add_clamp() -> tessera_fx::Graph {
    trace_function(&[f32s(&[1]), f32s(&[1])], |t| {
        Ok(vec![t[0].add(&t[1])?.clamp(Some(0.0), None)?])
    })
    .unwrap()
}

fn inputs() -> Vec<Tensor> {
    (0..3)
        .map(|i| Tensor::from_vec(vec![-2.0f32 + i as f32, 1.0, -0.5, 3.0], &[4]).unwrap())
        .collect()
}

#[test]
fn every_occurrence_is_replaced_and_the_result_computes_the_same() {
    let mut traced = sample();
    let before = run_standalone(&traced, &inputs()).unwrap()[0]
        .to_vec::<f32>()
        .unwrap();
    let replaced = replace_pattern(&mut traced.graph, &add_relu(), &add_clamp()).unwrap();
    assert_eq!(replaced.len(), 2);
    traced.graph.verify().unwrap();
    let text = traced.graph.to_string();
    assert!(
        !text.contains("relu") && text.matches("call_function[clamp]").count() == 2,
        "{text}"
    );
    assert_eq!(
        run_standalone(&traced, &inputs()).unwrap()[0]
            .to_vec::<f32>()
            .unwrap(),
        before
    );
}

#[test]
fn a_filter_chooses_matches() {
    let mut traced = sample();
    let replaced =
        replace_pattern_with_filter(&mut traced.graph, &add_relu(), &add_clamp(), |m, g| {
            // Only the occurrence whose output is scaled afterwards.
            g.users(&m.anchor)
                .unwrap()
                .iter()
                .any(|u| g.name(u).unwrap().starts_with("mul"))
        })
        .unwrap();
    assert_eq!(replaced.len(), 1);
    let text = traced.graph.to_string();
    assert_eq!(
        (
            text.matches("[relu]").count(),
            text.matches("[clamp]").count()
        ),
        (1, 1),
        "{text}"
    );
}

#[test]
fn literals_must_be_equal() {
    let graph = sample().graph;
    let times_three = trace_function(&[f32s(&[1])], |t| Ok(vec![t[0].mul_scalar(3.0)?])).unwrap();
    let times_two = trace_function(&[f32s(&[1])], |t| Ok(vec![t[0].mul_scalar(2.0)?])).unwrap();
    assert!(find_matches(&graph, &times_three).unwrap().is_empty());
    assert_eq!(find_matches(&graph, &times_two).unwrap().len(), 1);
}

#[test]
fn a_match_whose_inner_value_is_used_elsewhere_is_skipped() {
    // The sum is also returned, so fusing add+relu would lose it.
    let graph = trace_function(&[f32s(&[4]), f32s(&[4])], |t| {
        let sum = t[0].add(&t[1])?;
        Ok(vec![sum.relu()?, sum])
    })
    .unwrap();
    assert!(find_matches(&graph, &add_relu()).unwrap().is_empty());
}

/// conv followed by batch norm, as a module pattern.
#[derive(Module)]
struct ConvBn {
    core: ModuleCore,
    conv: Conv2d,
    bn: BatchNorm2d,
}

#[test]
fn module_calls_match_by_type_and_the_replacement_reuses_matched_modules() {
    let cnn = SmallCnn::new().unwrap();
    cnn.eval();
    let mut traced =
        tessera_fx::trace::trace(&cnn, f32s(&[1, 3, 16, 16]), LeafPolicy::default()).unwrap();
    let pattern_module = ConvBn {
        core: ModuleCore::default(),
        conv: Conv2d::with_options(1, 1, 1, Conv2dOptions::default()).unwrap(),
        bn: BatchNorm2d::new(1).unwrap(),
    };
    let meta = [("x", f32s(&[1, 1, 4, 4]))];
    let pattern = trace_with(&pattern_module, &meta, LeafPolicy::default(), |t| {
        Ok(vec![
            pattern_module
                .bn
                .call(pattern_module.conv.call(t[0].clone())?)?,
        ])
    })
    .unwrap()
    .graph;
    let replacement = trace_with(&pattern_module, &meta, LeafPolicy::default(), |t| {
        Ok(vec![pattern_module.conv.call(t[0].clone())?])
    })
    .unwrap()
    .graph;
    let replaced = replace_pattern(&mut traced.graph, &pattern, &replacement).unwrap();
    assert_eq!(replaced.len(), 2);
    traced.graph.verify().unwrap();
    let text = traced.graph.to_string();
    assert!(
        !text.contains("BatchNorm2d")
            && text.contains("call_module[conv1:")
            && text.contains("call_module[conv2:"),
        "{text}"
    );
    assert!(
        text.contains("call_module[relu1: ReLU()](%conv1_1)"),
        "{text}"
    );
}
