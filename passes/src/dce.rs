//! Dead code elimination: erases nodes whose values nobody uses. It keeps placeholders, the
//! output and ops the op table says are not pure (training-mode dropout draws from the global
//! generator, so removing it would change later random numbers; custom ops that declare no
//! effects may do anything); it treats call_module nodes as pure, which holds for eval graphs
//! of this crate's leaf modules.

use crate::{Changed, Pass, Result};
use tessera_fx::{Graph, GraphModule, Node, NodeKind};

/// Dead code elimination.
pub struct DeadCodeElimination;

/// Whether erasing `node` when it has no users could change what the program does.
pub(crate) fn has_side_effects(node: &Node) -> bool {
    match &node.kind {
        NodeKind::Placeholder { .. } | NodeKind::Output => true,
        NodeKind::CallFunction { op } => !op.is_pure(),
        NodeKind::GetAttr { .. } | NodeKind::CallModule { .. } | NodeKind::GetItem { .. } => false,
    }
}

/// Erases every dead node in one backward sweep (a node's users come after it, so by the time
/// it is visited, dead users have already gone); returns how many were erased.
pub(crate) fn eliminate_dead_code(graph: &mut Graph) -> Result<usize> {
    let order: Vec<_> = graph.nodes().collect();
    let mut erased = 0;
    for id in order.iter().rev() {
        if has_side_effects(graph.node(id)?) || !graph.users(id)?.is_empty() {
            continue;
        }
        graph.erase(id)?;
        erased += 1;
    }
    Ok(erased)
}

impl Pass for DeadCodeElimination {
    fn name(&self) -> &'static str {
        "dead_code_elimination"
    }

    fn run(&self, gm: &mut GraphModule) -> Result<Changed> {
        Ok(Changed::from_bool(eliminate_dead_code(&mut gm.graph)? > 0))
    }
}
