//! `trace`: runs a module on meta tensors with the recorder installed, parameters and
//! buffers swapped for meta tensors for the duration, and returns the recorded graph with
//! the tensors its `get_attr` nodes read.

use super::LeafPolicy;
use super::recording::Recording;
use crate::{FxError, Graph, NodeId, Result, TraceError};
use indexmap::IndexMap;
use std::collections::HashMap;
use std::sync::Arc;
use tessera_nn::module_trace::{as_caller, with_module_recorder};
use tessera_nn::{Call, Layer, Module, ModuleExt};
use tessera_tensor::trace::with_recorder;
use tessera_tensor::{Tensor, TensorMeta};

/// A traced graph and the tensors its `get_attr` nodes read, by qualified name.
#[derive(Clone)]
pub struct TracedGraph {
    pub graph: Graph,
    pub attributes: IndexMap<String, Tensor>,
}

/// A graph that reads no traced tensors (hand-built or parsed).
impl From<Graph> for TracedGraph {
    fn from(graph: Graph) -> Self {
        TracedGraph {
            graph,
            attributes: IndexMap::new(),
        }
    }
}

/// Puts the real data back into parameters and buffers when tracing ends, also on error.
struct RestoreData(Vec<(Tensor, Tensor)>);

impl Drop for RestoreData {
    fn drop(&mut self) {
        for (handle, data) in &self.0 {
            handle.set_data(data);
        }
    }
}

/// Traces a one-tensor-in, one-tensor-out module for an input of `input`'s shape and dtype
/// (a `TensorMeta` spec, or an example `&Tensor`).
pub fn trace<M: Layer>(
    module: &M,
    input: impl Into<TensorMeta>,
    policy: LeafPolicy,
) -> Result<TracedGraph> {
    trace_with(module, &[("x", input.into())], policy, |inputs| {
        Ok(vec![module.call(inputs[0].clone())?])
    })
}

/// Traces `run(inputs)`, which calls `module` with meta tensors of the given names, shapes
/// and dtypes and returns its outputs (several inputs and outputs, non-tensor arguments fixed
/// inside `run`, as FX's `concrete_args`).
pub fn trace_with(
    module: &dyn Module,
    inputs: &[(&str, TensorMeta)],
    policy: LeafPolicy,
    run: impl FnOnce(&[Tensor]) -> tessera_nn::Result<Vec<Tensor>>,
) -> Result<TracedGraph> {
    let mut names = HashMap::new();
    let mut attributes = IndexMap::new();
    let mut swapped = Vec::new();
    let state: Vec<(String, Tensor)> = module
        .named_parameters()
        .into_iter()
        .map(|(n, p)| (n, p.tensor().clone()))
        .chain(module.named_buffers())
        .collect();
    for (name, tensor) in state {
        names.insert(tensor.id(), name.clone());
        attributes.insert(name, tensor.detach());
        swapped.push((tensor.clone(), tensor.detach()));
        tensor.set_data(&Tensor::new_meta(&tensor.shape(), tensor.dtype()));
    }
    let _restore = RestoreData(swapped);

    let recording = Arc::new(Recording::new(names, attributes, policy));
    let placeholders: Vec<Tensor> = {
        let mut state = recording.state.lock().unwrap_or_else(|e| e.into_inner());
        inputs
            .iter()
            .map(|(name, meta)| {
                let t = Tensor::new_meta(&meta.shape, meta.dtype);
                let node = state.graph.placeholder(name, meta.clone());
                state.values.insert(t.id(), node);
                t
            })
            .collect()
    };
    let outputs = with_module_recorder(recording.clone(), || {
        with_recorder(recording.clone(), || {
            as_caller(module, || run(&placeholders))
        })
    })
    .map_err(|source| FxError::Trace {
        source: TraceError::Forward {
            source: Box::new(source),
        },
    })?;

    let mut state = recording.state.lock().unwrap_or_else(|e| e.into_inner());
    let results: Vec<NodeId> = outputs
        .iter()
        .map(|t| recording.operand(&mut state, t))
        .collect::<Result<_>>()?;
    let refs: Vec<&NodeId> = results.iter().collect();
    state.graph.output(&refs)?;
    for (name, node) in std::mem::take(&mut state.mutations) {
        state.graph.mutate_buffer(&name, &node)?;
    }
    let graph = std::mem::take(&mut state.graph);
    let attributes = std::mem::take(&mut state.attributes);
    Ok(TracedGraph { graph, attributes })
}
