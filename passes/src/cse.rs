//! Common subexpression elimination: merges call_function and getitem nodes that compute the
//! same op with the same attributes on the same operands into the first of them. It leaves
//! placeholders, get_attr and call_module nodes alone (a module may hold state or hooks), and
//! never merges ops the op table says are not pure (training dropout, custom ops with unknown
//! effects).

use crate::{Changed, Pass, Result};
use std::collections::HashMap;
use tessera_fx::{GraphModule, NodeId, NodeKind};

/// Common subexpression elimination.
pub struct CommonSubexpressionElimination;

/// The identity of a value a node computes: its op (with attributes) and its operands; `None`
/// for nodes that must never be merged.
fn key(kind: &NodeKind, operands: &[NodeId]) -> Option<String> {
    let what = match kind {
        NodeKind::CallFunction { op } => match op {
            op if !op.is_pure() => return None,
            op => format!("{op:?}"),
        },
        NodeKind::GetItem { index } => format!("getitem[{index}]"),
        _ => return None,
    };
    let operands: Vec<String> = operands.iter().map(|o| o.to_string()).collect();
    Some(format!("{what}({})", operands.join(", ")))
}

impl Pass for CommonSubexpressionElimination {
    fn name(&self) -> &'static str {
        "common_subexpression_elimination"
    }

    /// Visits nodes in order, so a duplicate's operands have already been merged and chains of
    /// duplicates collapse in one run.
    fn run(&self, gm: &mut GraphModule) -> Result<Changed> {
        let graph = &mut gm.graph;
        let order: Vec<NodeId> = graph.nodes().collect();
        let mut seen: HashMap<String, NodeId> = HashMap::new();
        let mut changed = false;
        for id in order {
            let Some(k) = key(&graph.node(&id)?.kind, &graph.operands(&id)?) else {
                continue;
            };
            match seen.get(&k) {
                Some(first) if graph.node(first)?.meta == graph.node(&id)?.meta => {
                    graph.replace_all_uses_with(&id, first)?;
                    graph.erase(&id)?;
                    changed = true;
                }
                Some(_) => {}
                None => {
                    seen.insert(k, id);
                }
            }
        }
        Ok(Changed::from_bool(changed))
    }
}
