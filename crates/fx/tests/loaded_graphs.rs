//! Graphs read from outside are checked when read: a hand-edited `graph.json` or `weights.safetensors`
//! of a saved artifact, or hand-written graph text, is an error naming what is wrong, never a
//! panic in a later pass or in `run`.

use serde_json::{Value, json};
use std::error::Error as _;
use tessera_fx::artifact::{load, run_standalone, save};
use tessera_fx::trace::TracedGraph;
use tessera_fx::{ArtifactError, FxError, Graph};
use tessera_nn::{StateDict, save_safetensors};
use tessera_tensor::{DType, Tensor};

const GRAPH: &str = "\
graph(x: f32[2, 3]):
    %w : f32[3] = get_attr[w]
    %add : f32[2, 3] = call_function[add](%x, %w)
    %relu : f32[2, 3] = call_function[relu](%add)
    return %relu
";

/// The artifact of [`GRAPH`] with `w = [1, 2, 3]`, saved into a fresh folder.
fn saved() -> tempfile::TempDir {
    let traced = TracedGraph {
        graph: Graph::parse(GRAPH).unwrap(),
        attributes: [(
            "w".to_string(),
            Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).unwrap(),
        )]
        .into_iter()
        .collect(),
    };
    let dir = tempfile::tempdir().unwrap();
    save(&traced, dir.path()).unwrap();
    dir
}

/// The node called `name` in a `graph.json` value.
fn node<'a>(graph: &'a mut Value, name: &str) -> &'a mut Value {
    graph["nodes"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|n| n["name"] == name)
        .unwrap()
}

/// Loads the artifact after `edit` changed its `graph.json`.
fn load_edited_graph(edit: impl Fn(&mut Value)) -> FxError {
    let dir = saved();
    let path = dir.path().join("graph.json");
    let mut graph: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut graph);
    std::fs::write(&path, serde_json::to_string_pretty(&graph).unwrap()).unwrap();
    match load(dir.path()) {
        Ok(_) => panic!("a hand-edited graph.json loaded"),
        Err(e) => e,
    }
}

/// Loads the artifact after its weights were replaced by `weights`.
fn load_with_weights(weights: &[(&str, Tensor)]) -> FxError {
    let dir = saved();
    let mut state = StateDict::new();
    for (name, tensor) in weights {
        state.insert(*name, tensor.clone());
    }
    save_safetensors(&state, dir.path().join("weights.safetensors")).unwrap();
    match load(dir.path()) {
        Ok(_) => panic!("weights that disagree with the graph loaded"),
        Err(e) => e,
    }
}

fn assert_names(err: &FxError, needle: &str) {
    let text = err.to_string();
    assert!(text.contains(needle), "{needle:?} not in {text:?}");
    assert!(
        err.source().is_some(),
        "an artifact error keeps its cause: {err:?}"
    );
}

#[test]
fn the_unedited_artifact_loads_and_runs() {
    let dir = saved();
    let loaded = load(dir.path()).unwrap();
    let out = run_standalone(&loaded, &[Tensor::zeros(&[2, 3], DType::F32).unwrap()]).unwrap();
    assert_eq!(out[0].to_vec::<f32>().unwrap(), [1., 2., 3., 1., 2., 3.]);
}

#[test]
fn hand_edited_graph_json_is_refused_naming_the_problem() {
    type Edit = fn(&mut Value);
    let invalid: [(&str, Edit, &str); 6] = [
        (
            "wrong shape",
            |g| node(g, "relu")["meta"][0]["shape"] = json!([3, 2]),
            "%relu: meta f32[3, 2] disagrees with call_function[relu], which gives f32[2, 3]",
        ),
        (
            "cycle",
            |g| node(g, "add")["operands"] = json!(["x", "relu"]),
            "graph: the graph has a cycle",
        ),
        (
            "output missing",
            |g| {
                g["nodes"].as_array_mut().unwrap().pop();
            },
            "graph: the graph has no output",
        ),
        (
            "get_attr of a missing weight",
            |g| node(g, "w")["kind"] = json!({"GetAttr": {"target": "v"}}),
            "%w: get_attr[v] names no known parameter or buffer",
        ),
        (
            "wrong operand count",
            |g| node(g, "relu")["operands"] = json!(["add", "x"]),
            "%relu: call_function[relu] on (f32[2, 3], f32[2, 3])",
        ),
        (
            "output not last",
            |g| {
                let nodes = g["nodes"].as_array_mut().unwrap();
                let output = nodes.pop().unwrap();
                nodes.insert(3, output);
            },
            "the output is not the last node",
        ),
    ];
    for (case, edit, needle) in invalid {
        let err = load_edited_graph(edit);
        assert!(
            matches!(
                &err,
                FxError::Artifact {
                    source: ArtifactError::Invalid { .. },
                    ..
                }
            ),
            "{case}: {err:?}"
        );
        assert_names(&err, needle);
        assert!(err.to_string().contains("problem(s)"), "{case}: {err}");
    }
    let unreadable: [(&str, Edit, &str); 3] = [
        (
            "dangling operand",
            |g| node(g, "relu")["operands"] = json!(["nope"]),
            "%relu uses unknown node %nope",
        ),
        (
            "unknown op",
            |g| node(g, "relu")["kind"] = json!({"CallFunction": {"op": "Frobnicate"}}),
            "Frobnicate",
        ),
        (
            "duplicate name",
            |g| node(g, "relu")["name"] = json!("add"),
            "two nodes are named %add",
        ),
    ];
    for (case, edit, needle) in unreadable {
        let err = load_edited_graph(edit);
        assert!(
            matches!(
                &err,
                FxError::Artifact {
                    source: ArtifactError::Json { .. },
                    ..
                }
            ),
            "{case}: {err:?}"
        );
        assert_names(&err, needle);
    }
}

#[test]
fn weights_that_disagree_with_the_graph_are_refused() {
    let cases = [
        (
            vec![("v", Tensor::zeros(&[3], DType::F32).unwrap())],
            "%w: get_attr[w] names no known parameter or buffer",
        ),
        (
            vec![("w", Tensor::zeros(&[1, 3], DType::F32).unwrap())],
            "%w: meta f32[3] disagrees with attribute w, which is f32[1, 3]",
        ),
        (
            vec![("w", Tensor::zeros(&[3], DType::F64).unwrap())],
            "%w: meta f32[3] disagrees with attribute w, which is f64[3]",
        ),
    ];
    for (weights, needle) in cases {
        let err = load_with_weights(&weights);
        assert!(
            matches!(
                &err,
                FxError::Artifact {
                    source: ArtifactError::Invalid { .. },
                    ..
                }
            ),
            "{err:?}"
        );
        assert_names(&err, needle);
    }
}

#[test]
fn hand_written_graph_text_is_refused_naming_the_problem() {
    let invalid = [
        (
            "wrong shape",
            "graph(x: f32[2, 3]):\n    %r : f32[3, 2] = call_function[relu](%x)\n    return %r\n",
            "%r: meta f32[3, 2] disagrees with call_function[relu], which gives f32[2, 3]",
        ),
        (
            "cycle",
            "graph(x: f32[2]):\n    %a : f32[2] = call_function[add](%x, %b)\n    %b : f32[2] = call_function[relu](%a)\n    return %b\n",
            "graph: the graph has a cycle",
        ),
        (
            "output missing",
            "graph(x: f32[2]):\n    %r : f32[2] = call_function[relu](%x)\n",
            "graph: the graph has no output",
        ),
        (
            "getitem out of range",
            "graph(x: f32[2, 3]):\n    %m : (f32[2], i64[2]) = call_function[max]{dims: [1], keepdim: false, kind: MaxWithIndices}(%x)\n    %p : f32[2] = getitem[2](%m)\n    return %p\n",
            "%p: getitem[2] of %m, which yields 2 values",
        ),
        (
            "wrong operand count",
            "graph(x: f32[2]):\n    %a : f32[2] = call_function[add](%x)\n    return %a\n",
            "%a: call_function[add] on (f32[2]): add: expected 2 inputs, got 1",
        ),
    ];
    for (case, text, needle) in invalid {
        let err = Graph::parse(text).expect_err(case);
        assert!(matches!(err, FxError::Verify(_)), "{case}: {err:?}");
        assert!(err.to_string().contains(needle), "{case}: {err}");
        // The same text reads without verification, for tests that build invalid graphs.
        assert!(Graph::parse_unverified(text).is_ok(), "{case}");
    }
    let unreadable = [
        (
            "dangling operand",
            "graph(x: f32[2]):\n    %r : f32[2] = call_function[relu](%y)\n    return %r\n",
            "line 2, column 40: unknown node %y",
        ),
        (
            "unknown op",
            "graph(x: f32[2]):\n    %r : f32[2] = call_function[frobnicate](%x)\n    return %r\n",
            "no op `frobnicate`",
        ),
    ];
    for (case, text, needle) in unreadable {
        let err = Graph::parse(text).expect_err(case);
        assert!(matches!(err, FxError::Parse(_)), "{case}: {err:?}");
        assert!(err.to_string().contains(needle), "{case}: {err}");
    }
}
