//! The decision: which forward values the backward keeps and which it recomputes, as the
//! minimum cut of a flow network (AOTAutograd's min-cut partitioner). Each forward node is
//! an edge `in -> out` whose capacity is the bytes of its values: cutting it means keeping
//! them. Uses are infinite edges `out -> user's in`; every value the backward reads has an
//! infinite edge to the sink; inputs and nodes that must not be recomputed have an infinite
//! edge from the source (inputs cost nothing to keep). A finite cut separates the source
//! from every backward read, so each read is either kept or recomputed from kept values; the
//! cheapest such cut keeps the fewest bytes. Keeping every value the backward reads is one of
//! those cuts, so the minimum never keeps more. Of the minimum cuts, the one nearest the sink
//! is taken: it recomputes as little as any other.

use super::max_flow::{FlowNetwork, INFINITE};
use super::partition::Partition;
use super::policy::{Role, role, value_bytes};
use crate::Result;
use std::collections::{HashMap, HashSet};
use tessera_fx::{Graph, NodeId};
use tessera_tensor::TensorMeta;

const SOURCE: usize = 0;
const SINK: usize = 1;

/// What the backward does with each forward value it needs.
pub(super) struct Decision {
    /// Forward values kept for the backward (inputs aside), in graph order.
    pub kept: Vec<NodeId>,
    /// Forward nodes the backward computes again, in graph order.
    pub recomputed: Vec<NodeId>,
}

/// Solves the cut for `graph` split as `partition`, each node's values costing the bytes of
/// `metas` (the graph's own metas where `metas` has none).
pub(super) fn decide(
    graph: &Graph,
    partition: &Partition,
    metas: &HashMap<NodeId, Vec<TensorMeta>>,
) -> Result<Decision> {
    let index: HashMap<NodeId, usize> = partition
        .forward
        .iter()
        .enumerate()
        .map(|(k, id)| (*id, k))
        .collect();
    let (vin, vout) = (|k: usize| 2 + 2 * k, |k: usize| 3 + 2 * k);
    let mut network = FlowNetwork::new(2 + 2 * partition.forward.len());
    let mut roles = HashMap::with_capacity(partition.forward.len());
    for (k, id) in partition.forward.iter().enumerate() {
        let node = graph.node(id)?;
        let node_role = role(node);
        roles.insert(*id, node_role);
        let bytes = match metas.get(id) {
            Some(m) => value_bytes(m),
            None => value_bytes(&node.meta),
        };
        match node_role {
            Role::Input => {
                network.add_edge(SOURCE, vin(k), INFINITE);
                network.add_edge(vin(k), vout(k), 0);
            }
            Role::Kept => {
                network.add_edge(SOURCE, vin(k), INFINITE);
                network.add_edge(vin(k), vout(k), bytes);
            }
            Role::Recomputable => network.add_edge(vin(k), vout(k), bytes),
        }
        for operand in graph.operands(id)? {
            if let Some(&o) = index.get(&operand) {
                network.add_edge(vout(o), vin(k), INFINITE);
            }
        }
        if partition.backward_users.contains_key(id) {
            network.add_edge(vout(k), SINK, INFINITE);
        }
    }
    network.max_flow(SOURCE, SINK);
    let sink_side = network.reaches_sink(SINK);

    // Walk back from the backward's reads: a value whose `in` is on the sink side runs again
    // in the backward (its operands are needed there in turn); any other is kept.
    let mut kept: HashSet<NodeId> = HashSet::new();
    let mut recomputed: HashSet<NodeId> = HashSet::new();
    let mut pending: Vec<NodeId> = partition.read_by_backward().copied().collect();
    while let Some(id) = pending.pop() {
        let k = index[&id];
        let recompute = roles[&id] == Role::Recomputable && sink_side[vin(k)];
        if recompute {
            if recomputed.insert(id) {
                pending.extend(graph.operands(&id)?);
            }
        } else if roles[&id] != Role::Input {
            kept.insert(id);
        }
    }
    let in_order = |set: &HashSet<NodeId>| -> Vec<NodeId> {
        partition
            .forward
            .iter()
            .filter(|id| set.contains(id))
            .copied()
            .collect()
    };
    Ok(Decision {
        kept: in_order(&kept),
        recomputed: in_order(&recomputed),
    })
}
