//! The tensors `get_attr` nodes read: finding them, and pointing an operand at a new constant
//! the graph module owns (so that passes never change the traced model's parameters).

use crate::{PassError, Result};
use tessera_fx::{GraphModule, NodeId, NodeKind};
use tessera_nn::ModuleExt;
use tessera_tensor::{Tensor, TensorMeta};

/// The current value of the parameter, buffer or constant `target`.
pub(crate) fn attribute(gm: &GraphModule, target: &str) -> Result<Tensor> {
    if let Ok(p) = gm.get_parameter(target) {
        return Ok(p.tensor().clone());
    }
    if let Ok(b) = gm.get_buffer(target) {
        return Ok(b);
    }
    gm.constants.get(target).cloned().ok_or_else(|| {
        PassError::Unsupported(format!("no parameter, buffer or constant `{target}`"))
    })
}

/// The `get_attr` target of `id`, if it is a `get_attr` node.
pub(crate) fn attr_target(gm: &GraphModule, id: &NodeId) -> Result<Option<String>> {
    Ok(match &gm.graph.node(id)?.kind {
        NodeKind::GetAttr { target } => Some(target.clone()),
        _ => None,
    })
}

/// The targets of `operands`, if all are `get_attr` nodes.
pub(crate) fn attr_targets(gm: &GraphModule, operands: &[NodeId]) -> Result<Option<Vec<String>>> {
    let mut targets = Vec::new();
    for o in operands {
        match attr_target(gm, o)? {
            Some(t) => targets.push(t),
            None => return Ok(None),
        }
    }
    Ok(Some(targets))
}

/// Stores `value` as a new constant of the graph module named `name` (made unique) and reads
/// it with a `get_attr` node inserted before `before`; returns that node.
pub(crate) fn insert_constant(
    gm: &mut GraphModule,
    name: &str,
    value: Tensor,
    before: &NodeId,
) -> Result<NodeId> {
    let name = gm.fresh_name(name);
    let meta = TensorMeta::new(value.shape(), value.dtype());
    gm.constants.insert(name.clone(), value);
    Ok(gm
        .graph
        .insert_before(before, |g| g.get_attr(&name, meta))?)
}

/// Makes operand `position` of `node` read `value` from a new constant named after the old
/// operand's target with `suffix` (`conv1.weight` -> `conv1_weight_pruned`); the old `get_attr`
/// is erased when nothing else reads it.
pub(crate) fn replace_with_constant(
    gm: &mut GraphModule,
    node: &NodeId,
    position: usize,
    value: Tensor,
    suffix: &str,
) -> Result<()> {
    let old = gm.graph.operands(node)?[position];
    let base = attr_target(gm, &old)?
        .unwrap_or_else(|| gm.graph.name(&old).map(str::to_string).unwrap_or_default());
    let new = insert_constant(gm, &format!("{base}_{suffix}"), value, node)?;
    gm.graph.set_operand(node, position, &new)?;
    if gm.graph.users(&old)?.is_empty() && attr_target(gm, &old)?.is_some() {
        gm.graph.erase(&old)?;
    }
    Ok(())
}
