//! Rematerialisation of joint graphs: the printed graphs of Linear+ReLU (nothing to gain:
//! ReLU's backward reads its output) and of a Linear+GELU+LayerNorm block (GELU runs again in
//! the backward), and differential checks that the rematerialised graph gives the original's
//! outputs and gradients exactly (interpreter) on every conformance model's joint graph and on
//! random elementwise chains, never keeping more bytes than before.

#[path = "../../../crates/fx/tests/autodiff_common/mod.rs"]
mod autodiff_common;

use crate::common::{f32s, snapshots};
use autodiff_common::{TracedCase, load_case_weights as load, trace_case, traced_loss};
use proptest::prelude::*;
use tessera_fx::autodiff::{JointGraph, joint_graph};
use tessera_fx::trace::TracedGraph;
use tessera_fx::{Graph, GraphModule, NodeId};
use tessera_nn::layers::{GELU, LayerNorm, Linear, ReLU};
use tessera_nn::models::note::{MyLinear, Net};
use tessera_nn::models::{Gpt, GptConfig, MobileNetV2, SmallCnn, VisionTransformer, VitConfig};
use tessera_nn::{Call, Layer, Module, ModuleExt, Sequential};
use tessera_passes::{PassError, RematReport, Rematerialize, rematerialize};
use tessera_tensor::op::{BinaryOp, DropoutOp, ReduceKind, ReduceOp, ScalarOp, UnaryOp};
use tessera_tensor::{DType, Generator, Op, Tensor};
use tessera_testkit::Case;

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn_with(shape, DType::F32, &mut Generator::new(seed)).unwrap()
}

/// The joint graph of `sum(model(x))` for `x` of `shape`, with respect to every parameter
/// and `x`.
fn sum_joint<M: Layer>(model: &M, shape: &[usize]) -> (TracedGraph, JointGraph) {
    let traced = traced_loss(model, &[("x", f32s(shape))], |t| {
        Ok(vec![model.call(t[0].clone())?.sum_all()?])
    });
    let names: Vec<String> = model
        .named_parameters()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    let mut wrt: Vec<&str> = names.iter().map(String::as_str).collect();
    wrt.push("x");
    let joint = joint_graph(&traced, &wrt).unwrap();
    (traced, joint)
}

/// Rematerialises a copy of `joint`'s graph; checks it verifies, keeps no more bytes than
/// before, that every copy is named `<original>_recomputed`, and that the interpreter gives
/// exactly the original's outputs on `inputs`. Returns the report and the new graph.
fn remat_and_compare(
    root: &dyn Module,
    joint: &JointGraph,
    inputs: &[Tensor],
) -> (RematReport, Graph) {
    let mut graph = joint.graph().clone();
    let report = rematerialize(&mut graph, joint.forward_outputs).unwrap();
    graph.verify().unwrap_or_else(|e| panic!("{e}\n{graph}"));
    assert!(report.bytes_after() <= report.bytes_before(), "{report}");
    for (original, copy) in &report.recomputed {
        assert!(
            copy.starts_with(&format!("{original}_recomputed")),
            "{report}"
        );
    }
    let expected = joint.traced.interpret(root, inputs).unwrap();
    let remat = TracedGraph {
        graph: graph.clone(),
        attributes: joint.traced.attributes.clone(),
    };
    let actual = remat.interpret(root, inputs).unwrap();
    assert_eq!(actual.len(), expected.len());
    for (i, (a, e)) in actual.iter().zip(&expected).enumerate() {
        assert_eq!(a.meta(), e.meta(), "output {i}");
        assert_eq!(
            a.to_vec_f64().unwrap(),
            e.to_vec_f64().unwrap(),
            "output {i} differs after rematerialisation\n{report}\n{graph}"
        );
    }
    (report, graph)
}

#[test]
fn linear_relu_keeps_the_relu_output_and_recomputes_nothing() {
    let model = Sequential::new()
        .add(Linear::new(4, 3).unwrap())
        .add(ReLU::new());
    let (_, joint) = sum_joint(&model, &[2, 4]);
    let (report, graph) = remat_and_compare(&model, &joint, &[randn(&[2, 4], 1)]);
    // ReLU's derivative reads its output, which is all the backward needs: nothing to gain.
    assert!(report.recomputed.is_empty(), "{report}");
    assert_eq!(report.bytes_saved(), 0);
    assert_eq!(graph.to_string(), joint.graph().to_string());
    snapshots().bind(|| {
        insta::assert_snapshot!("remat_linear_relu", format!("{report}\n{graph}"));
    });
}

/// `LayerNorm(GELU(Linear(x)))` over 8 features.
fn linear_gelu_layer_norm() -> Sequential {
    Sequential::new()
        .add(Linear::new(8, 8).unwrap())
        .add(GELU::new())
        .add(LayerNorm::new(&[8]).unwrap())
}

#[test]
fn linear_gelu_layer_norm_recomputes_gelu_from_the_linear_output() {
    let model = linear_gelu_layer_norm();
    let (_, joint) = sum_joint(&model, &[4, 8]);
    let (report, graph) = remat_and_compare(&model, &joint, &[randn(&[4, 8], 2)]);
    // GELU's derivative reads its input (the linear output, kept anyway), the layer norm's
    // backward reads its input (GELU's output): GELU runs again instead of being kept.
    let recomputed: Vec<&str> = report.recomputed.iter().map(|(o, _)| o.as_str()).collect();
    assert!(recomputed.contains(&"gelu"), "{report}");
    assert_eq!(report.bytes_saved(), 4 * 8 * 4, "{report}");
    snapshots().bind(|| {
        insta::assert_snapshot!("remat_linear_gelu_layer_norm", format!("{report}\n{graph}"));
    });
}

/// `sum(gelu(x @ w))` and the backward reads of the GELU's input and output (a derived joint
/// graph bakes its shapes into view attributes; this one re-shapes for any batch).
const GELU_JOINT: &str = "graph(x: f32[4, 8], w: f32[8, 8], g: f32[4, 8]):
    %mm : f32[4, 8] = call_function[matmul](%x, %w)
    %gelu : f32[4, 8] = call_function[gelu]{tanh: false}(%mm)
    %sum : f32[] = call_function[sum]{kind: Sum, dims: [0, 1], keepdim: false}(%gelu)
    %gelu_backward : f32[4, 8] = call_function[gelu_backward]{tanh: false}(%g, %mm)
    %permute : f32[8, 4] = call_function[permute]{[1, 0]}(%gelu)
    %mm_1 : f32[8, 8] = call_function[matmul](%permute, %gelu_backward)
    return (%sum, %mm_1)
";

#[test]
fn the_report_weighs_values_at_the_input_shapes_given() {
    let gm = GraphModule::from_graph(Graph::parse(GELU_JOINT).unwrap());
    let traced_shapes = Rematerialize::new(1)
        .run_with_report(&mut gm.share())
        .unwrap();
    assert_eq!(traced_shapes.bytes_saved(), 4 * 8 * 4);
    let mut batch_64 = gm.share();
    let report = Rematerialize::new(1)
        .for_input_shapes(vec![f32s(&[64, 8]), f32s(&[8, 8]), f32s(&[64, 8])])
        .run_with_report(&mut batch_64)
        .unwrap();
    assert_eq!(report.recomputed, traced_shapes.recomputed);
    assert_eq!(report.bytes_saved(), 16 * traced_shapes.bytes_saved());
    // The graph keeps its own metas: only the weighing used the other shapes.
    assert!(
        batch_64
            .graph
            .to_string()
            .contains("%gelu_recomputed : f32[4, 8]")
    );
}

/// Rematerialises `text` (one forward output) and returns the report and the printed graph.
fn remat_text(text: &str) -> (RematReport, String) {
    let mut graph = Graph::parse(text).unwrap();
    let report = rematerialize(&mut graph, 1).unwrap();
    graph.verify().unwrap();
    (report, graph.to_string())
}

#[test]
fn a_value_as_large_as_what_it_is_computed_from_is_kept_not_recomputed() {
    // Recomputing `tanh` would keep `narrow`, as large as `tanh` itself: a tie, and the cut
    // nearest the backward (no recomputation) is taken.
    let (report, graph) = remat_text(
        "graph(x: f32[64, 32], w: f32[32, 32], g: f32[64, 4]):
    %mm : f32[64, 32] = call_function[matmul](%x, %w)
    %narrow : f32[64, 4] = call_function[narrow]{dim: 1, start: 0, len: 4}(%mm)
    %tanh : f32[64, 4] = call_function[tanh](%narrow)
    %sum : f32[] = call_function[sum]{kind: Sum, dims: [0, 1], keepdim: false}(%tanh)
    %tanh_backward : f32[64, 4] = call_function[tanh_backward](%g, %tanh)
    return (%sum, %tanh_backward)
",
    );
    assert!(report.recomputed.is_empty(), "{report}");
    assert_eq!(report.saved_after, report.saved_before);
    assert!(!graph.contains("_recomputed"), "{graph}");
}

#[test]
fn a_chain_over_an_input_is_recomputed_for_free() {
    // `exp(x * 2)` is read by the backward; `x` is an input, alive anyway: nothing is kept.
    let (report, graph) = remat_text(
        "graph(x: f32[16, 8], g: f32[16, 8]):
    %mul : f32[16, 8] = call_function[mul]{op: Mul, value: 2.0, reversed: false}(%x)
    %exp : f32[16, 8] = call_function[exp](%mul)
    %sum : f32[] = call_function[sum]{kind: Sum, dims: [0, 1], keepdim: false}(%exp)
    %exp_backward : f32[16, 8] = call_function[exp_backward](%g, %exp)
    return (%sum, %exp_backward)
",
    );
    assert_eq!(report.bytes_before(), 16 * 8 * 4);
    assert_eq!(report.bytes_after(), 0, "{report}");
    assert!(
        graph.contains(
            "%exp_backward : f32[16, 8] = call_function[exp_backward](%g, %exp_recomputed)"
        ),
        "{graph}"
    );
    let recomputed: Vec<&str> = report.recomputed.iter().map(|(o, _)| o.as_str()).collect();
    assert_eq!(recomputed, ["mul", "exp"]);
}

#[test]
fn shapes_that_do_not_fit_the_graph_are_an_error_naming_the_node() {
    let mut gm = GraphModule::from_graph(Graph::parse(GELU_JOINT).unwrap());
    let err = Rematerialize::new(1)
        .for_input_shapes(vec![f32s(&[64, 8]), f32s(&[9, 8]), f32s(&[64, 8])])
        .run_with_report(&mut gm)
        .unwrap_err();
    assert!(err.to_string().contains("%mm"), "{err}");
    assert_eq!(
        gm.graph.to_string(),
        Graph::parse(GELU_JOINT).unwrap().to_string()
    );
}

#[test]
fn a_training_dropout_is_never_recomputed() {
    // `sum(exp(dropout(x * 2)))`: the mask is random, so the dropout is kept even where
    // recomputing would keep fewer bytes.
    let mut g = Graph::new();
    let x = g.placeholder("x", f32s(&[4, 8]));
    let scaled = g
        .call_function(
            Op::Scalar(ScalarOp {
                op: BinaryOp::Mul,
                value: 2.0,
                reversed: false,
            }),
            &[&x],
        )
        .unwrap();
    let dropout = Op::Dropout(DropoutOp {
        p: 0.5,
        training: true,
    });
    let d = g.call_function(dropout, &[&scaled]).unwrap();
    let kept = g.getitem(&d, 0).unwrap();
    let e = g.call_function(Op::Unary(UnaryOp::Exp), &[&kept]).unwrap();
    let loss = g.call_function(sum_all(2), &[&e]).unwrap();
    g.output(&[&loss]).unwrap();
    let traced = TracedGraph {
        graph: g,
        attributes: Default::default(),
    };
    let joint = joint_graph(&traced, &["x"]).unwrap();
    let mut graph = joint.graph().clone();
    let report = rematerialize(&mut graph, 1).unwrap();
    graph.verify().unwrap();
    assert!(
        report
            .recomputed
            .iter()
            .all(|(o, _)| !o.starts_with("dropout")),
        "{report}"
    );
    assert!(!graph.to_string().contains("dropout_recomputed"), "{graph}");
    assert!(report.bytes_after() <= report.bytes_before());
}

#[test]
fn more_forward_outputs_than_results_is_a_typed_error() {
    let model = Sequential::new().add(Linear::new(4, 3).unwrap());
    let (_, joint) = sum_joint(&model, &[2, 4]);
    let mut graph = joint.graph().clone();
    let err = rematerialize(&mut graph, 9).unwrap_err();
    assert!(matches!(err, PassError::Unsupported(_)), "{err}");
    assert!(err.to_string().contains("9 forward outputs"), "{err}");
}

// --- Conformance models -------------------------------------------------------------------

/// The case's model with its loss (cross entropy against the case's target, else the sum),
/// differentiated with respect to every parameter and the input, rematerialised and run.
fn check_model<M: Layer>(case_name: &str, model: &M, with_target: bool) -> RematReport {
    let case = Case::load(case_name);
    let TracedCase {
        traced,
        inputs,
        wrt,
        ..
    } = trace_case(&case, model, case.io("input"), with_target);
    let wrt: Vec<&str> = wrt.iter().map(String::as_str).collect();
    let joint = joint_graph(&traced, &wrt).unwrap();
    let detached: Vec<Tensor> = inputs.iter().map(Tensor::detach).collect();
    remat_and_compare(model, &joint, &detached).0
}

#[test]
fn conformance_joint_graphs_give_the_same_outputs_and_gradients_after_remat() {
    let mylinear = MyLinear::new(4, 3).unwrap();
    load("a_mylinear", &mylinear);
    check_model("a_mylinear", &mylinear, false);

    let sequential = Sequential::new()
        .add(Linear::new(4, 3).unwrap())
        .add(ReLU::new())
        .add(Linear::new(3, 1).unwrap());
    load("b_sequential", &sequential);
    check_model("b_sequential", &sequential, false);

    for (case, training) in [("d_cnn_eval", false), ("d_cnn_train", true)] {
        let cnn = SmallCnn::new().unwrap();
        load(case, &cnn);
        cnn.train(training);
        check_model(case, &cnn, true);
    }

    let mobilenet = MobileNetV2::new(10, 0.25).unwrap();
    load("r_models_mobilenet_v2", &mobilenet);
    mobilenet.eval();
    check_model("r_models_mobilenet_v2", &mobilenet, true);

    let vit = VisionTransformer::new(VitConfig::tiny(10)).unwrap();
    load("r_models_vit", &vit);
    vit.eval();
    let report = check_model("r_models_vit", &vit, true);
    // GELU in every MLP block: recomputed, so the ViT's backward keeps fewer bytes.
    assert!(report.bytes_saved() > 0, "{report}");

    let gpt = Gpt::new(GptConfig::tiny()).unwrap();
    load("r_models_gpt", &gpt);
    check_model("r_models_gpt", &gpt, true);
}

#[test]
fn the_note_net_training_loss_gives_the_same_gradients_after_remat() {
    let case = Case::load("f_train_sgd");
    let model = Net::new().unwrap();
    load("f_train_sgd", &model);
    let x = case
        .io("inputs")
        .select(0, 0)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap();
    let traced = traced_loss(&model, &[("x", x.meta())], |t| {
        Ok(vec![model.call(t[0].clone())?.abs()?.sum_all()?])
    });
    let names: Vec<String> = model
        .named_parameters()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    let wrt: Vec<&str> = names.iter().map(String::as_str).collect();
    let joint = joint_graph(&traced, &wrt).unwrap();
    remat_and_compare(&model, &joint, &[x]);
}

// --- Random elementwise chains ------------------------------------------------------------

fn sum_all(rank: usize) -> Op {
    Op::Reduce(ReduceOp {
        kind: ReduceKind::Sum,
        dims: (0..rank).collect(),
        keepdim: false,
    })
}

/// A chain over `x: f32[3, 4]` (and a constant `c`): each step applies a unary, binary or
/// scalar op, a compare-and-where, a clamp, a view round trip, or (kept, never recomputed) a
/// row sum broadcast back, to values picked among those built so far; the loss is the sum of
/// the last value.
fn random_chain(steps: &[(u8, usize, usize)]) -> TracedGraph {
    let shape = [3usize, 4];
    let mut g = Graph::new();
    let mut values: Vec<NodeId> = vec![
        g.placeholder("x", f32s(&shape)),
        g.get_attr("c", f32s(&shape)).unwrap(),
    ];
    for &(kind, a, b) in steps {
        let (a, b) = (values[a % values.len()], values[b % values.len()]);
        let scalar = |op, value| {
            Op::Scalar(ScalarOp {
                op,
                value,
                reversed: false,
            })
        };
        let node = match kind % 10 {
            0 => g.call_function(Op::Unary(UnaryOp::Tanh), &[&a]),
            1 => g.call_function(Op::Unary(UnaryOp::Sigmoid), &[&a]),
            2 => g.call_function(Op::Unary(UnaryOp::Gelu { tanh: false }), &[&a]),
            3 => g.call_function(Op::Binary(BinaryOp::Mul), &[&a, &b]),
            4 => g.call_function(Op::Binary(BinaryOp::Add), &[&a, &b]),
            5 => g.call_function(scalar(BinaryOp::Mul, 0.5), &[&a]),
            6 => {
                let cond = g
                    .call_function(Op::Compare(tessera_tensor::op::CompareOp::Gt), &[&a, &b])
                    .unwrap();
                g.call_function(Op::Where, &[&cond, &a, &b])
            }
            7 => g.call_function(
                Op::Clamp {
                    min: Some(-1.0),
                    max: Some(1.5),
                },
                &[&a],
            ),
            8 => {
                let t = g
                    .call_function(
                        Op::View(tessera_tensor::op::ViewOp::Permute(vec![1, 0])),
                        &[&a],
                    )
                    .unwrap();
                let t = g.call_function(Op::Unary(UnaryOp::Exp), &[&t]).unwrap();
                g.call_function(
                    Op::View(tessera_tensor::op::ViewOp::Permute(vec![1, 0])),
                    &[&t],
                )
            }
            _ => {
                let rows = g
                    .call_function(
                        Op::Reduce(ReduceOp {
                            kind: ReduceKind::Sum,
                            dims: vec![1],
                            keepdim: true,
                        }),
                        &[&a],
                    )
                    .unwrap();
                g.call_function(Op::Binary(BinaryOp::Mul), &[&rows, &b])
            }
        }
        .unwrap();
        values.push(node);
    }
    let last = *values.last().unwrap();
    let loss = g.call_function(sum_all(2), &[&last]).unwrap();
    g.output(&[&loss]).unwrap();
    let mut attributes = indexmap::IndexMap::new();
    attributes.insert("c".to_string(), randn(&shape, 7).mul_scalar(0.5).unwrap());
    TracedGraph {
        graph: g,
        attributes,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_chains_give_the_same_loss_and_gradient_after_remat(
        steps in prop::collection::vec((any::<u8>(), any::<usize>(), any::<usize>()), 1..24),
        seed in 0u64..1000,
    ) {
        let traced = random_chain(&steps);
        let joint = joint_graph(&traced, &["x"]).unwrap();
        let root = Sequential::new();
        remat_and_compare(&root, &joint, &[randn(&[3, 4], seed)]);
    }
}
