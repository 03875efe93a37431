//! Regions: maximal connected sets of call_function nodes whose ops the e-graph language
//! expresses, with their inputs (leaves: every other value they read) and their roots (the
//! values something outside the region, or the output, uses).

use super::language::is_supported;
use crate::Result;
use std::collections::{HashMap, HashSet};
use tessera_fx::{Graph, NodeId, NodeKind};

/// One region, every list in graph order (leaves in the order they are first read).
#[derive(Debug, Clone)]
pub struct Region {
    pub nodes: Vec<NodeId>,
    pub leaves: Vec<NodeId>,
    pub roots: Vec<NodeId>,
}

/// Whether `id` is a node the region can hold: a single-value call of a supported op.
fn in_language(graph: &Graph, id: &NodeId) -> Result<bool> {
    let node = graph.node(id)?;
    Ok(match &node.kind {
        NodeKind::CallFunction { op } => is_supported(op) && node.meta.len() == 1,
        _ => false,
    })
}

fn find(parent: &mut HashMap<NodeId, NodeId>, id: &NodeId) -> NodeId {
    let mut root = *id;
    while let Some(p) = parent.get(&root).filter(|p| **p != root) {
        root = *p;
    }
    let mut at = *id;
    while at != root {
        let next = parent.insert(at, root).unwrap_or(root);
        at = next;
    }
    root
}

/// The graph's regions, in the order of their first node.
pub fn regions(graph: &Graph) -> Result<Vec<Region>> {
    let order: Vec<NodeId> = graph.nodes().collect();
    let mut parent: HashMap<NodeId, NodeId> = HashMap::new();
    for id in &order {
        if in_language(graph, id)? {
            parent.insert(*id, *id);
        }
    }
    for id in &order {
        if !parent.contains_key(id) {
            continue;
        }
        for operand in graph.operands(id)? {
            if parent.contains_key(&operand) {
                let (a, b) = (find(&mut parent, id), find(&mut parent, &operand));
                if a != b {
                    parent.insert(a, b);
                }
            }
        }
    }
    let mut index: HashMap<NodeId, usize> = HashMap::new();
    let mut regions: Vec<Region> = Vec::new();
    for id in &order {
        if !parent.contains_key(id) {
            continue;
        }
        let rep = find(&mut parent, id);
        let i = *index.entry(rep).or_insert_with(|| {
            regions.push(Region {
                nodes: Vec::new(),
                leaves: Vec::new(),
                roots: Vec::new(),
            });
            regions.len() - 1
        });
        regions[i].nodes.push(*id);
    }
    for region in &mut regions {
        let members: HashSet<&NodeId> = region.nodes.iter().collect();
        let mut leaves: Vec<NodeId> = Vec::new();
        let mut seen_leaves: HashSet<NodeId> = HashSet::new();
        let mut roots = Vec::new();
        for id in &region.nodes {
            for operand in graph.operands(id)? {
                if !members.contains(&operand) && seen_leaves.insert(operand) {
                    leaves.push(operand);
                }
            }
            let users = graph.users(id)?;
            if users.is_empty() || users.iter().any(|u| !members.contains(u)) {
                roots.push(*id);
            }
        }
        region.leaves = leaves;
        region.roots = roots;
    }
    Ok(regions)
}
