//! Inlining: chosen `call_module` nodes are replaced by the ops of their module, traced at the
//! node's input shape, with `get_attr` nodes of the module's parameters under its path; the
//! same graph can then be seen at module level or at op level.

use super::{LeafPolicy, TracedGraph, trace_with};
use crate::{FxError, Graph, InlineError, NodeId, NodeKind, Result, TraceError};
use std::collections::HashMap;
use tessera_nn::{Call, Module, ModuleExt};

/// Expands every `call_module` node whose target `select` accepts (e.g. `|_| true` for all).
pub fn inline(
    traced: &mut TracedGraph,
    root: &dyn Module,
    select: impl Fn(&str) -> bool,
) -> Result<usize> {
    let calls: Vec<(NodeId, String)> = traced
        .graph
        .nodes()
        .filter_map(|id| match &traced.graph.node(&id).ok()?.kind {
            NodeKind::CallModule { target, .. } if select(target) => Some((id, target.clone())),
            _ => None,
        })
        .collect();
    for (node, target) in &calls {
        inline_one(traced, root, node, target)?;
    }
    Ok(calls.len())
}

fn inline_one(
    traced: &mut TracedGraph,
    root: &dyn Module,
    node: &NodeId,
    target: &str,
) -> Result<()> {
    let shown = traced.graph.display(node);
    let fail = |source: InlineError| FxError::Trace {
        source: TraceError::Inline {
            node: shown.clone(),
            target: target.into(),
            source,
        },
    };
    let module = root.get_submodule(target).map_err(|source| {
        fail(InlineError::NoSubmodule {
            source: Box::new(source),
        })
    })?;
    let layer = module
        .as_layer()
        .ok_or_else(|| fail(InlineError::NotALayer))?;
    let operands = traced.graph.operands(node)?;
    let [input] = operands.as_slice() else {
        return Err(fail(InlineError::OperandCount {
            count: operands.len(),
        }));
    };
    let meta = traced
        .graph
        .node(input)?
        .meta
        .first()
        .cloned()
        .ok_or_else(|| fail(InlineError::NoOperandValue))?;
    let sub = trace_with(module, &[("x", meta)], LeafPolicy::none(), |t| {
        Ok(vec![layer.call(t[0].clone())?])
    })?;
    for (name, tensor) in &sub.attributes {
        traced
            .attributes
            .entry(format!("{target}.{name}"))
            .or_insert_with(|| tensor.clone());
    }
    let input = *input;
    let outputs = traced
        .graph
        .insert_before(node, |g| splice(g, &sub.graph, &input, target))?;
    // The module's result comes first; the buffers it writes (a training batch norm's running
    // statistics) become buffer mutations of the whole graph, under the module's path.
    let mutations = sub.graph.buffer_mutations();
    let result_count = outputs.len().saturating_sub(mutations.len());
    let result = outputs
        .first()
        .filter(|_| result_count == 1)
        .copied()
        .ok_or_else(|| FxError::Trace {
            source: TraceError::NoOutput {
                module: target.into(),
            },
        })?;
    for (name, value) in mutations.iter().zip(&outputs[result_count..]) {
        traced
            .graph
            .mutate_buffer(&format!("{target}.{name}"), value)?;
    }
    traced.graph.replace_all_uses_with(node, &result)?;
    traced.graph.erase(node)?;
    Ok(())
}

/// Copies `sub`'s nodes into `g`: its placeholder is `input`, its attributes move under
/// `prefix`; returns the nodes standing for its outputs.
fn splice(g: &mut Graph, sub: &Graph, input: &NodeId, prefix: &str) -> Result<Vec<NodeId>> {
    let mut map: HashMap<NodeId, NodeId> = sub
        .placeholders()
        .into_iter()
        .map(|p| (p, *input))
        .collect();
    let outputs = g.append_graph_with(sub, &mut map, |g, node, operands| {
        let refs: Vec<&NodeId> = operands.iter().collect();
        match &node.kind {
            NodeKind::GetAttr { target } => {
                g.get_attr(&format!("{prefix}.{target}"), node.meta[0].clone())
            }
            NodeKind::CallFunction { op } => g.call_function(op.clone(), &refs),
            NodeKind::GetItem { index } => g.getitem(&operands[0], *index),
            _ => Err(FxError::Trace {
                source: TraceError::NestedModuleCall {
                    module: prefix.into(),
                },
            }),
        }
    })?;
    Ok(outputs)
}
