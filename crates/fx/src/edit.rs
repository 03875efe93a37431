//! The editing API for pass authors: inserting at a chosen place, rewiring uses, erasing, and
//! copying nodes within a graph or from another graph.

use crate::graph::Cursor;
use crate::{FxError, Graph, Node, NodeId, NodeKind, Result};
use petgraph::Direction;
use petgraph::stable_graph::NodeIndex;
use petgraph::visit::EdgeRef;
use std::collections::{HashMap, HashSet};

/// Maps nodes of a source graph to the nodes that stand for them in the graph being built.
pub type ValueMap = HashMap<NodeId, NodeId>;

/// A node to copy: its id, the node, and its operands' ids with their printed names.
type Snapshot = (NodeId, Node, Vec<(NodeId, String)>);

impl Graph {
    /// Runs `build` with new nodes inserted just before `node`, in the order `build` adds them
    /// (FX's `with graph.inserting_before(node)`).
    pub fn insert_before<T>(
        &mut self,
        node: &NodeId,
        build: impl FnOnce(&mut Graph) -> Result<T>,
    ) -> Result<T> {
        let at = self.index(node)?;
        self.with_cursor(Cursor::Before(at), build)
    }

    /// Runs `build` with new nodes inserted just after `node`, in the order `build` adds them.
    pub fn insert_after<T>(
        &mut self,
        node: &NodeId,
        build: impl FnOnce(&mut Graph) -> Result<T>,
    ) -> Result<T> {
        let at = self.index(node)?;
        self.with_cursor(Cursor::After(at), build)
    }

    fn with_cursor<T>(
        &mut self,
        cursor: Cursor,
        build: impl FnOnce(&mut Graph) -> Result<T>,
    ) -> Result<T> {
        let saved = std::mem::replace(&mut self.cursor, cursor);
        let result = build(self);
        self.cursor = saved;
        result
    }

    /// Makes every user of `old` use `new` instead, except `new` itself (so that
    /// `replace_all_uses_with(x, relu(x))` wraps `x`); returns how many operands changed.
    pub fn replace_all_uses_with(&mut self, old: &NodeId, new: &NodeId) -> Result<usize> {
        let (old, new) = (self.index(old)?, self.index(new)?);
        let uses: Vec<_> = self
            .graph
            .edges_directed(old, Direction::Outgoing)
            .filter(|e| e.target() != new)
            .map(|e| (e.id(), e.target(), *e.weight()))
            .collect();
        for &(edge, user, position) in &uses {
            self.graph.remove_edge(edge);
            self.graph.add_edge(new, user, position);
        }
        Ok(uses.len())
    }

    /// Makes operand `position` of `node` be `value`.
    pub fn set_operand(&mut self, node: &NodeId, position: usize, value: &NodeId) -> Result<()> {
        let (node, value) = (self.index(node)?, self.index(value)?);
        let old = self
            .graph
            .edges_directed(node, Direction::Incoming)
            .find(|e| *e.weight() as usize == position)
            .map(|e| e.id());
        if let Some(edge) = old {
            self.graph.remove_edge(edge);
        }
        self.graph.add_edge(value, node, position as u32);
        Ok(())
    }

    /// Removes a node that nothing uses; a node with users is refused, naming them.
    pub fn erase(&mut self, node: &NodeId) -> Result<Node> {
        let i = self.index(node)?;
        let users = self.user_indices(i);
        if !users.is_empty() {
            return Err(FxError::EraseWithUsers {
                node: self.display(node),
                users: users
                    .into_iter()
                    .map(|u| format!("%{}", self.graph[u].name))
                    .collect(),
            });
        }
        if matches!(self.cursor, Cursor::Before(c) | Cursor::After(c) if c == i) {
            self.cursor = Cursor::End;
        }
        self.order.remove(i);
        let removed = self
            .graph
            .remove_node(i)
            .ok_or_else(|| FxError::UnknownNode {
                node: format!("node #{}", i.index()),
            })?;
        self.names.remove(&removed.name);
        self.clear_stamp(i);
        Ok(removed)
    }

    /// Copies `nodes` of this graph at the insertion point, with fresh names and the same kind,
    /// metas and metadata. Operands are taken from `value_map` (filled with each copy), else
    /// the copied operand; an operand outside the copied set and the map is an error.
    pub fn copy_subgraph(
        &mut self,
        nodes: &[NodeId],
        value_map: &mut ValueMap,
    ) -> Result<Vec<NodeId>> {
        let snapshot = self.snapshot(nodes)?;
        self.copy_nodes(snapshot, value_map)
    }

    /// Appends the nodes of `other` (FX's `graph_copy`): its placeholders must be mapped in
    /// `value_map`; its output is not copied, and the mapped values it returns are returned.
    pub fn append_graph(&mut self, other: &Graph, value_map: &mut ValueMap) -> Result<Vec<NodeId>> {
        self.append_graph_with(other, value_map, |g, node, operands| {
            let operands = g.indices(&operands.iter().collect::<Vec<_>>())?;
            g.insert_copy(node.clone(), &operands)
        })
    }

    /// Appends `other` node by node, in order, through `build`, which makes the node standing
    /// for each one from the node and its operands' new values: the one copy loop that
    /// [`Graph::append_graph`], subgraph rewriting, inlining and the transformer share.
    /// Placeholders mapped in `value_map` are skipped (the others go to `build`), every new
    /// value is recorded in `value_map`, and the output's mapped operands are returned (none
    /// when `other` has no output).
    pub fn append_graph_with(
        &mut self,
        other: &Graph,
        value_map: &mut ValueMap,
        mut build: impl FnMut(&mut Graph, &Node, &[NodeId]) -> Result<NodeId>,
    ) -> Result<Vec<NodeId>> {
        for id in other.nodes() {
            let node = other.node(&id)?;
            if matches!(node.kind, NodeKind::Placeholder { .. }) && value_map.contains_key(&id) {
                continue;
            }
            let operands = other
                .operands(&id)?
                .iter()
                .map(|o| {
                    value_map
                        .get(o)
                        .copied()
                        .ok_or_else(|| FxError::UnmappedOperand {
                            node: other.display(&id),
                            operand: other.display(o),
                        })
                })
                .collect::<Result<Vec<_>>>()?;
            if node.kind == NodeKind::Output {
                return Ok(operands);
            }
            let new = build(self, node, &operands)?;
            value_map.insert(id, new);
        }
        Ok(Vec::new())
    }

    /// The nodes (in node order), their contents and operands, detached from the graph.
    fn snapshot(&self, nodes: &[NodeId]) -> Result<Vec<Snapshot>> {
        let chosen: HashSet<NodeIndex<u32>> = self
            .indices(&nodes.iter().collect::<Vec<_>>())?
            .into_iter()
            .collect();
        Ok(self
            .order
            .iter()
            .filter(|i| chosen.contains(i))
            .map(|i| {
                let operands = self
                    .operand_indices(i)
                    .into_iter()
                    .map(|o| (self.id(o), format!("%{}", self.graph[o].name)));
                (self.id(i), self.graph[i].clone(), operands.collect())
            })
            .collect())
    }

    fn copy_nodes(
        &mut self,
        snapshot: Vec<Snapshot>,
        value_map: &mut ValueMap,
    ) -> Result<Vec<NodeId>> {
        let mut copies = Vec::with_capacity(snapshot.len());
        for (original, node, operands) in snapshot {
            let operands = operands
                .iter()
                .map(|(o, operand_name)| {
                    let mapped = value_map.get(o).ok_or_else(|| FxError::UnmappedOperand {
                        node: format!("%{}", node.name),
                        operand: operand_name.clone(),
                    })?;
                    self.index(mapped)
                })
                .collect::<Result<Vec<_>>>()?;
            let copy = self.insert_copy(node, &operands)?;
            value_map.insert(original, copy);
            copies.push(copy);
        }
        Ok(copies)
    }

    /// Inserts a copy of `node` (fresh name, same kind, metas and metadata) on `operands`.
    fn insert_copy(&mut self, node: Node, operands: &[NodeIndex<u32>]) -> Result<NodeId> {
        let name = self.fresh_name(&node.name);
        let kind = match node.kind {
            NodeKind::Placeholder { .. } => NodeKind::Placeholder {
                target: name.clone(),
            },
            kind => kind,
        };
        let copy = self.insert(name, kind, node.meta, operands);
        let i = self.index(&copy)?;
        self.graph[i].metadata = node.metadata;
        Ok(copy)
    }
}
