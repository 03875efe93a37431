//! Running a loaded graph that passed verification on small inputs of its placeholders'
//! shapes: the run is an error or yields the shapes and dtypes the graph declares.

use indexmap::IndexMap;
use tessera_fx::artifact::run_standalone;
use tessera_fx::trace::TracedGraph;
use tessera_fx::{Graph, NodeKind};
use tessera_tensor::{Tensor, TensorMeta};

/// Elements all values of a graph may hold together for the graph to be run (larger ones are
/// only loaded, to keep each fuzz input fast).
const RUN_BUDGET: usize = 1 << 16;

/// Every value's meta of every node, in graph order.
fn all_metas(graph: &Graph) -> impl Iterator<Item = &TensorMeta> {
    graph
        .nodes()
        .filter_map(|id| graph.node(&id).ok())
        .flat_map(|node| node.meta.iter())
}

/// Tensors of ones for the `get_attr` targets of `graph`, standing in for weights that a
/// printed graph does not carry; `None` if one of them cannot be made.
pub(crate) fn ones_for_attributes(graph: &Graph) -> Option<IndexMap<String, Tensor>> {
    if all_metas(graph).fold(0usize, |sum, m| sum.saturating_add(m.numel())) > RUN_BUDGET {
        return None;
    }
    let mut attributes = IndexMap::new();
    for id in graph.nodes() {
        let node = graph.node(&id).ok()?;
        if let NodeKind::GetAttr { target } = &node.kind {
            let meta = node.meta.first()?;
            attributes.insert(
                target.clone(),
                Tensor::full(&meta.shape, 1.0, meta.dtype).ok()?,
            );
        }
    }
    Some(attributes)
}

/// Runs `traced` on ones when its values are small; panics if the run panics or returns
/// outputs of other shapes or dtypes than the graph declares.
pub(crate) fn run_if_small(traced: &TracedGraph) {
    let graph = &traced.graph;
    if all_metas(graph).fold(0usize, |sum, m| sum.saturating_add(m.numel())) > RUN_BUDGET {
        return;
    }
    let mut inputs = Vec::new();
    for id in graph.placeholders() {
        let Some(meta) = graph.node(&id).ok().and_then(|n| n.meta.first()) else {
            return;
        };
        let Ok(input) = Tensor::full(&meta.shape, 1.0, meta.dtype) else {
            return;
        };
        inputs.push(input);
    }
    let Ok(outputs) = run_standalone(traced, &inputs) else {
        return;
    };
    let Some(output) = graph.output_node() else {
        return;
    };
    let declared: Vec<TensorMeta> = graph
        .operands(&output)
        .unwrap_or_default()
        .iter()
        .filter_map(|o| graph.node(o).ok()?.meta.first().cloned())
        .collect();
    let actual: Vec<TensorMeta> = outputs.iter().map(Tensor::meta).collect();
    assert_eq!(
        actual, declared,
        "running a verified graph gave outputs other than it declares"
    );
}
