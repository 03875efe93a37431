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
    for id in graph.nodes() {
        let node = graph.node(&id)?;
        let args: Vec<NodeId> = graph
            .operands(&id)?
            .iter()
            .map(|o| {
                map.get(o).cloned().ok_or_else(|| FxError::UnknownNode {
                    node: o.to_string(),
                })
            })
            .collect::<Result<_>>()?;
        let built = match &node.kind {
            NodeKind::Placeholder { .. } => transformer.placeholder(&mut new, node)?,
            NodeKind::GetAttr { target } => transformer.get_attr(&mut new, node, target)?,
            NodeKind::CallModule {
                target,
                kind,
                module_repr,
            } => transformer.call_module(&mut new, node, target, kind, module_repr, &args)?,
            NodeKind::CallFunction { op } => {
                transformer.call_function(&mut new, node, op, &args)?
            }
            NodeKind::GetItem { index } => transformer.getitem(&mut new, node, *index, &args)?,
            NodeKind::Output => transformer.output(&mut new, node, &args)?,
        };
        map.insert(id, built);
    }
    Ok(new)
}
