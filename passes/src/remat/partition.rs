//! The two parts of a joint graph: the forward (every node its forward results and buffer
//! mutations need, and the `getitem`s of those nodes' several values) and the backward
//! (everything else but the output). The forward values the backward reads are what a
//! training step keeps alive from forward to backward: its saved activations.

use crate::{PassError, Result};
use std::collections::{HashMap, HashSet};
use tessera_fx::{Graph, NodeId, NodeKind};

/// The forward and backward of a joint graph, and where they meet.
pub(super) struct Partition {
    /// Every node's place in the graph's order.
    pub position: HashMap<NodeId, usize>,
    /// The forward's nodes, in graph order.
    pub forward: Vec<NodeId>,
    /// Per forward node the backward reads, the backward nodes that read it (graph order).
    pub backward_users: HashMap<NodeId, Vec<NodeId>>,
}

impl Partition {
    /// Splits `graph`, whose first `forward_outputs` results (and buffer mutations) are the
    /// forward's; the other results are gradients.
    pub(super) fn of(graph: &Graph, forward_outputs: usize) -> Result<Partition> {
        let results = graph.results()?;
        if forward_outputs > results.len() {
            return Err(PassError::Unsupported(format!(
                "rematerialize: the graph returns {} results, fewer than the {forward_outputs} \
                 forward outputs asked for",
                results.len()
            )));
        }
        let mut roots: Vec<NodeId> = results[..forward_outputs].to_vec();
        roots.extend(graph.mutation_values()?.into_iter().map(|(_, v)| v));
        let mut is_forward: HashSet<NodeId> = HashSet::new();
        while let Some(id) = roots.pop() {
            if is_forward.insert(id) {
                roots.extend(graph.operands(&id)?);
            }
        }
        let order: Vec<NodeId> = graph.nodes().collect();
        // The values of a forward node with several outputs are forward values, wherever
        // their `getitem` was written (a backward formula reads a batch norm's saved
        // statistics through a getitem of its own).
        for id in &order {
            if matches!(graph.node(id)?.kind, NodeKind::GetItem { .. })
                && graph.operands(id)?.iter().all(|o| is_forward.contains(o))
            {
                is_forward.insert(*id);
            }
        }
        let position: HashMap<NodeId, usize> =
            order.iter().enumerate().map(|(i, id)| (*id, i)).collect();
        let forward: Vec<NodeId> = order
            .iter()
            .filter(|id| is_forward.contains(id))
            .copied()
            .collect();
        let mut backward_users: HashMap<NodeId, Vec<NodeId>> = HashMap::new();
        for id in &forward {
            let mut users: Vec<NodeId> = Vec::new();
            for user in graph.users(id)? {
                let is_output = matches!(graph.node(&user)?.kind, NodeKind::Output);
                if !is_output && !is_forward.contains(&user) && !users.contains(&user) {
                    users.push(user);
                }
            }
            if !users.is_empty() {
                users.sort_by_key(|u| position[u]);
                backward_users.insert(*id, users);
            }
        }
        Ok(Partition {
            position,
            forward,
            backward_users,
        })
    }

    /// The forward nodes the backward reads, in graph order.
    pub(super) fn read_by_backward(&self) -> impl Iterator<Item = &NodeId> {
        self.forward
            .iter()
            .filter(|id| self.backward_users.contains_key(id))
    }
}
