//! Errors keep their cause: a caller can match on what went wrong (`FxError::Run { source:
//! RunError::Op { .. }, .. }`), `source()` leads to the underlying tensor, module, I/O or JSON
//! error, and the message still reads as one line naming the node, op and shapes.

use std::error::Error as _;
use tessera_fx::artifact::load;
use tessera_fx::interpreter::{GraphInterpreter, Interpreter, run};
use tessera_fx::rewrite::replace_pattern;
use tessera_fx::trace::{LeafPolicy, inline, trace};
use tessera_fx::{ArtifactError, FxError, Graph, InlineError, PatternError, RunError, TraceError};
use tessera_nn::models::SmallCnn;
use tessera_nn::{Call, ReLU};
use tessera_tensor::{DType, Tensor, TensorError, TensorMeta};

/// Runs `text` (a graph reading no weights) on `inputs` with the interpreter itself:
/// `run_standalone` would refuse the mismatched inputs and missing weights before running.
fn run_text(text: &str, inputs: &[Tensor]) -> tessera_fx::Result<Vec<Tensor>> {
    let root = ReLU::default();
    let mut interpreter = GraphInterpreter {
        root: &root,
        constants: None,
    };
    run(&mut interpreter, &Graph::parse(text).unwrap(), inputs)
}

fn zeros(shape: &[usize]) -> Tensor {
    Tensor::zeros(shape, DType::F32).unwrap()
}

const ADD: &str = "\
graph(x: f32[2, 3], y: f32[2, 3]):
    %add : f32[2, 3] = call_function[add](%x, %y)
    return %add
";

#[test]
fn a_failing_op_is_a_run_error_naming_the_node_with_the_tensor_error_as_source() {
    let err = run_text(ADD, &[zeros(&[2, 3]), zeros(&[4, 5])]).unwrap_err();
    let FxError::Run {
        node,
        source: RunError::Op { source },
    } = &err
    else {
        panic!("expected a run error of the add op, got {err:?}");
    };
    let TensorError::ShapeMismatch { op, lhs, rhs, .. } = source.as_ref() else {
        panic!("expected a shape mismatch, got {source:?}");
    };
    assert_eq!(node, "%add = call_function[add](%x, %y)");
    assert_eq!((op.as_str(), lhs, rhs), ("add", &vec![2, 3], &vec![4, 5]));
    assert!(
        err.to_string()
            .starts_with("while executing %add = call_function[add](%x, %y): add: shape mismatch"),
        "{err}"
    );
    let run_error = err.source().expect("the run error");
    assert!(run_error.source().is_some(), "the tensor error");
}

#[test]
fn graph_level_run_errors_say_graph() {
    let err = run_text(ADD, &[zeros(&[2, 3])]).unwrap_err();
    assert!(matches!(
        err,
        FxError::RunGraph {
            source: RunError::InputCount {
                expected: 2,
                got: 1
            }
        }
    ));
    assert_eq!(err.to_string(), "graph: expected 2 inputs, got 1");
}

#[test]
fn interpreter_methods_say_what_went_wrong_and_run_names_the_node() {
    let text = "\
graph(x: f32[2]):
    %w : f32[2] = get_attr[w]
    %c : f32[2] = call_module[c: ReLU()](%w)
    return %c
";
    let err = run_text(text, &[zeros(&[2])]).unwrap_err();
    assert!(
        matches!(
            &err,
            FxError::Run { node, source: RunError::MissingAttribute { target } }
                if node == "%w = get_attr[w]()" && target == "w"
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "while executing %w = get_attr[w](): no parameter, buffer or constant `w`"
    );
    // A method called on its own (as a pass does) has no node to fill in later: it says what
    // went wrong and the caller knows where.
    let relu = ReLU::default();
    let mut interpreter = GraphInterpreter {
        root: &relu,
        constants: None,
    };
    let graph = Graph::parse(text).unwrap();
    let c = graph.find("c").unwrap();
    let node = graph.node(&c).unwrap();
    let err = interpreter
        .call_module(node, "c", vec![zeros(&[2])])
        .unwrap_err();
    assert!(matches!(err, RunError::NoSubmodule { ref target, .. } if target == "c"));
    assert!(err.source().is_some(), "the module error is kept: {err:?}");
}

#[test]
fn a_shape_error_while_tracing_keeps_the_module_error() {
    let cnn = SmallCnn::new().unwrap();
    let err = match trace(
        &cnn,
        TensorMeta::new([1, 4, 16, 16], DType::F32),
        LeafPolicy::none(),
    ) {
        Ok(_) => panic!("4 channels into a 3-channel conv traced"),
        Err(e) => e,
    };
    assert!(
        matches!(
            err,
            FxError::Trace {
                source: TraceError::Forward { .. }
            }
        ),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(text.starts_with("trace: conv1"), "{text}");
    // The chain reaches the conv's own shape error: trace -> module (conv1) -> tensor op.
    let chain = std::iter::successors(err.source(), |&e| e.source());
    let shape_error = chain
        .filter_map(|e| e.downcast_ref::<TensorError>())
        .find(|e| matches!(e, TensorError::ShapeMismatch { op, .. } if op == "conv2d"));
    assert!(
        shape_error.is_some(),
        "the conv's shape error is the cause: {err:?}"
    );
}

#[test]
fn inlining_a_module_the_root_lacks_names_the_node_and_keeps_the_lookup_error() {
    let cnn = SmallCnn::new().unwrap();
    let mut traced = trace(
        &cnn,
        TensorMeta::new([1, 3, 16, 16], DType::F32),
        LeafPolicy::default(),
    )
    .unwrap();
    let other_root = ReLU::default();
    let err = inline(&mut traced, &other_root, |t| t == "conv1").unwrap_err();
    assert!(
        matches!(
            &err,
            FxError::Trace {
                source: TraceError::Inline {
                    node,
                    target,
                    source: InlineError::NoSubmodule { .. },
                },
            } if node == "%conv1" && target == "conv1"
        ),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with("trace: inlining %conv1 (conv1): ")
    );
}

#[test]
fn a_pattern_without_output_is_a_pattern_error() {
    let mut graph = Graph::parse(ADD).unwrap();
    let pattern = Graph::parse_unverified("graph(x: f32[2, 3]):\n").unwrap();
    let err = replace_pattern(&mut graph, &pattern, &pattern).unwrap_err();
    assert!(
        matches!(
            err,
            FxError::Pattern {
                problem: PatternError::NoOutput
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.to_string(), "rewrite: the pattern has no output");
}

#[test]
fn a_missing_artifact_is_an_io_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let Err(err) = load(dir.path().join("missing")) else {
        panic!("a missing folder loaded");
    };
    let FxError::Artifact {
        path,
        source: ArtifactError::Io { source },
    } = &err
    else {
        panic!("expected an I/O error, got {err:?}");
    };
    assert!(path.ends_with("graph.json"), "{path}");
    assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
    assert!(err.source().is_some());
}

#[test]
fn a_graph_module_that_fails_keeps_the_graph_error_whole() {
    let cnn = std::sync::Arc::new(SmallCnn::new().unwrap());
    let traced = trace(
        cnn.as_ref(),
        TensorMeta::new([1, 3, 16, 16], DType::F32),
        LeafPolicy::default(),
    )
    .unwrap();
    let gm = tessera_fx::GraphModule::new(cnn, traced);
    let err = gm.call(zeros(&[1, 4, 16, 16])).unwrap_err();
    let tessera_nn::NnError::Graph(source) = &err else {
        panic!("expected the graph error, got {err:?}");
    };
    let fx = source.downcast_ref::<FxError>().expect("an FxError");
    assert!(
        matches!(fx, FxError::Run { node, source: RunError::Module { .. } }
            if node == "%conv1 = call_module[conv1](%x)"),
        "{fx:?}"
    );
    assert!(
        err.to_string().starts_with("while executing %conv1"),
        "{err}"
    );
}
