//! [`Graph`]: nodes in a petgraph `StableDiGraph` (edges run operand -> user, weighted by operand
//! position) plus the node order, unique names, and the builders that append nodes.

use crate::names::{fresh_name, is_identifier};
use crate::order::NodeOrder;
use crate::{FxError, Node, NodeId, NodeKind, Result};
use petgraph::Direction;
use petgraph::stable_graph::{NodeIndex, StableDiGraph};
use petgraph::visit::EdgeRef;
use std::collections::{BTreeMap, HashMap};
use tessera_nn::ModuleKind;
use tessera_tensor::{Op, TensorMeta};

/// Where builders put new nodes; see [`Graph::insert_before`] and [`Graph::insert_after`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) enum Cursor {
    #[default]
    End,
    Before(NodeIndex<u32>),
    After(NodeIndex<u32>),
}

/// A dataflow graph of tensor values, like `torch.fx.Graph`, with a shape and dtype on every
/// value. Nodes keep their insertion order (placeholders first), which is a topological order
/// in a valid graph; names are unique and, once a transform has built the graph, never change.
#[derive(Debug, Clone, Default)]
pub struct Graph {
    pub(crate) graph: StableDiGraph<Node, u32>,
    pub(crate) order: NodeOrder,
    pub(crate) names: HashMap<String, NodeIndex<u32>>,
    /// The stamp of the node in each slot (0 for a vacant slot); see [`NodeId`].
    stamps: Vec<u32>,
    counters: HashMap<String, usize>,
    pub(crate) cursor: Cursor,
    /// The buffers the trailing outputs are written into (see [`Graph::buffer_mutations`]).
    pub(crate) mutations: Vec<String>,
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a graph input named `name` (made unique if taken) after the other inputs.
    pub fn placeholder(&mut self, name: &str, meta: TensorMeta) -> NodeId {
        let name = self.fresh_name(name);
        let kind = NodeKind::Placeholder {
            target: name.clone(),
        };
        self.insert(name, kind, vec![meta], &[])
    }

    /// Reads the parameter or buffer at the qualified path `target` (`conv1.weight`).
    pub fn get_attr(&mut self, target: &str, meta: TensorMeta) -> Result<NodeId> {
        check_path(target)?;
        let name = self.fresh_name(target);
        let kind = NodeKind::GetAttr {
            target: target.into(),
        };
        Ok(self.insert(name, kind, vec![meta], &[]))
    }

    /// Calls the leaf submodule at `target`, of `kind` and printed as `module_repr`
    /// (`Conv2d(3, 16, kernel_size=(3, 3))`), yielding values of the given metas. The repr must
    /// be one printable line starting with the kind's name, so the printed graph parses back
    /// to the same kind.
    pub fn call_module(
        &mut self,
        target: &str,
        kind: ModuleKind,
        module_repr: &str,
        operands: &[&NodeId],
        meta: Vec<TensorMeta>,
    ) -> Result<NodeId> {
        check_path(target)?;
        match module_kind_of_repr(module_repr) {
            None => {
                return Err(FxError::InvalidModuleRepr {
                    target: target.into(),
                    repr: module_repr.into(),
                });
            }
            Some(printed) if printed != kind => {
                return Err(FxError::ModuleKindMismatch {
                    target: target.into(),
                    kind,
                    repr: module_repr.into(),
                });
            }
            Some(_) => {}
        }
        let operands = self.indices(operands)?;
        let name = self.fresh_name(target);
        for &o in &operands {
            self.single_meta(&name, o)?;
        }
        let kind = NodeKind::CallModule {
            target: target.into(),
            kind,
            module_repr: module_repr.into(),
        };
        Ok(self.insert(name, kind, meta, &operands))
    }

    /// Calls `op` on `operands`, named after the op; the output metas come from the op's meta
    /// function, whose errors name the node and the operand shapes.
    pub fn call_function(&mut self, op: Op, operands: &[&NodeId]) -> Result<NodeId> {
        let name = op.name();
        self.call_function_named(&name, op, operands)
    }

    /// [`Graph::call_function`] with a chosen name (made unique if taken).
    pub fn call_function_named(
        &mut self,
        name: &str,
        op: Op,
        operands: &[&NodeId],
    ) -> Result<NodeId> {
        let operands = self.indices(operands)?;
        let name = self.fresh_name(name);
        let metas = operands
            .iter()
            .map(|&o| self.single_meta(&name, o))
            .collect::<Result<Vec<_>>>()?;
        let meta = op.meta(&metas).map_err(|source| FxError::OpMeta {
            node: format!("%{name}"),
            op: op.name(),
            shapes: crate::print::metas_list(&metas),
            source: Box::new(source),
        })?;
        Ok(self.insert(name, NodeKind::CallFunction { op }, meta, &operands))
    }

    /// Value `index` of a multi-output node.
    pub fn getitem(&mut self, operand: &NodeId, index: usize) -> Result<NodeId> {
        let o = self.index(operand)?;
        let name = self.fresh_name("getitem");
        let metas = &self.graph[o].meta;
        let meta = metas
            .get(index)
            .cloned()
            .ok_or_else(|| FxError::GetItemOutOfRange {
                node: format!("%{name}"),
                operand: self.display(operand),
                index,
                count: metas.len(),
            })?;
        Ok(self.insert(name, NodeKind::GetItem { index }, vec![meta], &[o]))
    }

    /// The graph's results (`return %a` or `return (%a, %b)`).
    pub fn output(&mut self, operands: &[&NodeId]) -> Result<NodeId> {
        let operands = self.indices(operands)?;
        let name = self.fresh_name("output");
        Ok(self.insert(name, NodeKind::Output, Vec::new(), &operands))
    }

    /// Replaces the shapes and dtypes a node yields (shape propagation does this).
    pub fn set_meta(&mut self, id: &NodeId, meta: Vec<TensorMeta>) -> Result<()> {
        let i = self.index(id)?;
        self.graph[i].meta = meta;
        Ok(())
    }

    /// Replaces the op of a `call_function` node, keeping its operands, name and metas: for
    /// passes that change an attribute (a reshape's sizes after pruning) and then re-derive
    /// every meta with [`crate::shape_prop::propagate_shapes`].
    pub fn set_op(&mut self, id: &NodeId, op: Op) -> Result<()> {
        let i = self.index(id)?;
        match &mut self.graph[i].kind {
            NodeKind::CallFunction { op: old } => {
                *old = op;
                Ok(())
            }
            other => {
                let opcode = other.opcode();
                Err(FxError::NotCallFunction {
                    node: self.display(id),
                    opcode,
                })
            }
        }
    }

    /// The node behind an id.
    pub fn node(&self, id: &NodeId) -> Result<&Node> {
        Ok(&self.graph[self.index(id)?])
    }

    /// The free-form metadata of a node, to edit.
    pub fn metadata_mut(&mut self, id: &NodeId) -> Result<&mut BTreeMap<String, String>> {
        let i = self.index(id)?;
        Ok(&mut self.graph[i].metadata)
    }

    /// The node named `name` (without `%`), if any.
    pub fn find(&self, name: &str) -> Option<NodeId> {
        self.names.get(name).map(|&i| self.id(i))
    }

    /// All nodes in node order (insertion order, placeholders first).
    pub fn nodes(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.order.iter().map(|i| self.id(i))
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether the graph has no node.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The graph inputs, in order.
    pub fn placeholders(&self) -> Vec<NodeId> {
        self.nodes_where(|n| matches!(n.kind, NodeKind::Placeholder { .. }))
    }

    /// The first output node, if any.
    pub fn output_node(&self) -> Option<NodeId> {
        self.nodes_where(|n| n.kind == NodeKind::Output)
            .into_iter()
            .next()
    }

    /// The module a node belongs to by its weights: a `call_module`'s target, else the path
    /// before the last `.` of its first `get_attr` operand (`conv1` for `conv1.weight`).
    pub fn weights_module(&self, id: &NodeId) -> Option<String> {
        if let NodeKind::CallModule { target, .. } = &self.node(id).ok()?.kind {
            return Some(target.clone());
        }
        self.operands(id)
            .ok()?
            .iter()
            .find_map(|o| match &self.node(o).ok()?.kind {
                NodeKind::GetAttr { target } => target.rsplit_once('.').map(|(m, _)| m.to_string()),
                _ => None,
            })
    }

    /// The operands of a node, by position.
    pub fn operands(&self, id: &NodeId) -> Result<Vec<NodeId>> {
        let i = self.index(id)?;
        Ok(self.ids(self.operand_indices(i)))
    }

    /// The nodes that use a node, each once, in node order.
    pub fn users(&self, id: &NodeId) -> Result<Vec<NodeId>> {
        let i = self.index(id)?;
        Ok(self.ids(self.user_indices(i)))
    }

    /// Whether `a` comes before `b` in the node order (in constant time; false when equal).
    pub fn precedes(&self, a: &NodeId, b: &NodeId) -> Result<bool> {
        let key = |id| {
            let i = self.index(id)?;
            self.order.key(i).ok_or_else(|| FxError::UnknownNode {
                node: format!("node #{}", i.index()),
            })
        };
        Ok(key(a)? < key(b)?)
    }

    /// Whether two graphs have the same nodes in the same order with the same names, kinds,
    /// metas and operands (metadata aside).
    pub fn same_structure(&self, other: &Graph) -> bool {
        self.shape_eq(other, false)
    }

    fn shape_eq(&self, other: &Graph, with_metadata: bool) -> bool {
        self.len() == other.len()
            && self.mutations == other.mutations
            && self.order.iter().zip(other.order.iter()).all(|(a, b)| {
                let (na, nb) = (&self.graph[a], &other.graph[b]);
                let names = |g: &Graph, i| -> Vec<String> {
                    g.operand_indices(i)
                        .into_iter()
                        .map(|o| g.graph[o].name.clone())
                        .collect()
                };
                na.name == nb.name
                    && na.kind == nb.kind
                    && na.meta == nb.meta
                    && (!with_metadata || na.metadata == nb.metadata)
                    && names(self, a) == names(other, b)
            })
    }

    pub(crate) fn nodes_where(&self, keep: impl Fn(&Node) -> bool) -> Vec<NodeId> {
        self.order
            .iter()
            .filter(|&i| keep(&self.graph[i]))
            .map(|i| self.id(i))
            .collect()
    }

    /// The ids of `indices`, in order.
    fn ids(&self, indices: Vec<NodeIndex<u32>>) -> Vec<NodeId> {
        indices.into_iter().map(|i| self.id(i)).collect()
    }

    pub(crate) fn id(&self, index: NodeIndex<u32>) -> NodeId {
        NodeId {
            index,
            stamp: self.stamps.get(index.index()).copied().unwrap_or(0),
        }
    }

    pub(crate) fn index(&self, id: &NodeId) -> Result<NodeIndex<u32>> {
        let live = self.graph.contains_node(id.index)
            && self.stamps.get(id.index.index()) == Some(&id.stamp);
        if live {
            Ok(id.index)
        } else {
            Err(FxError::UnknownNode {
                node: format!("node #{}", id.index.index()),
            })
        }
    }

    /// The name of node `id` (without the `%`).
    pub fn name(&self, id: &NodeId) -> Result<&str> {
        Ok(&self.graph[self.index(id)?].name)
    }

    /// Node `id` as the IR writes it, `%name`, or `%?` for an id that is not of this graph.
    pub fn display(&self, id: &NodeId) -> String {
        match self.name(id) {
            Ok(name) => format!("%{name}"),
            Err(_) => "%?".into(),
        }
    }

    /// Forgets the stamp of a removed node's slot.
    pub(crate) fn clear_stamp(&mut self, index: NodeIndex<u32>) {
        if let Some(s) = self.stamps.get_mut(index.index()) {
            *s = 0;
        }
    }

    pub(crate) fn indices(&self, ids: &[&NodeId]) -> Result<Vec<NodeIndex<u32>>> {
        ids.iter().map(|id| self.index(id)).collect()
    }

    pub(crate) fn operand_indices(&self, i: NodeIndex<u32>) -> Vec<NodeIndex<u32>> {
        let mut edges: Vec<(u32, NodeIndex<u32>)> = self
            .graph
            .edges_directed(i, Direction::Incoming)
            .map(|e| (*e.weight(), e.source()))
            .collect();
        edges.sort();
        edges.into_iter().map(|(_, o)| o).collect()
    }

    pub(crate) fn user_indices(&self, i: NodeIndex<u32>) -> Vec<NodeIndex<u32>> {
        let mut users: Vec<NodeIndex<u32>> = self
            .graph
            .edges_directed(i, Direction::Outgoing)
            .map(|e| e.target())
            .collect();
        users.sort();
        users.dedup();
        if users.len() > 1 {
            users.sort_by_key(|&u| self.order.key(u).unwrap_or(u64::MAX));
        }
        users
    }

    /// The one meta of an operand of `user`, or an error if it yields several values.
    pub(crate) fn single_meta(&self, user: &str, operand: NodeIndex<u32>) -> Result<TensorMeta> {
        let node = &self.graph[operand];
        match node.meta.as_slice() {
            [meta] => Ok(meta.clone()),
            metas => Err(FxError::MultiValueOperand {
                node: format!("%{user}"),
                operand: format!("%{}", node.name),
                count: metas.len(),
            }),
        }
    }

    /// Gives a node a new name (made unique), while a transform is still building the graph
    /// (the autodiff names each gradient after its value once it is complete). Placeholders
    /// keep theirs, since it is their target.
    pub(crate) fn rename(&mut self, id: &NodeId, candidate: &str) -> Result<()> {
        let i = self.index(id)?;
        if matches!(self.graph[i].kind, NodeKind::Placeholder { .. }) {
            return Ok(());
        }
        let name = self.fresh_name(candidate);
        let old = std::mem::replace(&mut self.graph[i].name, name.clone());
        self.names.remove(&old);
        self.names.insert(name, i);
        Ok(())
    }

    pub(crate) fn fresh_name(&mut self, candidate: &str) -> String {
        let names = &self.names;
        fresh_name(candidate, &mut self.counters, |n| names.contains_key(n))
    }

    /// Adds a node named exactly `name` (unique by the caller) at the cursor; placeholders
    /// always go after the other placeholders, other nodes never before them.
    pub(crate) fn insert(
        &mut self,
        name: String,
        kind: NodeKind,
        meta: Vec<TensorMeta>,
        operands: &[NodeIndex<u32>],
    ) -> NodeId {
        let is_placeholder = matches!(kind, NodeKind::Placeholder { .. });
        let index = self.add_unordered(name, kind, meta, operands);
        // Placeholders stay first: the last of the leading placeholders bounds where others go.
        let last_placeholder = self
            .order
            .iter()
            .take_while(|&i| matches!(self.graph[i].kind, NodeKind::Placeholder { .. }))
            .last();
        let after_placeholders = |order: &mut NodeOrder| match last_placeholder {
            Some(p) => order.insert_after(p, index),
            None => order.insert_first(index),
        };
        let bound = last_placeholder.and_then(|p| self.order.key(p));
        let past_placeholders = |at| self.order.key(at).map(|k| bound.is_none_or(|b| k > b));
        if is_placeholder {
            after_placeholders(&mut self.order);
        } else {
            match self.cursor {
                Cursor::End => self.order.push(index),
                Cursor::Before(at) => match past_placeholders(at) {
                    Some(true) => self.order.insert_before(at, index),
                    Some(false) => after_placeholders(&mut self.order),
                    None => self.order.push(index),
                },
                Cursor::After(at) => {
                    match past_placeholders(at) {
                        Some(true) => self.order.insert_after(at, index),
                        Some(false) => after_placeholders(&mut self.order),
                        None => self.order.push(index),
                    }
                    self.cursor = Cursor::After(index);
                }
            }
        }
        self.id(index)
    }

    /// Adds a node and its operand edges without placing it in the node order.
    pub(crate) fn add_unordered(
        &mut self,
        name: String,
        kind: NodeKind,
        meta: Vec<TensorMeta>,
        operands: &[NodeIndex<u32>],
    ) -> NodeIndex<u32> {
        let node = Node {
            name: name.clone(),
            kind,
            meta,
            metadata: BTreeMap::new(),
        };
        let index = self.graph.add_node(node);
        if self.stamps.len() <= index.index() {
            self.stamps.resize(index.index() + 1, 0);
        }
        self.stamps[index.index()] = crate::node_id::fresh_stamp();
        for (position, &o) in operands.iter().enumerate() {
            self.graph.add_edge(o, index, position as u32);
        }
        self.names.insert(name, index);
        index
    }
}

impl PartialEq for Graph {
    /// Same structure and the same metadata on every node.
    fn eq(&self, other: &Self) -> bool {
        self.shape_eq(other, true)
    }
}

/// Checks a qualified path: dotted identifiers or indices (`layer1.0.conv`).
pub(crate) fn check_path(path: &str) -> Result<()> {
    let ok = !path.is_empty()
        && path.split('.').all(|part| {
            !part.is_empty() && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        });
    if ok {
        Ok(())
    } else {
        Err(FxError::InvalidPath { path: path.into() })
    }
}

/// The kind a printed module repr names (`Conv2d` of `Conv2d(3, 16)`), read from its leading
/// identifier, if the repr is one printable line: the one place a kind is read from text.
pub(crate) fn module_kind_of_repr(repr: &str) -> Option<ModuleKind> {
    if crate::lexer::balanced_len(repr) != Some(repr.len()) {
        return None;
    }
    let end = repr
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(repr.len());
    let name = &repr[..end];
    is_identifier(name).then(|| ModuleKind::from_name(name))
}
