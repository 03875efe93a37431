//! Saving a traced graph as a deployment artifact: the graph as JSON (serde) and the tensors
//! its `get_attr` nodes read as safetensors. An op-level graph loaded back runs without the
//! Rust type that defined the model (the successor of TorchScript's "run it outside Python").

use crate::interpreter::{GraphInterpreter, run};
use crate::trace::TracedGraph;
use crate::{FxError, Graph, Result};
use std::path::Path;
use tessera_nn::{Module, ModuleCore, StateDict, load_safetensors, save_safetensors};
use tessera_tensor::Tensor;

const GRAPH_FILE: &str = "graph.json";
const WEIGHTS_FILE: &str = "weights.safetensors";

fn io_error(path: &Path, e: impl std::fmt::Display) -> FxError {
    FxError::Artifact {
        path: path.display().to_string(),
        reason: e.to_string(),
    }
}

/// Writes `graph.json` and `weights.safetensors` into the folder `dir` (created if needed).
pub fn save(traced: &TracedGraph, dir: impl AsRef<Path>) -> Result<()> {
    let dir = dir.as_ref();
    std::fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
    let json = serde_json::to_string_pretty(&traced.graph).map_err(|e| io_error(dir, e))?;
    let graph_path = dir.join(GRAPH_FILE);
    let temp = dir.join(format!(".{GRAPH_FILE}.tmp"));
    std::fs::write(&temp, json)
        .and_then(|_| std::fs::rename(&temp, &graph_path))
        .map_err(|e| io_error(&graph_path, e))?;
    let weights: StateDict = traced
        .attributes
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    save_safetensors(&weights, dir.join(WEIGHTS_FILE)).map_err(|e| io_error(dir, e))
}

/// Reads what [`save`] wrote.
pub fn load(dir: impl AsRef<Path>) -> Result<TracedGraph> {
    let dir = dir.as_ref();
    let graph_path = dir.join(GRAPH_FILE);
    let json = std::fs::read_to_string(&graph_path).map_err(|e| io_error(&graph_path, e))?;
    let graph: Graph = serde_json::from_str(&json).map_err(|e| io_error(&graph_path, e))?;
    let weights = load_safetensors(dir.join(WEIGHTS_FILE)).map_err(|e| io_error(dir, e))?;
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
