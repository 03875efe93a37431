//! Removes eval-mode Dropout and Identity: `call_module` nodes of `Dropout` modules not in
//! training mode and of `Identity` modules, and `call_function[dropout]` with training=false
//! whose keep-mask nobody reads, each replaced by its input. Training-mode dropout, and an
//! eval dropout whose mask (getitem 1) is used, are left alone.

use crate::{Changed, Pass, Result};
use tessera_fx::{Graph, GraphModule, NodeId, NodeKind};
use tessera_nn::{Module, ModuleExt, ModuleKind};
use tessera_tensor::Op;

/// Removes Dropout and Identity in eval graphs.
pub struct RemoveDropoutIdentity;

/// Whether the call_module of `target` (of `kind`) is the identity at run time.
fn module_is_identity(root: &dyn Module, target: &str, kind: &ModuleKind) -> bool {
    match kind {
        ModuleKind::Identity => true,
        ModuleKind::Dropout => root
            .get_submodule(target)
            .map(|m| !m.is_training())
            .unwrap_or(false),
        _ => false,
    }
}

/// Replaces the eval dropout op `id` by its input: its `getitem[0]` users are rewired and
/// erased, then the op itself. Returns false (and changes nothing) if the mask is used.
fn remove_dropout_op(graph: &mut Graph, id: &NodeId, input: &NodeId) -> Result<bool> {
    let users = graph.users(id)?;
    for user in &users {
        if graph.node(user)?.kind != (NodeKind::GetItem { index: 0 }) {
            return Ok(false);
        }
    }
    for user in &users {
        graph.replace_all_uses_with(user, input)?;
        graph.erase(user)?;
    }
    graph.erase(id)?;
    Ok(true)
}

impl Pass for RemoveDropoutIdentity {
    fn name(&self) -> &'static str {
        "remove_dropout_identity"
    }

    fn run(&self, gm: &mut GraphModule) -> Result<Changed> {
        let order: Vec<NodeId> = gm.graph.nodes().collect();
        let mut changed = false;
        for id in order {
            // Removing a dropout op also erases its getitem users, which come later in order.
            if gm.graph.node(&id).is_err() {
                continue;
            }
            let operands = gm.graph.operands(&id)?;
            let [input] = operands.as_slice() else {
                continue;
            };
            match gm.graph.node(&id)?.kind.clone() {
                NodeKind::CallModule { target, kind, .. }
                    if module_is_identity(gm.as_module(), &target, &kind) =>
                {
                    gm.graph.replace_all_uses_with(&id, input)?;
                    gm.graph.erase(&id)?;
                    changed = true;
                }
                NodeKind::CallFunction { op: Op::Dropout(d) } if !d.training => {
                    changed |= remove_dropout_op(&mut gm.graph, &id, input)?;
                }
                _ => {}
            }
        }
        Ok(Changed::from_bool(changed))
    }
}
