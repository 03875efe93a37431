//! Saving a traced graph as a deployment artifact: the graph as JSON (serde) and the tensors
//! its `get_attr` nodes read as safetensors. An op-level graph loaded back runs without the
//! Rust type that defined the model (the successor of TorchScript's "run it outside Python").
//! Loading verifies the graph against itself and its weights, so a hand-edited `graph.json`
//! is an error here, never a panic in a later pass or in `run`.

use crate::interpreter::{GraphInterpreter, run};
use crate::trace::TracedGraph;
use crate::{ArtifactError, FxError, Graph, Result};
use std::collections::BTreeMap;
use std::path::Path;
use tessera_nn::{Module, ModuleCore, StateDict, load_safetensors, save_safetensors};
use tessera_tensor::Tensor;

const GRAPH_FILE: &str = "graph.json";
const WEIGHTS_FILE: &str = "weights.safetensors";

fn artifact_error(path: &Path, source: ArtifactError) -> FxError {
    FxError::Artifact {
        path: path.display().to_string(),
        source,
    }
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> FxError + '_ {
    move |source| artifact_error(path, ArtifactError::Io { source })
}

fn json_error(path: &Path) -> impl FnOnce(serde_json::Error) -> FxError + '_ {
    move |source| artifact_error(path, ArtifactError::Json { source })
}

fn weights_error(path: &Path) -> impl FnOnce(tessera_nn::NnError) -> FxError + '_ {
    move |source| {
        artifact_error(
            path,
            ArtifactError::Weights {
                source: Box::new(source),
            },
        )
    }
}

/// Writes `graph.json` and `weights.safetensors` into the folder `dir` (created if needed).
pub fn save(traced: &TracedGraph, dir: impl AsRef<Path>) -> Result<()> {
    let dir = dir.as_ref();
    std::fs::create_dir_all(dir).map_err(io_error(dir))?;
    let json = serde_json::to_string_pretty(&traced.graph).map_err(json_error(dir))?;
    let graph_path = dir.join(GRAPH_FILE);
    let temp = dir.join(format!(".{GRAPH_FILE}.tmp"));
    std::fs::write(&temp, json)
        .and_then(|_| std::fs::rename(&temp, &graph_path))
        .map_err(io_error(&graph_path))?;
    let weights: StateDict = traced
        .attributes
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    save_safetensors(&weights, dir.join(WEIGHTS_FILE)).map_err(weights_error(dir))
}

/// Reads what [`save`] wrote and verifies it: the graph must pass [`Graph::verify`], and every
/// `get_attr` must read a saved weight of the shape and dtype the graph says
/// ([`ArtifactError::Invalid`] lists every problem).
pub fn load(dir: impl AsRef<Path>) -> Result<TracedGraph> {
    let dir = dir.as_ref();
    let graph_path = dir.join(GRAPH_FILE);
    let json = std::fs::read_to_string(&graph_path).map_err(io_error(&graph_path))?;
    let graph: Graph = serde_json::from_str(&json).map_err(json_error(&graph_path))?;
    let weights = load_safetensors(dir.join(WEIGHTS_FILE)).map_err(weights_error(dir))?;
    let metas: BTreeMap<String, _> = weights
        .iter()
        .map(|(name, tensor)| (name.to_string(), tensor.meta()))
        .collect();
    graph
        .verify_with_attribute_metas(&metas)
        .map_err(|source| artifact_error(dir, ArtifactError::Invalid { source }))?;
    let attributes = weights.entries.into_iter().collect();
    Ok(TracedGraph { graph, attributes })
}

/// A module with no state: the root for running a loaded op-level graph on its own tensors.
#[derive(tessera_nn::Module)]
struct Standalone {
    core: ModuleCore,
}

/// Runs a loaded op-level graph; `call_module` nodes need their module and are an error.
pub fn run_standalone(traced: &TracedGraph, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let root = Standalone {
        core: ModuleCore::default(),
    };
    let mut interpreter = GraphInterpreter {
        root: root.as_module(),
        constants: Some(&traced.attributes),
    };
    run(&mut interpreter, &traced.graph, inputs)
}
