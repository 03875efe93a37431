//! [`NodeId`]: the handle of a node, a `Copy` pair of integers as cranelift's entity ids are;
//! the node's name is held by its graph (`graph.name(id)`).

use petgraph::stable_graph::NodeIndex;
use std::sync::atomic::{AtomicU32, Ordering};

/// A node of a [`Graph`](crate::Graph): its slot in the graph and the stamp the node got when
/// it was made. Stamps are unique in the process, so an id of an erased node (whose slot a new
/// node may reuse) or of another graph is an error, never a different node; a clone of a
/// graph keeps its stamps, so ids work in clones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId {
    pub(crate) index: NodeIndex<u32>,
    pub(crate) stamp: u32,
}

const _: () = assert!(std::mem::size_of::<NodeId>() == 8);

/// A stamp no other node of this process has (wrapping after 2^32 nodes).
pub(crate) fn fresh_stamp() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
