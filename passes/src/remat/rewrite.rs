//! Carries out a decision: each recomputed forward node gets a copy named
//! `<name>_recomputed`, placed just before the first backward node that needs it (directly or
//! through another copy), and the backward's reads of the original are moved to the copy.
//! The forward is not touched: it still computes every value for its own results.

use super::partition::Partition;
use crate::{PassError, Result};
use std::collections::HashMap;
use tessera_fx::{Graph, NodeId, NodeKind};

/// Copies `recomputed` (forward nodes in graph order) into the backward of `graph` and
/// rewires the backward's reads; returns each original with its copy, in graph order.
pub(super) fn recompute_in_backward(
    graph: &mut Graph,
    partition: &Partition,
    recomputed: &[NodeId],
) -> Result<Vec<(NodeId, NodeId)>> {
    // Where each copy goes: before the earliest backward node that reads it or reads a copy
    // that needs it. Users come later in graph order, so a reverse walk sees them first.
    let mut anchor: HashMap<NodeId, NodeId> = HashMap::new();
    for id in recomputed.iter().rev() {
        let mut first: Option<NodeId> = None;
        let mut consider = |candidate: NodeId| {
            let earlier =
                first.is_none_or(|f| partition.position[&candidate] < partition.position[&f]);
            if earlier {
                first = Some(candidate);
            }
        };
        for user in partition.backward_users.get(id).into_iter().flatten() {
            consider(*user);
        }
        for user in graph.users(id)? {
            if let Some(&a) = anchor.get(&user) {
                consider(a);
            }
        }
        let first = first.ok_or_else(|| {
            PassError::Unsupported(format!(
                "rematerialize: {} was chosen for recomputation but no backward node needs it",
                graph.display(id)
            ))
        })?;
        anchor.insert(*id, first);
    }

    let mut copies: HashMap<NodeId, NodeId> = HashMap::new();
    let mut pairs = Vec::with_capacity(recomputed.len());
    for id in recomputed {
        let node = graph.node(id)?.clone();
        let NodeKind::CallFunction { op } = node.kind else {
            return Err(PassError::Unsupported(format!(
                "rematerialize: only op calls are recomputed, not {}",
                graph.display(id)
            )));
        };
        let operands: Vec<NodeId> = graph
            .operands(id)?
            .iter()
            .map(|o| copies.get(o).copied().unwrap_or(*o))
            .collect();
        let refs: Vec<&NodeId> = operands.iter().collect();
        let name = format!("{}_recomputed", node.name);
        let copy = graph.insert_before(&anchor[id], |g| {
            g.call_function_named(&name, op.clone(), &refs)
        })?;
        if !node.metadata.is_empty() {
            *graph.metadata_mut(&copy)? = node.metadata.clone();
        }
        copies.insert(*id, copy);
        pairs.push((*id, copy));
    }

    for (original, copy) in &pairs {
        for user in partition.backward_users.get(original).into_iter().flatten() {
            let operands = graph.operands(user)?;
            for (position, operand) in operands.iter().enumerate() {
                if operand == original {
                    graph.set_operand(user, position, copy)?;
                }
            }
        }
    }
    Ok(pairs)
}
