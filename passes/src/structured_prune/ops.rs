//! Op-level rewrite: a pruned `conv2d`, `linear` or `batch_norm` op keeps its node and reads
//! sliced copies of its `get_attr` operands, added as new constants (`conv1_weight_pruned`); the
//! traced model's parameters are not changed.

use super::rebuild::{Keep, build_error, select, sliced_weight};
use crate::Result;
use crate::attributes::{attr_target, attribute, replace_with_constant};
use tessera_fx::{GraphModule, NodeId};
use tessera_tensor::Tensor;

/// The tensor read by operand `position` of `id`, with the `get_attr` target naming it.
fn operand_attribute(gm: &GraphModule, id: &NodeId, position: usize) -> Result<(String, Tensor)> {
    let operand = gm.graph.operands(id)?[position];
    let target = attr_target(gm, &operand)?.ok_or_else(|| {
        build_error(
            &gm.graph.display(id),
            format!("{} is not a get_attr", gm.graph.display(&operand)),
        )
    })?;
    let value = attribute(gm, &target)?;
    Ok((target, value))
}

/// The weight (operand 1) of the conv or linear op `id`.
pub(super) fn op_weight(gm: &GraphModule, id: &NodeId) -> Result<Tensor> {
    Ok(operand_attribute(gm, id, 1)?.1)
}

/// Makes the conv or linear op `id` keep output channels `out` and input channels `input`.
pub(super) fn slice_layer_op(
    gm: &mut GraphModule,
    id: &NodeId,
    out: &Keep,
    input: &Keep,
) -> Result<()> {
    let (target, weight) = operand_attribute(gm, id, 1)?;
    let weight = sliced_weight(&weight, out, input).map_err(|e| build_error(&target, e))?;
    replace_with_constant(gm, id, 1, weight, "pruned")?;
    if out.is_some() && gm.graph.operands(id)?.len() > 2 {
        let (target, bias) = operand_attribute(gm, id, 2)?;
        let bias = select(&bias, 0, out).map_err(|e| build_error(&target, e))?;
        replace_with_constant(gm, id, 2, bias, "pruned")?;
    }
    Ok(())
}

/// Makes the `batch_norm` op `id` keep channels `keep` of its statistics, weight and bias.
pub(super) fn slice_batch_norm_op(gm: &mut GraphModule, id: &NodeId, keep: &Keep) -> Result<()> {
    for position in 1..gm.graph.operands(id)?.len() {
        let (target, value) = operand_attribute(gm, id, position)?;
        let value = select(&value, 0, keep).map_err(|e| build_error(&target, e))?;
        replace_with_constant(gm, id, position, value, "pruned")?;
    }
    Ok(())
}
