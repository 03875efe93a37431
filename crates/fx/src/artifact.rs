//! Saving a traced graph as a deployment artifact: the graph as JSON (serde) and the tensors
//! its `get_attr` nodes read as safetensors. An op-level graph loaded back runs without the
//! Rust type that defined the model (the successor of TorchScript's "run it outside Python").
//! Loading verifies the graph against itself and its weights, so a hand-edited `graph.json`
//! is an error here, never a panic in a later pass or in `run`.
//!
//! Saving is atomic for the folder as a whole: both files are written into a temporary
//! sibling folder (`.<name>.tessera-tmp-<pid>-<n>`) that then replaces the folder in one
//! exchange, so a failed or killed save leaves the previous artifact intact, and the next
//! save removes what a killed one left behind.

use crate::interpreter::{GraphInterpreter, run};
use crate::trace::TracedGraph;
use crate::{ArtifactError, FxError, Graph, Result, Role, RunError};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use tessera_nn::checkpoint::StagedDir;
use tessera_nn::{Module, ModuleCore, StateDict, load_safetensors, save_safetensors};
use tessera_tensor::{Tensor, TensorMeta};

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

/// Writes `graph.json` and `weights.safetensors` into the folder `dir` as one unit: readers,
/// and a save that fails or is killed at any point, see the whole previous artifact or the
/// whole new one (see the module docs).
pub fn save(traced: &TracedGraph, dir: impl AsRef<Path>) -> Result<()> {
    let dir = dir.as_ref();
    let json = serde_json::to_string_pretty(&traced.graph).map_err(json_error(dir))?;
    let weights: StateDict = traced
        .attributes
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let staged = StagedDir::new(dir).map_err(io_error(dir))?;
    let graph_path = staged.path().join(GRAPH_FILE);
    write_synced(&graph_path, json.as_bytes()).map_err(io_error(&graph_path))?;
    save_safetensors(&weights, staged.path().join(WEIGHTS_FILE)).map_err(weights_error(dir))?;
    staged.commit().map_err(io_error(dir))
}

/// Writes a new file and flushes it to the disk before the folder holding it is committed.
fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = std::fs::File::create_new(path)?;
    file.write_all(bytes)?;
    file.sync_all()
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
/// The graph must pass [`Graph::verify`] against the shapes and dtypes of its weights
/// ([`FxError::Verify`] otherwise), the inputs must have the shapes and dtypes of its
/// placeholders, and every output must have the shape and dtype the graph declares
/// ([`RunError::Mismatch`] otherwise), so a graph never returns what it does not declare.
pub fn run_standalone(traced: &TracedGraph, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let metas: BTreeMap<String, TensorMeta> = traced
        .attributes
        .iter()
        .map(|(name, tensor)| (name.clone(), tensor.meta()))
        .collect();
    traced.graph.verify_with_attribute_metas(&metas)?;
    let graph = &traced.graph;
    check_metas(
        Role::Input,
        &declared_metas(graph, &graph.placeholders())?,
        inputs,
    )?;
    let root = Standalone {
        core: ModuleCore::default(),
    };
    let mut interpreter = GraphInterpreter {
        root: root.as_module(),
        constants: Some(&traced.attributes),
    };
    let outputs = run(&mut interpreter, graph, inputs)?;
    let returned = match graph.output_node() {
        Some(output) => graph.operands(&output)?,
        None => Vec::new(),
    };
    check_metas(Role::Output, &declared_metas(graph, &returned)?, &outputs)?;
    Ok(outputs)
}

/// The meta each node in `ids` declares for its (first) value.
fn declared_metas(graph: &Graph, ids: &[crate::NodeId]) -> Result<Vec<Option<TensorMeta>>> {
    ids.iter()
        .map(|id| Ok(graph.node(id)?.meta.first().cloned()))
        .collect()
}

/// A [`RunError::Mismatch`] for the first tensor whose shape or dtype differs from its
/// declared meta (a node that declares none is not checked).
fn check_metas(role: Role, declared: &[Option<TensorMeta>], tensors: &[Tensor]) -> Result<()> {
    for (index, (meta, tensor)) in declared.iter().zip(tensors).enumerate() {
        let Some(meta) = meta else { continue };
        let got = tensor.meta();
        if &got != meta {
            return Err(FxError::RunGraph {
                source: RunError::Mismatch {
                    role,
                    index,
                    shape: meta.shape.clone(),
                    dtype: meta.dtype,
                    got_shape: got.shape,
                    got_dtype: got.dtype,
                },
            });
        }
    }
    Ok(())
}
