//! [`NodeId`]: the typed handle of a node, which prints as its name in the IR (`%conv1`).

use petgraph::stable_graph::NodeIndex;
use std::fmt;
use std::sync::Arc;

/// A node of a [`Graph`](crate::Graph). It carries the node's (stable) name so that it prints
/// as the IR spells it, and the graph checks both index and name, so an id of an erased node or
/// of another graph is an error, never a different node.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId {
    pub(crate) index: NodeIndex<u32>,
    pub(crate) name: Arc<str>,
}

impl NodeId {
    /// The node's name, without the `%`.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.name)
    }
}
