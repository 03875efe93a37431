//! Writing the extracted terms back into the IR, in three steps whose work is proportional to
//! the region (and its roots' users), never to the graph:
//!
//! 1. Plan: each root's best term is planned just before the root, reusing the original node
//!    wherever the term computes exactly what it computed, and nodes planned for earlier roots.
//!    A term that would read a value defined after its root leaves that root as it was, so
//!    regions need not be convex.
//! 2. Judge: on a model of the region's uses, every use of a replaced root moves to its new
//!    value and the nodes nobody uses any more die. Extraction picks each root's term on its
//!    own; when the surviving nodes cost more than the region did (shared values built twice),
//!    or no root changed, the graph is left untouched.
//! 3. Commit: the surviving planned nodes are inserted, uses move, and the dead nodes are
//!    erased in the order they died (users first).

use super::analysis::{TensorGraph, meta_of, op_of};
use super::cost::{KernelCost, op_cost};
use super::language::TensorLang;
use super::region::Region;
use crate::{PassError, Result};
use egg::{Extractor, Id};
use std::collections::{HashMap, HashSet};
use tessera_fx::{Graph, NodeId, NodeKind};
use tessera_tensor::Op;

/// A value of the rewrite: a node of the graph, or a planned node (by number).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Value {
    Node(NodeId),
    Planned(usize),
}

/// A node to insert just before `root`.
struct PlannedNode {
    op: Op,
    operands: Vec<Value>,
    root: NodeId,
    cost: f64,
}

/// Plans the nodes of one region's extracted terms.
struct Planner<'a> {
    graph: &'a Graph,
    egraph: &'a TensorGraph,
    extractor: Extractor<'a, KernelCost<'a>, TensorLang, super::analysis::ShapeAnalysis>,
    /// The value standing for each (canonical) class planned so far.
    built: HashMap<Id, Value>,
    /// The region's nodes by what they compute: op (with attributes) and operands.
    originals: HashMap<(String, Vec<Value>), NodeId>,
    leaves: &'a [NodeId],
    planned: Vec<PlannedNode>,
}

impl Planner<'_> {
    /// Whether `value` is defined at `root` (before it, or `root` itself).
    fn defined_at(&self, value: &Value, root: &NodeId) -> Result<bool> {
        let node = match value {
            Value::Node(node) => node,
            Value::Planned(i) => &self.planned[*i].root,
        };
        Ok(node == root || self.graph.precedes(node, root)?)
    }

    /// The value computing the best term of `class` at `root`; `None` when the term needs a
    /// value that is not defined before `root`.
    fn plan(&mut self, class: Id, root: &NodeId) -> Result<Option<Value>> {
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
                let value = Value::Node(*node);
                if !self.defined_at(&value, root)? {
                    return Ok(None);
                }
                self.built.insert(class, value);
                continue;
            }
            let Some((op, operands)) = op_of(self.egraph, &enode) else {
                return Ok(None);
            };
            let operands: Vec<Id> = operands.iter().map(|&c| self.egraph.find(c)).collect();
            if !ready {
                // A class met again while its operands are being planned is a cycle.
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
            let key = (format!("{op:?}"), values);
            let original = self.originals.get(&key).map(|o| Value::Node(*o));
            let value = match original {
                Some(original) if self.defined_at(&original, root)? => original,
                _ => {
                    let Some(meta) = meta_of(self.egraph, &enode) else {
                        return Ok(None);
                    };
                    self.planned.push(PlannedNode {
                        cost: op_cost(&op, &meta),
                        op,
                        operands: key.1,
                        root: *root,
                    });
                    Value::Planned(self.planned.len() - 1)
                }
            };
            self.built.insert(class, value);
        }
        Ok(self.built.get(&class).cloned())
    }
}

/// The uses of the region's values after the planned rewrite, and which nodes die.
struct UseModel {
    operands: HashMap<Value, Vec<Value>>,
    users: HashMap<Value, HashSet<Value>>,
    /// Nodes that may be erased once unused: the region's nodes that had users (nodes dead
    /// before stay: removing them is dead code elimination's job) and every planned node.
    erasable: HashSet<Value>,
}

impl UseModel {
    fn new(graph: &Graph, region: &Region, planned: &[PlannedNode]) -> Result<Self> {
        let mut model = UseModel {
            operands: HashMap::new(),
            users: HashMap::new(),
            erasable: HashSet::new(),
        };
        for id in &region.nodes {
            let value = Value::Node(*id);
            let users: HashSet<Value> = graph.users(id)?.into_iter().map(Value::Node).collect();
            if !users.is_empty() {
                model.erasable.insert(value.clone());
            }
            let operands = graph.operands(id)?.into_iter().map(Value::Node).collect();
            model.operands.insert(value.clone(), operands);
            model.users.entry(value).or_default().extend(users);
        }
        for (i, node) in planned.iter().enumerate() {
            let value = Value::Planned(i);
            for operand in &node.operands {
                model
                    .users
                    .entry(operand.clone())
                    .or_default()
                    .insert(value.clone());
            }
            model.operands.insert(value.clone(), node.operands.clone());
            model.users.entry(value.clone()).or_default();
            model.erasable.insert(value);
        }
        Ok(model)
    }

    /// Moves every use of `old` to `new`, as `Graph::replace_all_uses_with` does.
    fn replace_all_uses_with(&mut self, old: &Value, new: &Value) {
        let moved: Vec<Value> = self
            .users
            .get_mut(old)
            .map(|users| {
                let moved = users.iter().filter(|u| *u != new).cloned().collect();
                users.retain(|u| u == new);
                moved
            })
            .unwrap_or_default();
        for user in moved {
            if let Some(operands) = self.operands.get_mut(&user) {
                for operand in operands.iter_mut().filter(|o| *o == old) {
                    *operand = new.clone();
                }
            }
            self.users.entry(new.clone()).or_default().insert(user);
        }
    }

    /// The erasable nodes nobody uses, directly or through other such nodes, in an order that
    /// erases every user before what it uses.
    fn dead(&mut self) -> Vec<Value> {
        let mut work: Vec<Value> = self
            .erasable
            .iter()
            .filter(|v| self.users.get(*v).is_none_or(HashSet::is_empty))
            .cloned()
            .collect();
        let mut dead = Vec::new();
        let mut seen = HashSet::new();
        while let Some(value) = work.pop() {
            if !seen.insert(value.clone()) {
                continue;
            }
            for operand in self.operands.get(&value).cloned().unwrap_or_default() {
                let Some(users) = self.users.get_mut(&operand) else {
                    continue;
                };
                users.remove(&value);
                if users.is_empty() && self.erasable.contains(&operand) {
                    work.push(operand);
                }
            }
            dead.push(value);
        }
        dead
    }
}

/// The root replacements (root, new value) of `region` and the nodes they need.
type Plan = (Vec<(Value, Value)>, Vec<PlannedNode>);

/// Plans the best term of every root of `region` that has users.
fn plan_region(
    graph: &Graph,
    region: &Region,
    egraph: &TensorGraph,
    class_of: &HashMap<NodeId, Id>,
    cost: KernelCost<'_>,
) -> Result<Plan> {
    let mut originals = HashMap::new();
    for id in &region.nodes {
        if let NodeKind::CallFunction { op } = &graph.node(id)?.kind {
            let operands = graph.operands(id)?.into_iter().map(Value::Node).collect();
            originals
                .entry((format!("{op:?}"), operands))
                .or_insert_with(|| *id);
        }
    }
    let mut planner = Planner {
        graph,
        egraph,
        extractor: Extractor::new(egraph, cost),
        built: HashMap::new(),
        originals,
        leaves: &region.leaves,
        planned: Vec::new(),
    };
    let mut replacements = Vec::new();
    for root in &region.roots {
        if graph.users(root)?.is_empty() {
            continue;
        }
        let Some(&class) = class_of.get(root) else {
            continue;
        };
        let root_value = Value::Node(*root);
        if let Some(value) = planner.plan(class, root)?
            && value != root_value
        {
            replacements.push((root_value, value));
        }
    }
    Ok((replacements, planner.planned))
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
    let (replacements, planned) = plan_region(graph, region, egraph, class_of, cost)?;
    if replacements.is_empty() {
        return Ok(false);
    }

    let mut model = UseModel::new(graph, region, &planned)?;
    for (root, value) in &replacements {
        model.replace_all_uses_with(root, value);
    }
    let dead = model.dead();
    let dead_set: HashSet<&Value> = dead.iter().collect();
    let cost_before = cost_of(graph, region.nodes.iter())?;
    let surviving_region = region
        .nodes
        .iter()
        .filter(|id| !dead_set.contains(&Value::Node(*(*id))));
    let surviving_planned = (0..planned.len()).filter(|i| !dead_set.contains(&Value::Planned(*i)));
    let cost_after = cost_of(graph, surviving_region)?
        + surviving_planned
            .clone()
            .map(|i| planned[i].cost)
            .sum::<f64>();
    if cost_after >= cost_before {
        return Ok(false);
    }

    let mut inserted: HashMap<usize, NodeId> = HashMap::new();
    let resolve = |inserted: &HashMap<usize, NodeId>, value: &Value| match value {
        Value::Node(node) => Ok(*node),
        Value::Planned(i) => inserted.get(i).cloned().ok_or_else(|| {
            PassError::Unsupported(format!(
                "simplify: a rewrite of the region at {:?} reads a value it dropped",
                region.nodes[0]
            ))
        }),
    };
    for i in surviving_planned {
        let node = &planned[i];
        let operands = node
            .operands
            .iter()
            .map(|o| resolve(&inserted, o))
            .collect::<Result<Vec<NodeId>>>()?;
        let refs: Vec<&NodeId> = operands.iter().collect();
        let id = graph.insert_before(&node.root, |g| g.call_function(node.op.clone(), &refs))?;
        inserted.insert(i, id);
    }
    for (root, value) in &replacements {
        let (root, value) = (resolve(&inserted, root)?, resolve(&inserted, value)?);
        graph.replace_all_uses_with(&root, &value)?;
    }
    for value in &dead {
        if let Value::Node(id) = value {
            graph.erase(id)?;
        }
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
