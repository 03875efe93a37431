//! Writing the extracted terms back into the IR. Each root's best term is built just before the
//! root, reusing the original node wherever the term computes exactly what it computed, and
//! nodes built for earlier roots; then every use of the root moves to the built value, and the
//! region's nodes (and built nodes) nobody uses any more are erased. A term that would read a
//! value defined after its root leaves that root as it was, so regions need not be convex.
//! Extraction picks each root's term on its own; when the roots' terms together cost more than
//! the region did (shared values built twice), the region is restored.

use super::analysis::{TensorGraph, op_of};
use super::cost::{KernelCost, op_cost};
use super::language::TensorLang;
use super::region::Region;
use crate::Result;
use egg::{Extractor, Id};
use std::collections::{HashMap, HashSet};
use tessera_fx::{Graph, NodeId, NodeKind};

/// Builds the nodes of one region's extracted terms.
struct Builder<'a> {
    egraph: &'a TensorGraph,
    extractor: Extractor<'a, KernelCost<'a>, TensorLang, super::analysis::ShapeAnalysis>,
    /// Position of each node in the graph order before the rewrite; built nodes take their
    /// root's position (they sit just before it).
    position: HashMap<NodeId, usize>,
    /// The node standing for each (canonical) class built so far.
    built: HashMap<Id, NodeId>,
    /// The region's nodes by what they compute: op (with attributes) and operands.
    originals: HashMap<(String, Vec<NodeId>), NodeId>,
    leaves: &'a [NodeId],
    new_nodes: Vec<NodeId>,
}

impl Builder<'_> {
    /// The node computing the best term of `class`, built before `root`; `None` when the term
    /// needs a value that is not defined before `root`.
    fn build(&mut self, graph: &mut Graph, class: Id, root: &NodeId) -> Result<Option<NodeId>> {
        let limit = self.position.get(root).copied().unwrap_or(0);
        let class = self.egraph.find(class);
        let mut stack = vec![(class, false)];
        let mut expanding: HashSet<Id> = HashSet::new();
        while let Some((class, ready)) = stack.pop() {
            if self.built.contains_key(&class) {
                continue;
            }
            let enode = self.extractor.find_best_node(class).clone();
            if let TensorLang::Leaf(leaf) = enode {
                let Some(node) = self.leaves.get(leaf.0 as usize) else {
                    return Ok(None);
                };
                if self.position.get(node).is_none_or(|&p| p > limit) {
                    return Ok(None);
                }
                self.built.insert(class, node.clone());
                continue;
            }
            let Some((op, operands)) = op_of(self.egraph, &enode) else {
                return Ok(None);
            };
            let operands: Vec<Id> = operands.iter().map(|&c| self.egraph.find(c)).collect();
            if !ready {
                // A class met again while its operands are being built is a cycle.
                if !expanding.insert(class) {
                    return Ok(None);
                }
                stack.push((class, true));
                for &c in operands.iter().rev() {
                    if !self.built.contains_key(&c) {
                        stack.push((c, false));
                    }
                }
                continue;
            }
            let mut values = Vec::with_capacity(operands.len());
            for c in &operands {
                match self.built.get(c) {
                    Some(v) => values.push(v.clone()),
                    None => return Ok(None),
                }
            }
            let key = (format!("{op:?}"), values.clone());
            let node = match self.originals.get(&key) {
                Some(original) if self.position.get(original).is_some_and(|&p| p <= limit) => {
                    original.clone()
                }
                _ => {
                    let refs: Vec<&NodeId> = values.iter().collect();
                    let node = graph.insert_before(root, |g| g.call_function(op, &refs))?;
                    self.position.insert(node.clone(), limit);
                    self.new_nodes.push(node.clone());
                    node
                }
            };
            self.built.insert(class, node);
        }
        Ok(self.built.get(&class).cloned())
    }
}

/// Replaces `region` by the cheapest terms of its roots' classes (`class_of` maps each region
/// node to its class); returns whether any root was replaced.
pub fn write_back(
    graph: &mut Graph,
    region: &Region,
    egraph: &TensorGraph,
    class_of: &HashMap<NodeId, Id>,
    cost: KernelCost<'_>,
) -> Result<bool> {
    let saved = graph.clone();
    let cost_before = cost_of(graph, region.nodes.iter())?;
    let position: HashMap<NodeId, usize> =
        graph.nodes().enumerate().map(|(i, id)| (id, i)).collect();
    let mut originals = HashMap::new();
    for id in &region.nodes {
        if let NodeKind::CallFunction { op } = &graph.node(id)?.kind {
            let key = (format!("{op:?}"), graph.operands(id)?);
            originals.entry(key).or_insert_with(|| id.clone());
        }
    }
    // Nodes that were dead before stay (removing them is dead code elimination's job).
    let mut erasable: HashSet<NodeId> = HashSet::new();
    for id in &region.nodes {
        if !graph.users(id)?.is_empty() {
            erasable.insert(id.clone());
        }
    }
    let mut builder = Builder {
        egraph,
        extractor: Extractor::new(egraph, cost),
        position,
        built: HashMap::new(),
        originals,
        leaves: &region.leaves,
        new_nodes: Vec::new(),
    };
    let mut replacements = Vec::new();
    for root in &region.roots {
        if graph.users(root)?.is_empty() {
            continue;
        }
        let Some(&class) = class_of.get(root) else {
            continue;
        };
        if let Some(value) = builder.build(graph, class, root)?
            && value != *root
        {
            replacements.push((root.clone(), value));
        }
    }
    if replacements.is_empty() {
        // Drop nodes built for roots that kept their terms, and the names they took.
        *graph = saved;
        return Ok(false);
    }
    for (root, value) in &replacements {
        graph.replace_all_uses_with(root, value)?;
    }
    erasable.extend(builder.new_nodes.iter().cloned());
    // One sweep against graph order suffices: a node's users come after it.
    let order: Vec<NodeId> = graph.nodes().collect();
    for id in order.iter().rev() {
        if erasable.contains(id) && graph.users(id)?.is_empty() {
            graph.erase(id)?;
        }
    }
    let kept = region.nodes.iter().chain(&builder.new_nodes);
    let cost_after = cost_of(graph, kept.filter(|id| graph.node(id).is_ok()))?;
    if cost_after >= cost_before {
        *graph = saved;
        return Ok(false);
    }
    Ok(true)
}

/// The summed cost of the call_function nodes `ids`.
fn cost_of<'a>(graph: &Graph, ids: impl Iterator<Item = &'a NodeId>) -> Result<f64> {
    let mut total = 0.0;
    for id in ids {
        let node = graph.node(id)?;
        if let (NodeKind::CallFunction { op }, Some(meta)) = (&node.kind, node.meta.first()) {
            total += op_cost(op, meta);
        }
    }
    Ok(total)
}
