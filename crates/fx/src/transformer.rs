//! The transformer (FX's `Transformer`): rebuilds a graph while visiting it, one overridable
//! method per opcode; the defaults copy each node, so an implementation overrides only what it
//! rewrites (e.g. `call_function` swapping one op for another).

use crate::{FxError, Graph, Node, NodeId, NodeKind, Result};
use std::collections::HashMap;
use tessera_nn::ModuleKind;
use tessera_tensor::Op;

/// Builds the node standing for each node of the source graph in the new graph.
pub trait Transformer {
    fn placeholder(&mut self, new: &mut Graph, node: &Node) -> Result<NodeId> {
        Ok(new.placeholder(&node.name, node.meta[0].clone()))
    }

    fn get_attr(&mut self, new: &mut Graph, node: &Node, target: &str) -> Result<NodeId> {
        new.get_attr(target, node.meta[0].clone())
    }

    fn call_module(
        &mut self,
        new: &mut Graph,
        node: &Node,
        target: &str,
        kind: &ModuleKind,
        module_repr: &str,
        args: &[NodeId],
    ) -> Result<NodeId> {
        let refs: Vec<&NodeId> = args.iter().collect();
        new.call_module(target, kind.clone(), module_repr, &refs, node.meta.clone())
    }

    fn call_function(
        &mut self,
        new: &mut Graph,
        _node: &Node,
        op: &Op,
        args: &[NodeId],
    ) -> Result<NodeId> {
        let refs: Vec<&NodeId> = args.iter().collect();
        new.call_function(op.clone(), &refs)
    }

    fn getitem(
        &mut self,
        new: &mut Graph,
        _node: &Node,
        index: usize,
        args: &[NodeId],
    ) -> Result<NodeId> {
        let operand = args.first().ok_or_else(|| FxError::UnknownNode {
            node: "getitem operand".into(),
        })?;
        new.getitem(operand, index)
    }

    fn output(&mut self, new: &mut Graph, _node: &Node, args: &[NodeId]) -> Result<NodeId> {
        let refs: Vec<&NodeId> = args.iter().collect();
        new.output(&refs)
    }
}

/// Visits `graph` in order and returns the graph `transformer` builds.
pub fn transform(graph: &Graph, transformer: &mut dyn Transformer) -> Result<Graph> {
    let mut new = Graph::new();
    let mut map: HashMap<NodeId, NodeId> = HashMap::new();
    let outputs = new.append_graph_with(graph, &mut map, |new, node, args| match &node.kind {
        NodeKind::Placeholder { .. } => transformer.placeholder(new, node),
        NodeKind::GetAttr { target } => transformer.get_attr(new, node, target),
        NodeKind::CallModule {
            target,
            kind,
            module_repr,
        } => transformer.call_module(new, node, target, kind, module_repr, args),
        NodeKind::CallFunction { op } => transformer.call_function(new, node, op, args),
        NodeKind::GetItem { index } => transformer.getitem(new, node, *index, args),
        NodeKind::Output => transformer.output(new, node, args),
    })?;
    if let Some(output) = graph.output_node() {
        transformer.output(&mut new, graph.node(&output)?, &outputs)?;
    }
    // The trailing outputs still write the same buffers (an `output` override that drops
    // them leaves a graph that fails verification).
    new.mutations = graph.mutations.clone();
    Ok(new)
}
